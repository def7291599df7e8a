/*
 * heaptrack_read.c - memlyze import heaptrack: a heaptrack data file (what
 * heaptrack_interpret writes: plain, zstd or gzip compressed) as a trace.
 * The line format is described in heaptrack_write.c and docs/FORMAT.md.
 *
 * heaptrack records allocation infos (size, call chain), not addresses:
 * "+ N" allocates info N, "- N" frees one live allocation of info N. The
 * import gives each allocation a made-up address and frees the newest live
 * allocation of its info, which keeps every count, size, time and chain;
 * only which of several equal blocks was freed is unknown (lifetimes of
 * equal blocks from one call chain may be swapped).
 */
#include "growbuf.h"
#include "import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

typedef struct hframe { uint64_t func, file, line; } hframe;
typedef struct hip { uint64_t ip, module; size_t first, n; } hip;   /* frames[first..first+n) */
typedef struct htrace { uint64_t ip, parent; } htrace;
typedef struct hinfo { uint64_t size, trace; int64_t stack; size_t live; } hinfo;   /* live: head of its list */

typedef struct vec { void *p; size_t n, cap; } vec;

static void *vpush(vec *v, size_t elem)
{
    if (grow_to(&v->p, &v->cap, v->n + 1, elem)) return NULL;
    return (char *)v->p + elem * v->n++;
}

typedef struct hstate {
    import_job *job;
    vec strings, frames, ips, traces, infos, nodes;   /* nodes: live blocks (addr, next) */
    size_t free_node;         /* head of recycled nodes, SIZE_MAX: none */
    uint64_t next_addr, now_us;
    int version, sized;
    uint64_t bad_lines, bad_refs, unknown_frees, allocs, frees;
    int attached;
    imp_frame *chain;
    size_t chain_cap;
} hstate;

typedef struct node { uint64_t addr; size_t next; } node;

/* One hex number from *s; 0 and advances, or -1. */
static int hex(const char **s, const char *end, uint64_t *v)
{
    const char *p = *s;
    while (p < end && *p == ' ') p++;
    uint64_t x = 0;
    int digits = 0;
    for (; p < end && *p != ' '; p++, digits++) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
        if (d < 0 || digits >= 16) return -1;
        x = x << 4 | (uint64_t)d;
    }
    if (!digits) return -1;
    *s = p;
    *v = x;
    return 0;
}

static const char *str_at(hstate *h, uint64_t i)
{
    return i && i <= h->strings.n ? ((char **)h->strings.p)[i - 1] : NULL;
}

/* The memlyze stack of a trace node: its ips' frames, leaf first, walking
 * parents that were defined earlier (so it ends). */
static int64_t stack_of(hstate *h, uint64_t trace)
{
    size_t n = 0;
    char names[64][24];
    size_t nnames = 0;
    while (trace && trace <= h->traces.n) {
        const htrace *t = &((htrace *)h->traces.p)[trace - 1];
        const hip *ip = t->ip && t->ip <= h->ips.n ? &((hip *)h->ips.p)[t->ip - 1] : NULL;
        size_t want = n + (ip && ip->n ? ip->n : 1);
        if (want > h->chain_cap) {
            size_t c = want * 2;
            imp_frame *f = realloc(h->chain, c * sizeof *f);
            if (!f) return -1;
            h->chain = f;
            h->chain_cap = c;
        }
        if (!ip) {
            h->bad_refs++;
            h->chain[n++] = (imp_frame){ "??", NULL, 0, 0, 0 };
        } else if (!ip->n || !str_at(h, ((hframe *)h->frames.p)[ip->first].func)) {
            /* No function name: named by its address, as dumpalloc's NTVE. */
            const char *fn = "??";
            if (nnames < 64) {
                snprintf(names[nnames], sizeof names[nnames], "0x%llx", (unsigned long long)ip->ip);
                fn = names[nnames++];
            }
            h->chain[n++] = (imp_frame){ fn, ip->n ? str_at(h, ((hframe *)h->frames.p)[ip->first].file) : NULL,
                                         ip->n ? (uint32_t)((hframe *)h->frames.p)[ip->first].line : 0, ip->ip, 0 };
        } else {
            for (size_t k = 0; k < ip->n; k++) {
                const hframe *f = &((hframe *)h->frames.p)[ip->first + k];
                /* the first frame is inlined into the second, ..., the last is the function */
                h->chain[n++] = (imp_frame){ str_at(h, f->func), str_at(h, f->file), (uint32_t)f->line,
                                             k == 0 ? ip->ip : 0, k + 1 < ip->n };
            }
        }
        if (t->parent >= trace) {
            h->bad_refs++;   /* a parent defined later: cut, never loop */
            break;
        }
        trace = t->parent;
    }
    return imp_stack(h->job->t, h->chain, (uint32_t)n);
}

static int line_alloc(hstate *h, uint64_t idx)
{
    if (idx >= h->infos.n) return h->bad_refs++, 0;
    hinfo *in = &((hinfo *)h->infos.p)[idx];
    if (in->stack < 0 && (in->stack = stack_of(h, in->trace)) < 0) return -1;
    size_t k;
    if (h->free_node != SIZE_MAX) {
        k = h->free_node;
        h->free_node = ((node *)h->nodes.p)[k].next;
    } else {
        if (!vpush(&h->nodes, sizeof(node))) return -1;
        k = h->nodes.n - 1;
    }
    node *nd = &((node *)h->nodes.p)[k];
    nd->addr = h->next_addr += 16;
    nd->next = in->live;
    in->live = k;
    h->allocs++;
    return imp_alloc(h->job->t, h->now_us, nd->addr, in->size, (uint32_t)in->stack, 0);
}

static int line_free(hstate *h, uint64_t idx)
{
    if (idx >= h->infos.n) return h->bad_refs++, 0;
    hinfo *in = &((hinfo *)h->infos.p)[idx];
    if (in->live == SIZE_MAX) return h->unknown_frees++, 0;
    size_t k = in->live;
    node *nd = &((node *)h->nodes.p)[k];
    in->live = nd->next;
    nd->next = h->free_node;
    h->free_node = k;
    h->frees++;
    return imp_free_event(h->job->t, h->now_us, nd->addr);
}

/* One line; 0, or -1 with job->err (only for what cannot be stepped over). */
static int parse_line(hstate *h, const char *s, const char *end)
{
    if (s == end) return 0;
    char mode = *s;
    const char *p = s + 1;
    uint64_t a, b;
    switch (mode) {
    case 'v':
        if (hex(&p, end, &a) || hex(&p, end, &b)) b = 0;
        h->version = (int)b;
        h->sized = b >= 3;
        if (b < 1) return snprintf(h->job->err, sizeof h->job->err,
                                   "heaptrack file format version %llu (before heaptrack 1.0) is not supported",
                                   (unsigned long long)b), -1;
        if (b > 3) return snprintf(h->job->err, sizeof h->job->err,
                                   "heaptrack file format version %llu is newer than this reader (3)",
                                   (unsigned long long)b), -1;
        return 0;
    case 's': {
        const char *str = p + (p < end && *p == ' ');
        size_t len = (size_t)(end - str);
        if (h->sized) {
            if (hex(&p, end, &a) || p >= end || a > (uint64_t)(end - p - 1)) return h->bad_lines++, 0;
            str = p + 1;
            len = (size_t)a;
        }
        char *copy = strndup(str, len), **slot = vpush(&h->strings, sizeof(char *));
        if (!copy || !slot) return free(copy), -1;
        *slot = copy;
        return 0;
    }
    case 'i': {
        hip ip = { 0 };
        if (hex(&p, end, &ip.ip) || hex(&p, end, &ip.module)) return h->bad_lines++, 0;
        ip.first = h->frames.n;
        hframe f;
        while (!hex(&p, end, &f.func)) {
            if (hex(&p, end, &f.file) || hex(&p, end, &f.line)) f.file = f.line = 0;
            hframe *slot = vpush(&h->frames, sizeof f);
            if (!slot) return -1;
            *slot = f;
            ip.n++;
        }
        hip *slot = vpush(&h->ips, sizeof ip);
        if (!slot) return -1;
        *slot = ip;
        return 0;
    }
    case 't': {
        htrace t;
        if (hex(&p, end, &t.ip) || hex(&p, end, &t.parent)) return h->bad_lines++, 0;
        htrace *slot = vpush(&h->traces, sizeof t);
        if (!slot) return -1;
        *slot = t;
        return 0;
    }
    case 'a': {
        hinfo in = { .stack = -1, .live = SIZE_MAX };
        if (hex(&p, end, &in.size) || hex(&p, end, &in.trace)) return h->bad_lines++, 0;
        hinfo *slot = vpush(&h->infos, sizeof in);
        if (!slot) return -1;
        *slot = in;
        return 0;
    }
    case '+':
        if (hex(&p, end, &a)) return h->bad_lines++, 0;
        return line_alloc(h, a);
    case '-':
        if (hex(&p, end, &a)) return h->bad_lines++, 0;
        return line_free(h, a);
    case 'c':
        if (hex(&p, end, &a) || a > UINT64_MAX / 1000) return h->bad_lines++, 0;
        h->now_us = a * 1000;
        return 0;
    case 'X':
        if (!h->job->owned[0]) h->job->info.exe = h->job->owned[0] = strndup(p + 1 <= end ? p + 1 : p, (size_t)(end - p > 0 ? end - p - 1 : 0));
        return 0;
    case 'A':
        h->attached = 1;
        return 0;
    case 'x': case 'm':
        return snprintf(h->job->err, sizeof h->job->err,
                        "a raw heaptrack file: run `heaptrack -i FILE` (heaptrack_interpret) on it first"), -1;
    case 'I': case 'R': case 'S': case '#':
        return 0;
    default:
        h->bad_lines++;
        return 0;
    }
}

/* The file's text: decompressed when it starts with zstd's or gzip's magic. */
static int text_of(import_job *job, char **out, size_t *len)
{
    const uint8_t *d = job->data;
    size_t n = job->len;
    if (n >= 4 && d[0] == 0x28 && d[1] == 0xb5 && d[2] == 0x2f && d[3] == 0xfd) {
        ZSTD_DStream *z = ZSTD_createDStream();
        size_t cap = n * 4 + 65536, used = 0;
        char *buf = malloc(cap);
        if (!z || !buf) return free(buf), ZSTD_freeDStream(z), snprintf(job->err, sizeof job->err, "out of memory"), -1;
        ZSTD_initDStream(z);
        ZSTD_inBuffer in = { d, n, 0 };
        size_t r = 1;
        while (in.pos < in.size || r != 0) {
            if (used == cap) {
                char *b = realloc(buf, cap *= 2);
                if (!b) return free(buf), ZSTD_freeDStream(z), snprintf(job->err, sizeof job->err, "out of memory"), -1;
                buf = b;
            }
            ZSTD_outBuffer o = { buf + used, cap - used, 0 };
            r = ZSTD_decompressStream(z, &o, &in);
            used += o.pos;
            if (ZSTD_isError(r)) {
                snprintf(job->err, sizeof job->err, "zstd: %s", ZSTD_getErrorName(r));
                return free(buf), ZSTD_freeDStream(z), -1;
            }
            if (in.pos == in.size && o.pos == 0 && r != 0) {
                snprintf(job->err, sizeof job->err, "zstd: the compressed data is cut off");
                return free(buf), ZSTD_freeDStream(z), -1;
            }
        }
        ZSTD_freeDStream(z);
        *out = buf;
        *len = used;
        return 0;
    }
    if (n >= 2 && d[0] == 0x1f && d[1] == 0x8b) {
        z_stream z = { 0 };
        size_t cap = n * 4 + 65536;
        char *buf = malloc(cap);
        if (!buf || inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return free(buf), snprintf(job->err, sizeof job->err, "out of memory"), -1;
        z.next_in = (Bytef *)d;
        z.avail_in = (uInt)(n > UINT32_MAX ? UINT32_MAX : n);
        int r;
        do {
            if (z.total_out == cap) {
                char *b = realloc(buf, cap *= 2);
                if (!b) return free(buf), inflateEnd(&z), snprintf(job->err, sizeof job->err, "out of memory"), -1;
                buf = b;
            }
            z.next_out = (Bytef *)buf + z.total_out;
            z.avail_out = (uInt)(cap - z.total_out > UINT32_MAX ? UINT32_MAX : cap - z.total_out);
            r = inflate(&z, Z_NO_FLUSH);
        } while (r == Z_OK);
        size_t used = z.total_out;
        inflateEnd(&z);
        if (r != Z_STREAM_END) return free(buf), snprintf(job->err, sizeof job->err, "gzip: the data is damaged or cut off"), -1;
        *out = buf;
        *len = used;
        return 0;
    }
    *out = NULL;
    *len = n;
    return 0;
}

int heaptrack_import(import_job *job)
{
    char *text;
    size_t len;
    if (text_of(job, &text, &len)) return -1;
    const char *s = text ? text : (const char *)job->data, *end = s + len;
    hstate h = { .job = job, .free_node = SIZE_MAX, .next_addr = 0x100000 };
    int rc = 0;
    size_t lineno = 0;
    if (len < 2 || s[0] != 'v') {
        snprintf(job->err, sizeof job->err, "not a heaptrack data file (it starts with a 'v' line)");
        rc = -1;
    }
    while (!rc && s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        lineno++;
        if (parse_line(&h, s, e)) {
            if (!job->err[0]) snprintf(job->err, sizeof job->err, "out of memory");
            else {
                char tmp[sizeof job->err];
                memcpy(tmp, job->err, sizeof tmp);
                snprintf(job->err, sizeof job->err, "line %zu: %.280s", lineno, tmp);
            }
            rc = -1;
        }
        s = nl ? nl + 1 : end;
    }
    if (!rc) {
        job->info.source = "heaptrack";
        if (h.bad_lines) import_note(job, "%llu lines not understood: skipped", (unsigned long long)h.bad_lines);
        if (h.bad_refs) import_note(job, "%llu references to undefined strings, ips, traces or infos", (unsigned long long)h.bad_refs);
        if (h.unknown_frees) import_note(job, "%llu frees with no live allocation of their info: dropped", (unsigned long long)h.unknown_frees);
        if (h.attached) import_note(job, "heaptrack attached to a running process: blocks from before are not in the file");
    }
    for (size_t i = 0; i < h.strings.n; i++) free(((char **)h.strings.p)[i]);
    free(h.strings.p);
    free(h.frames.p);
    free(h.ips.p);
    free(h.traces.p);
    free(h.infos.p);
    free(h.nodes.p);
    free(h.chain);
    free(text);
    return rc;
}
