/*
 * dumpalloc_read.c - parses a dumpalloc file into an imported trace (see
 * dumpalloc.h). Every length is checked against the record (or the file)
 * it lives in before anything is read.
 */
#include "dumpalloc.h"
#include "addrmap.h"
#include "growbuf.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cursor {
    const uint8_t *buf;
    size_t len;               /* of the whole file */
    char *err;
    size_t errlen;
} cursor;

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static int bad(cursor *c, size_t at, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(c->err, c->errlen, "byte %zu: ", at);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < c->errlen) vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

/* The FOURCC as printable text. */
static const char *fourcc(const uint8_t *p, char out[5])
{
    for (int i = 0; i < 4; i++) out[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
    out[4] = 0;
    return out;
}

/* A record: its type, and its body [body, body + blen). */
typedef struct record {
    size_t at;                /* offset of the header */
    const uint8_t *type;
    const uint8_t *body;
    size_t blen;
} record;

/* Reads the record header at *pos; 1 and *r, 0 at the end, -1 on error. */
static int next_record(cursor *c, size_t *pos, record *r)
{
    if (*pos == c->len) return 0;
    if (c->len - *pos < 8) return bad(c, *pos, "a record header needs 8 bytes, %zu left", c->len - *pos);
    r->at = *pos;
    r->type = c->buf + *pos;
    r->blen = get_u32(c->buf + *pos + 4);
    if (r->blen > c->len - *pos - 8) {
        char t[5];
        return bad(c, *pos, "%s record length %zu runs past the end of the file (%zu bytes left)",
                   fourcc(r->type, t), r->blen, c->len - *pos - 8);
    }
    r->body = c->buf + *pos + 8;
    *pos += 8 + r->blen;
    return 1;
}

/* A string at *off inside a record body: 4-byte length, bytes, no NUL.
 * NUL bytes inside become '?'. Returns a malloc'd copy, or NULL with err. */
static char *get_string(cursor *c, const record *r, size_t *off)
{
    char t[5];
    if (r->blen - *off < 4 || *off > r->blen) {
        bad(c, r->at, "%s record ends inside a string length", fourcc(r->type, t));
        return NULL;
    }
    size_t n = get_u32(r->body + *off);
    if (n > r->blen - *off - 4) {
        bad(c, r->at, "%s record: string of %zu bytes runs past the record (%zu bytes left)", fourcc(r->type, t), n,
            r->blen - *off - 4);
        return NULL;
    }
    char *s = malloc(n + 1);
    if (!s) {
        bad(c, r->at, "out of memory");
        return NULL;
    }
    memcpy(s, r->body + *off + 4, n);
    s[n] = 0;
    for (size_t i = 0; i < n; i++)
        if (!s[i]) s[i] = '?';
    *off += 4 + n;
    return s;
}

static int is(const record *r, const char *type)
{
    return !memcmp(r->type, type, 4);
}

/* One frame of a chain, owned strings freed by the caller. */
typedef struct chain {
    imp_frame *f;
    size_t n, cap;
} chain;

static void chain_clear(chain *ch)
{
    for (size_t i = 0; i < ch->n; i++) {
        free((char *)ch->f[i].func);
        free((char *)ch->f[i].file);
    }
    ch->n = 0;
}

static int chain_push(chain *ch, imp_frame f)
{
    if (grow_to((void **)&ch->f, &ch->cap, ch->n + 1, sizeof *ch->f)) return -1;
    ch->f[ch->n++] = f;
    return 0;
}

/* One FRAM record of a chain: 1 when it was TERM, 0 when the chain goes
 * on, -1 on error. */
static int read_frame(cursor *c, const record *r, chain *ch, dumpalloc_counts *n)
{
    if (r->blen < 4) return bad(c, r->at, "FRAM record of %zu bytes has no frame type", r->blen);
    const uint8_t *kind = r->body;
    if (!memcmp(kind, "TERM", 4)) return 1;
    if (!memcmp(kind, "NTVE", 4)) {
        if (r->blen < 12) return bad(c, r->at, "NTVE frame of %zu bytes has no 8-byte address", r->blen);
        uint64_t a = get_u64(r->body + 4);
        char name[24];
        snprintf(name, sizeof name, "0x%llx", (unsigned long long)a);
        char *fn = strdup(name);
        if (!fn || chain_push(ch, (imp_frame){ fn, NULL, 0, a, 0 })) {
            free(fn);
            return bad(c, r->at, "out of memory");
        }
        n->frames++;
        return 0;
    }
    if (!memcmp(kind, "PCAL", 4)) {
        size_t off = 4;
        char *fn = get_string(c, r, &off), *file = fn ? get_string(c, r, &off) : NULL;
        if (!file || r->blen - off < 4) {
            free(fn);
            free(file);
            return file ? bad(c, r->at, "PCAL frame ends before its line number") : -1;
        }
        uint32_t line = get_u32(r->body + off);
        if (chain_push(ch, (imp_frame){ fn, file, line, 0, 0 })) {
            free(fn);
            free(file);
            return bad(c, r->at, "out of memory");
        }
        n->frames++;
        return 0;
    }
    n->unknown_frames++;
    return 0;
}

/* Appends a JSON string of OBJE's path to the objects array. */
static int add_object(json_t *objects, const char *path)
{
    json_t *s = json_string(path);
    if (!s) {   /* not UTF-8: keep what is ASCII */
        char *copy = strdup(path);
        if (!copy) return -1;
        for (char *p = copy; *p; p++)
            if ((unsigned char)*p >= 0x80) *p = '?';
        s = json_string(copy);
        free(copy);
    }
    return s ? json_array_append_new(objects, s) : -1;
}

/* The parse in progress. */
typedef struct da_parse {
    cursor c;
    size_t pos;                      /* of the next record */
    imp_trace *t;
    dumpalloc_info *info;
    json_t *objects;                 /* OBJE paths */
    chain ch;                        /* the frames of the current ALOC */
    addrmap live;                    /* to tell known frees from unknown */
    uint64_t size_addr, size;        /* the last ASIZ, for the next ALOC */
    int have_size;
} da_parse;

/* ALOC, then its frame chain: FRAM records up to TERM. On return *r and
 * *more are the record after the chain (a chain without TERM ends at the
 * first record that is not a frame, which is read next). */
static int on_aloc(da_parse *x, record *r, int *more)
{
    dumpalloc_counts *n = &x->info->n;
    if (r->blen < 20) return bad(&x->c, r->at, "ALOC record of %zu bytes (needs 20: address, timestamp)", r->blen);
    uint64_t addr = get_u64(r->body), sec = get_u64(r->body + 8);
    uint32_t ns = get_u32(r->body + 16);
    if (ns >= 1000000000u) {
        n->bad_nanos++;
        ns = 999999999u;
    }
    uint64_t t_us = sec > (UINT64_MAX - 1000000) / 1000000 ? UINT64_MAX - 1000000 : sec * 1000000 + ns / 1000;
    chain_clear(&x->ch);
    int term = 0;
    while ((*more = next_record(&x->c, &x->pos, r)) > 0 && is(r, "FRAM")) {
        n->records++;
        int k = read_frame(&x->c, r, &x->ch, n);
        if (k < 0) return -1;
        if (k) {
            term = 1;
            break;
        }
    }
    if (*more < 0) return -1;
    if (!term) n->chains_without_term++;
    int64_t stack = imp_stack(x->t, x->ch.f, (uint32_t)x->ch.n);
    int sized = x->have_size && x->size_addr == addr;
    if (sized) n->sized++;
    else n->unsized++;
    x->have_size = 0;
    addr_obj o = { .addr = addr, .size = sized ? x->size : 0, .time_us = t_us }, old;
    if (stack < 0 || imp_alloc(x->t, t_us, addr, o.size, (uint32_t)stack, 0) ||
        (addr && addrmap_put(&x->live, &o, &old) < 0))
        return bad(&x->c, x->pos, "out of memory");
    n->allocs++;
    if (term) *more = next_record(&x->c, &x->pos, r);
    else if (*more > 0) n->records--;   /* counted again when it is read */
    return 0;
}

static int on_dalc(da_parse *x, const record *r)
{
    if (r->blen < 8) return bad(&x->c, r->at, "DALC record of %zu bytes (needs an 8-byte address)", r->blen);
    uint64_t addr = get_u64(r->body);
    addr_obj o;
    if (!addr || !addrmap_take(&x->live, addr, &o)) {
        x->info->n.unknown_frees++;
        return 0;
    }
    /* dumpalloc frees carry no time: the last time seen */
    if (imp_free_event(x->t, x->t->last_us, addr)) return bad(&x->c, r->at, "out of memory");
    x->info->n.frees++;
    return 0;
}

static int on_asiz(da_parse *x, const record *r)
{
    if (r->blen < 16) return bad(&x->c, r->at, "ASIZ record of %zu bytes (needs address and size)", r->blen);
    x->size_addr = get_u64(r->body);
    x->size = get_u64(r->body + 8);
    x->have_size = 1;
    return 0;
}

static int on_proc(da_parse *x, const record *r)
{
    size_t off = 4;
    if (r->blen < 4) return bad(&x->c, r->at, "PROC record of %zu bytes has no process id", r->blen);
    char *name = get_string(&x->c, r, &off);
    if (!name) return -1;
    x->info->pid = get_u32(r->body);
    free(x->info->process);
    x->info->process = name;
    return 0;
}

static int on_obje(da_parse *x, const record *r)
{
    size_t off = 0;
    char *path = get_string(&x->c, r, &off);
    if (!path) return -1;
    int e = add_object(x->objects, path);
    free(path);
    return e ? bad(&x->c, r->at, "out of memory") : 0;
}

/* Every record but ALOC (which reads its own frames); 0 or -1. */
static int on_record(da_parse *x, const record *r)
{
    if (is(r, "DALC")) return on_dalc(x, r);
    if (is(r, "ASIZ")) return on_asiz(x, r);
    if (is(r, "PROC")) return on_proc(x, r);
    if (is(r, "OBJE")) return on_obje(x, r);
    if (is(r, "FRAM")) x->info->n.stray_frames++;
    else x->info->n.unknown_records++;
    return 0;
}

int dumpalloc_parse(const uint8_t *buf, size_t len, imp_trace *t, dumpalloc_info *info, char *err, size_t errlen)
{
    da_parse x = { .c = { buf, len, err, errlen }, .t = t, .info = info };
    memset(info, 0, sizeof *info);
    info->pid = -1;
    x.objects = json_array();
    if (!x.objects || addrmap_init(&x.live)) {
        json_decref(x.objects);
        return bad(&x.c, 0, "out of memory");
    }
    record r;
    if (!len) {   /* no record at all: a file emptied or cut, not a recording (docs/FORMAT.md) */
        json_decref(x.objects);
        addrmap_free(&x.live);
        return bad(&x.c, 0, "empty file: no dumpalloc record");
    }
    int more = next_record(&x.c, &x.pos, &r), rc = 0;
    while (more > 0 && !rc) {
        info->n.records++;
        if (is(&r, "ALOC")) {
            rc = on_aloc(&x, &r, &more);
        } else {
            rc = on_record(&x, &r);
            if (!rc) more = next_record(&x.c, &x.pos, &r);
        }
    }
    if (!rc && more < 0) rc = -1;
    if (!rc) {
        json_t *o = json_pack("{s:O}", "dumpalloc_objects", x.objects);
        info->objects_json = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (!info->objects_json) rc = bad(&x.c, x.pos, "out of memory");
    }
    chain_clear(&x.ch);
    free(x.ch.f);
    addrmap_free(&x.live);
    json_decref(x.objects);
    return rc ? -1 : 0;
}

void dumpalloc_info_free(dumpalloc_info *info)
{
    free(info->process);
    free(info->objects_json);
    info->process = info->objects_json = NULL;
}
