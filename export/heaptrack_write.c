/*
 * heaptrack_write.c - memlyze export --format heaptrack: a trace as the data
 * file heaptrack_print and heaptrack_gui read (what heaptrack_interpret
 * writes, file format version 3; docs/FORMAT.md, "heaptrack").
 *
 * Lines, numbers in hex: "v" versions, "X" the command, "I" page size and
 * pages; "s" strings (length-prefixed, numbered from 1), "i" instruction
 * pointers (address, module string, then function, file, line of the
 * innermost frame and of each frame it is inlined into, outwards), "t"
 * trace nodes (ip, parent node; 0 is the root), "a" allocation infos (size,
 * trace; numbered from 0), "+"/"-" an allocation or free of an info, "c"
 * milliseconds since the start. Everything is defined before its first use.
 */
#include "addrmap.h"
#include "errbuf.h"
#include "export.h"
#include "platform.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct ht {
    FILE *f;
    const mlz_meta *m;
    uint64_t nstrings, nips, ntraces, ninfos;
    uint64_t *func_str, *file_str, *mod_str;   /* memlyze table position -> string index (0: not yet) */
    addrmap ips, traces, infos, live;
    uint32_t *stack_trace;                     /* stack index -> trace node (UINT32_MAX: not yet) */
} ht;

/* The string's index, writing its "s" line the first time. Newlines would
 * end the line early, so they become spaces. */
static uint64_t string_at(ht *h, uint64_t *slot, const char *s)
{
    if (!s || !*s) return 0;
    if (*slot) return *slot;
    size_t n = strlen(s);
    fprintf(h->f, "s %zx ", n);
    for (size_t i = 0; i < n; i++) fputc(s[i] == '\n' || s[i] == '\r' ? ' ' : s[i], h->f);
    fputc('\n', h->f);
    return *slot = ++h->nstrings;
}

static size_t position(const uint64_t *ids, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ids[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && ids[lo] == id ? lo : SIZE_MAX;
}

static uint64_t func_string(ht *h, uint32_t id)
{
    size_t i = position(h->m->func_ids, h->m->nfunctions, id);
    return i == SIZE_MAX ? 0 : string_at(h, &h->func_str[i], h->m->functions[i]);
}

static uint64_t file_string(ht *h, uint32_t id)
{
    size_t i = position(h->m->file_ids, h->m->nfiles, id);
    return i == SIZE_MAX ? 0 : string_at(h, &h->file_str[i], h->m->files[i]);
}

/* A lookup in a map used as key -> number (kept in time_us); 0 = absent. */
static int map_get(const addrmap *map, uint64_t key, addr_obj *o)
{
    addrmap *mm = (addrmap *)map;
    if (!addrmap_take(mm, key, o)) return 0;
    addrmap_put(mm, o, NULL);
    return 1;
}

/* The ip of frames [first, last] of a stack: the non-inlined frame `last`
 * and the frames inlined into it, leaf first. Keyed by its address, or by
 * its names when the trace has no address. */
static int64_t ip_of(ht *h, const mlz_stack *st, uint32_t first, uint32_t last)
{
    const mlz_frame *outer = &st->frames[last];
    uint64_t pc = rep_frame_pc(h->m, outer);
    uint64_t key = pc ? pc : (1ull << 63) | (mlz_fmix64(((uint64_t)outer->func_id << 32 | outer->file_id) ^
                                                        ((uint64_t)outer->line << 17)) >> 1);
    addr_obj o;
    if (map_get(&h->ips, key, &o)) return (int64_t)o.time_us;
    uint64_t mod = 0;
    if (outer->module >= 0 && (size_t)outer->module < h->m->nmodules)
        mod = string_at(h, &h->mod_str[outer->module], h->m->modules[outer->module].path);
    /* Strings first: every "s" line before the "i" line that uses it. */
    for (uint32_t k = first; k <= last; k++) {
        func_string(h, st->frames[k].func_id);
        file_string(h, st->frames[k].file_id);
    }
    fprintf(h->f, "i %llx %llx", (unsigned long long)(pc ? pc : key), (unsigned long long)mod);
    for (uint32_t k = first; k <= last; k++) {
        const mlz_frame *fr = &st->frames[k];
        fprintf(h->f, " %llx %llx %x", (unsigned long long)func_string(h, fr->func_id),
                (unsigned long long)file_string(h, fr->file_id), fr->line);
    }
    fputc('\n', h->f);
    o = (addr_obj){ .addr = key, .time_us = ++h->nips };
    if (addrmap_put(&h->ips, &o, NULL) < 0) return -1;
    return (int64_t)h->nips;
}

/* The trace node of stack index i, writing its ips and nodes root first. */
static int64_t trace_of(ht *h, size_t si)
{
    if (h->stack_trace[si] != UINT32_MAX) return h->stack_trace[si];
    const mlz_stack *st = &h->m->stacks[si];
    uint64_t parent = 0;
    /* Walk from the root (the last frame) towards the leaf, one ip per
     * non-inlined frame together with the inlined frames before it. */
    int64_t last = (int64_t)st->depth - 1;
    while (last >= 0) {
        int64_t first = last;
        while (first > 0 && st->frames[first - 1].inlined) first--;
        int64_t ip = ip_of(h, st, (uint32_t)first, (uint32_t)last);
        if (ip < 0) return -1;
        uint64_t key = ((uint64_t)ip << 32 | parent) + 1;
        addr_obj o;
        if (map_get(&h->traces, key, &o)) {
            parent = o.time_us;
        } else {
            fprintf(h->f, "t %llx %llx\n", (unsigned long long)ip, (unsigned long long)parent);
            o = (addr_obj){ .addr = key, .time_us = ++h->ntraces };
            if (addrmap_put(&h->traces, &o, NULL) < 0) return -1;
            parent = h->ntraces;
        }
        last = first - 1;
    }
    if (parent >= UINT32_MAX) return -1;
    h->stack_trace[si] = (uint32_t)parent;
    return (int64_t)parent;
}

/* The allocation info of (size, trace), writing its "a" line once. */
static int64_t info_of(ht *h, uint64_t size, uint32_t trace)
{
    uint64_t key = mlz_fmix64(size * 0x9E3779B97F4A7C15ull ^ trace) | 1;
    addr_obj o;
    int cached = map_get(&h->infos, key, &o);
    if (cached && o.size == size && o.site == trace) return (int64_t)o.time_us;
    fprintf(h->f, "a %llx %x\n", (unsigned long long)size, trace);
    /* A hash collision just writes a second info for the same pair. */
    if (!cached) {
        o = (addr_obj){ .addr = key, .size = size, .site = trace, .time_us = h->ninfos };
        if (addrmap_put(&h->infos, &o, NULL) < 0) return -1;
    }
    return (int64_t)h->ninfos++;
}

static int write_events(ht *h, mlz_reader *r, const export_job *j, mlz_error *e)
{
    mlz_event ev;
    int k;
    uint64_t start = mlz_reader_header(r)->start_us, last_ms = 0;
    while ((k = mlz_reader_next(r, &ev, e)) > 0 && ev.time_us <= j->until_us) {
        if (ev.type != MLZ_EV_ALLOC && ev.type != MLZ_EV_FREE) continue;
        uint64_t ms = ev.time_us > start ? (ev.time_us - start) / 1000 : 0;
        if (ms > last_ms) {
            fprintf(h->f, "c %llx\n", (unsigned long long)ms);
            last_ms = ms;
        }
        addr_obj o;
        if (ev.type == MLZ_EV_FREE) {
            if (ev.addr && addrmap_take(&h->live, ev.addr, &o)) fprintf(h->f, "- %llx\n", (unsigned long long)o.time_us);
            continue;
        }
        const mlz_stack *st = mlz_meta_stack(h->m, ev.stack_id);
        int64_t trace = st ? trace_of(h, (size_t)(st - h->m->stacks)) : 0;
        int64_t info = trace < 0 ? -1 : info_of(h, ev.size, (uint32_t)trace);
        if (info < 0) return -2;
        /* An address allocated again without a recorded free: the old
         * block is gone, as heaptrack_interpret would have seen it. */
        if (ev.addr && addrmap_take(&h->live, ev.addr, &o)) fprintf(h->f, "- %llx\n", (unsigned long long)o.time_us);
        fprintf(h->f, "+ %llx\n", (unsigned long long)info);
        o = (addr_obj){ .addr = ev.addr, .time_us = (uint64_t)info };
        if (ev.addr && addrmap_put(&h->live, &o, NULL) < 0) return -2;
    }
    return k;
}

int heaptrack_export(const export_job *j)
{
    mlz_error e = { 0 };
    mlz_reader *r = export_open_events(j, "heaptrack");
    if (!r) return -1;
    const mlz_meta *m = mlz_reader_meta(r);
    ht h = { .f = j->f, .m = m };
    int rc = -1;
    h.func_str = calloc(m->nfunctions + 1, sizeof *h.func_str);
    h.file_str = calloc(m->nfiles + 1, sizeof *h.file_str);
    h.mod_str = calloc(m->nmodules + 1, sizeof *h.mod_str);
    h.stack_trace = malloc((m->nstacks + 1) * sizeof *h.stack_trace);
    if (!h.func_str || !h.file_str || !h.mod_str || !h.stack_trace || addrmap_init(&h.ips) ||
        addrmap_init(&h.traces) || addrmap_init(&h.infos) || addrmap_init(&h.live)) {
        errbuf_set(j->err, j->errlen, "out of memory");
        goto out;
    }
    memset(h.stack_trace, 0xff, (m->nstacks + 1) * sizeof *h.stack_trace);
    fprintf(h.f, "v 10400 3\n");
    fprintf(h.f, "X %s\n", m->exe ? m->exe : j->path);
    fprintf(h.f, "I %lx %lx\n", sysconf(_SC_PAGESIZE), sysconf(_SC_PHYS_PAGES));
    int k = write_events(&h, r, j, &e);
    if (k == -2) errbuf_set(j->err, j->errlen, "out of memory");
    else if (k < 0) errbuf_set(j->err, j->errlen, "%s: %s at byte %llu: %s", j->path, mlz_rule_name(e.rule), (unsigned long long)e.offset, e.msg);
    else if (ferror(h.f)) errbuf_set(j->err, j->errlen, "writing the output failed");
    else rc = 0;
out:
    free(h.func_str);
    free(h.file_str);
    free(h.mod_str);
    free(h.stack_trace);
    addrmap_free(&h.ips);
    addrmap_free(&h.traces);
    addrmap_free(&h.infos);
    addrmap_free(&h.live);
    mlz_reader_close(r);
    return rc;
}
