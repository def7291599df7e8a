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

int dumpalloc_parse(const uint8_t *buf, size_t len, imp_trace *t, dumpalloc_info *info, char *err, size_t errlen)
{
    cursor c = { buf, len, err, errlen };
    memset(info, 0, sizeof *info);
    info->pid = -1;
    dumpalloc_counts *n = &info->n;
    json_t *objects = json_array();
    chain ch = { 0 };
    addrmap live;
    int rc = -1;
    if (!objects || addrmap_init(&live)) {
        json_decref(objects);
        return bad(&c, 0, "out of memory");
    }
    uint64_t size_addr = 0, size = 0;   /* the last ASIZ, for the next ALOC */
    int have_size = 0;
    size_t pos = 0;
    record r;
    int more = next_record(&c, &pos, &r);
    while (more > 0) {
        n->records++;
        if (is(&r, "ALOC")) {
            if (r.blen < 20) {
                bad(&c, r.at, "ALOC record of %zu bytes (needs 20: address, timestamp)", r.blen);
                goto out;
            }
            uint64_t addr = get_u64(r.body), sec = get_u64(r.body + 8);
            uint32_t ns = get_u32(r.body + 16);
            if (ns >= 1000000000u) {
                n->bad_nanos++;
                ns = 999999999u;
            }
            uint64_t t_us = sec > (UINT64_MAX - 1000000) / 1000000 ? UINT64_MAX - 1000000 : sec * 1000000 + ns / 1000;
            /* The frame chain: FRAM records up to TERM. */
            chain_clear(&ch);
            int term = 0;
            while ((more = next_record(&c, &pos, &r)) > 0 && is(&r, "FRAM")) {
                n->records++;
                int k = read_frame(&c, &r, &ch, n);
                if (k < 0) goto out;
                if (k) {
                    term = 1;
                    break;
                }
            }
            if (more < 0) goto out;
            if (!term) n->chains_without_term++;
            int64_t stack = imp_stack(t, ch.f, (uint32_t)ch.n);
            uint64_t sz = have_size && size_addr == addr ? size : 0;
            if (have_size && size_addr == addr) n->sized++;
            else n->unsized++;
            have_size = 0;
            addr_obj o = { .addr = addr, .size = sz, .time_us = t_us }, old;
            if (stack < 0 || imp_alloc(t, t_us, addr, sz, (uint32_t)stack, 0) ||
                (addr && addrmap_put(&live, &o, &old) < 0)) {
                bad(&c, pos, "out of memory");
                goto out;
            }
            n->allocs++;
            /* The record that ended a chain without TERM is read next. */
            if (term) more = next_record(&c, &pos, &r);
            else if (more > 0) n->records--;
            continue;
        }
        if (is(&r, "DALC")) {
            if (r.blen < 8) {
                bad(&c, r.at, "DALC record of %zu bytes (needs an 8-byte address)", r.blen);
                goto out;
            }
            uint64_t addr = get_u64(r.body);
            addr_obj o;
            if (addr && addrmap_take(&live, addr, &o)) {
                /* dumpalloc frees carry no time: the last time seen */
                if (imp_free_event(t, t->last_us, addr)) {
                    bad(&c, r.at, "out of memory");
                    goto out;
                }
                n->frees++;
            } else {
                n->unknown_frees++;
            }
        } else if (is(&r, "ASIZ")) {
            if (r.blen < 16) {
                bad(&c, r.at, "ASIZ record of %zu bytes (needs address and size)", r.blen);
                goto out;
            }
            size_addr = get_u64(r.body);
            size = get_u64(r.body + 8);
            have_size = 1;
        } else if (is(&r, "PROC")) {
            size_t off = 4;
            if (r.blen < 4) {
                bad(&c, r.at, "PROC record of %zu bytes has no process id", r.blen);
                goto out;
            }
            char *name = get_string(&c, &r, &off);
            if (!name) goto out;
            info->pid = get_u32(r.body);
            free(info->process);
            info->process = name;
        } else if (is(&r, "OBJE")) {
            size_t off = 0;
            char *path = get_string(&c, &r, &off);
            if (!path) goto out;
            int e = add_object(objects, path);
            free(path);
            if (e) {
                bad(&c, r.at, "out of memory");
                goto out;
            }
        } else if (is(&r, "FRAM")) {
            n->stray_frames++;
        } else {
            n->unknown_records++;
        }
        more = next_record(&c, &pos, &r);
    }
    if (more < 0) goto out;
    json_t *o = json_pack("{s:O}", "dumpalloc_objects", objects);
    info->objects_json = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!info->objects_json) {
        bad(&c, pos, "out of memory");
        goto out;
    }
    rc = 0;
out:
    chain_clear(&ch);
    free(ch.f);
    addrmap_free(&live);
    json_decref(objects);
    return rc;
}

void dumpalloc_info_free(dumpalloc_info *info)
{
    free(info->process);
    free(info->objects_json);
    info->process = info->objects_json = NULL;
}
