/*
 * finalize.c - turns a payload's spool into a symbolized .mlyze trace.
 *
 * Two streaming passes over the spool, so memory stays bounded by the
 * number of distinct stacks and modules, not by the number of events:
 *   1. collect modules (MODULE) and raw stacks (STACK_RAW), symbolize them;
 *   2. copy ALLOC/FREE/GC/MARKER events into the trace, whose metadata now
 *      carries stack_traces, files, functions and modules.
 * A spool cut short (the profiled process died) is read up to its last
 * whole event.
 */
#include "finalize.h"
#include "jsonw.h"
#include "mlz_format.h"
#include "codec_split.h"
#include "symbolize.h"
#include "varint.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef mlz_raw_stack raw_stack;
typedef mlz_raw_module raw_module;

typedef struct fin {
    raw_stack *stacks; size_t nstacks, cstacks;
    raw_module *mods; size_t nmods, cmods;
    json_t *files, *funcs;    /* string -> id */
    json_t *counters;         /* last COUNTERS record, or NULL */
    char *coverage;           /* COVERAGE text, or NULL */
    uint64_t nfiles, nfuncs;
    int truncated;
} fin;

int mlz_encoding_parse(const char *name)
{
    if (!strcmp(name, "v1")) return MLZ_ENC_V1;
    if (!strcmp(name, "lz4")) return MLZ_ENC_LZ4;
    if (!strcmp(name, "split")) return MLZ_ENC_SPLIT;
    return -1;
}

unsigned mlz_encoding_flags(int encoding)
{
    return encoding == MLZ_ENC_LZ4 ? MLZ_FLAG_LZ4 : encoding == MLZ_ENC_SPLIT ? MLZ_FLAG_SPLIT : 0;
}

static int ferr(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

static int get_v(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    size_t used;
    if (mlz_varint_get(*p, end, v, &used)) return -1;
    *p += used;
    return 0;
}

static int collect(fin *f, const mlz_event *ev)
{
    const uint8_t *p = ev->data, *end = ev->data + ev->len;
    if (ev->type == MLZ_EV_STACK_RAW) {
        raw_stack st = { 0 };
        uint64_t depth;
        if (get_v(&p, end, &st.id) || get_v(&p, end, &depth)) return -1;
        st.depth = (uint32_t)depth;
        st.pcs = calloc(depth ? depth : 1, sizeof *st.pcs);
        if (!st.pcs) return -1;
        for (uint64_t i = 0; i < depth; i++)
            if (get_v(&p, end, &st.pcs[i])) { free(st.pcs); return -1; }
        if (f->nstacks == f->cstacks) {
            f->cstacks = f->cstacks ? 2 * f->cstacks : 1024;
            raw_stack *n = realloc(f->stacks, f->cstacks * sizeof *n);
            if (!n) { free(st.pcs); return -1; }
            f->stacks = n;
        }
        f->stacks[f->nstacks++] = st;
    } else if (ev->type == MLZ_EV_COVERAGE) {
        free(f->coverage);
        f->coverage = strndup((const char *)p, (size_t)(end - p));
    } else if (ev->type == MLZ_EV_COUNTERS) {
        json_t *c = json_loadb((const char *)p, (size_t)(end - p), 0, NULL);
        if (!json_is_object(c)) { json_decref(c); return -1; }
        if (f->counters) json_decref(f->counters);
        f->counters = c;
    } else if (ev->type == MLZ_EV_MODULE) {
        raw_module m = { 0 };
        uint64_t blen, plen;
        if (get_v(&p, end, &m.start) || get_v(&p, end, &m.size) || get_v(&p, end, &m.bias) ||
            get_v(&p, end, &blen) || blen > 64 || (size_t)(end - p) < blen)
            return -1;
        memcpy(m.build_id, p, blen);
        m.blen = (size_t)blen;
        p += blen;
        if (get_v(&p, end, &plen) || (size_t)(end - p) != plen) return -1;
        for (size_t i = 0; i < f->nmods; i++)      /* the same mapping, seen again */
            if (f->mods[i].start == m.start && strlen(f->mods[i].path) == plen &&
                !memcmp(f->mods[i].path, p, plen))
                return 0;
        m.path = strndup((const char *)p, plen);
        if (!m.path) return -1;
        if (f->nmods == f->cmods) {
            f->cmods = f->cmods ? 2 * f->cmods : 64;
            raw_module *n = realloc(f->mods, f->cmods * sizeof *n);
            if (!n) { free(m.path); return -1; }
            f->mods = n;
        }
        f->mods[f->nmods++] = m;
    }
    return 0;
}

static uint64_t intern(json_t *dict, uint64_t *next, const char *s)
{
    json_t *v = json_object_get(dict, s);
    if (v) return (uint64_t)json_integer_value(v);
    json_object_set_new(dict, s, json_integer((json_int_t)*next));
    return (*next)++;
}

/* Writes the whole metadata; returns its length or 0 on overflow. */
static size_t build_meta(fin *f, symbolizer *sym, json_t *spool_root, const char *kind,
                         char *buf, size_t cap)
{
    mlz_jw w;
    mlz_jw_init(&w, buf, cap);
    mlz_jw_obj(&w, NULL);
    mlz_jw_str(&w, "kind", kind);
    static const char *copy[] = { "memlyze", "rate", "pid", "exe", "cmdline", "clock", "unwind" };
    for (size_t i = 0; i < sizeof copy / sizeof *copy; i++) {
        json_t *v = json_object_get(spool_root, copy[i]);
        if (!v) continue;
        if (json_is_string(v)) mlz_jw_str(&w, copy[i], json_string_value(v));
        else if (json_is_integer(v)) mlz_jw_i64(&w, copy[i], json_integer_value(v));
        else if (json_is_array(v)) {
            mlz_jw_arr(&w, copy[i]);
            for (size_t k = 0; k < json_array_size(v); k++)
                if (json_is_string(json_array_get(v, k))) mlz_jw_str(&w, NULL, json_string_value(json_array_get(v, k)));
            mlz_jw_end(&w);
        }
    }
    if (f->truncated) mlz_jw_bool(&w, "truncated", 1);
    if (f->coverage) mlz_jw_str(&w, "coverage", f->coverage);
    if (f->counters) {
        const char *ck;
        json_t *cv;
        mlz_jw_obj(&w, "counters");
        json_object_foreach(f->counters, ck, cv)
            if (json_is_integer(cv)) mlz_jw_i64(&w, ck, json_integer_value(cv));
        mlz_jw_end(&w);
    }
    mlz_jw_arr(&w, "modules");
    for (size_t i = 0; i < f->nmods; i++) {
        char hex[129];
        mlz_jw_obj(&w, NULL);
        mlz_jw_str(&w, "path", f->mods[i].path);
        if (f->mods[i].blen) {
            sym_hex(f->mods[i].build_id, f->mods[i].blen, hex);
            mlz_jw_str(&w, "build_id", hex);
        }
        mlz_jw_u64(&w, "base", f->mods[i].start);
        mlz_jw_u64(&w, "size", f->mods[i].size);
        mlz_jw_u64(&w, "bias", f->mods[i].bias);
        mlz_jw_end(&w);
    }
    mlz_jw_end(&w);

    mlz_jw_obj(&w, "stack_traces");
    for (size_t i = 0; i < f->nstacks; i++) {
        raw_stack *st = &f->stacks[i];
        mlz_jw_idkey_arr(&w, st->id);
        for (uint32_t j = 0; j < st->depth; j++) {
            sym_frame fr[16];
            int mod;
            uint64_t rel;
            int n = sym_resolve(sym, st->pcs[j], fr, 16, &mod, &rel);
            for (int k = 0; k < n; k++) {
                mlz_jw_obj(&w, NULL);
                mlz_jw_u64(&w, "file_id", intern(f->files, &f->nfiles, fr[k].file));
                mlz_jw_u64(&w, "line", fr[k].line);
                mlz_jw_u64(&w, "func_id", intern(f->funcs, &f->nfuncs, fr[k].func));
                if (mod >= 0) mlz_jw_u64(&w, "module", (uint64_t)mod);
                mlz_jw_u64(&w, "addr", rel);
                if (fr[k].inlined) mlz_jw_bool(&w, "inline", 1);
                mlz_jw_end(&w);
            }
        }
        mlz_jw_end(&w);
    }
    mlz_jw_end(&w);

    /* The tables, in id order. */
    const char *key;
    json_t *v;
    const char **byid;
    for (int t = 0; t < 2; t++) {
        json_t *dict = t ? f->funcs : f->files;
        uint64_t n = t ? f->nfuncs : f->nfiles;
        byid = calloc(n ? n : 1, sizeof *byid);
        if (!byid) return 0;
        json_object_foreach(dict, key, v) byid[json_integer_value(v)] = key;
        mlz_jw_obj(&w, t ? "functions" : "files");
        for (uint64_t i = 0; i < n; i++) mlz_jw_idkey_str(&w, i, byid[i]);
        mlz_jw_end(&w);
        free(byid);
    }
    mlz_jw_end(&w);
    return mlz_jw_ok(&w) == 0 ? w.len : 0;
}

/* Symbolizes f's stacks against its modules and writes the metadata of a
 * profile of `kind` into a malloc'd buffer. The function table starts with
 * root's "functions" under their own ids: events (MARKER) refer to them. */
static int make_meta(fin *f, json_t *root, const char *kind, char **out, size_t *len,
                     char *err, size_t errlen)
{
    json_t *fns = json_object_get(root, "functions");
    for (uint64_t id = 0; json_is_object(fns) && id < json_object_size(fns) + 64; id++) {
        char key[24];
        snprintf(key, sizeof key, "%llu", (unsigned long long)id);
        json_t *v = json_object_get(fns, key);
        if (!json_is_string(v)) continue;
        while (f->nfuncs < id) {
            char gap[32];
            snprintf(gap, sizeof gap, "(unused %llu)", (unsigned long long)f->nfuncs);
            intern(f->funcs, &f->nfuncs, gap);
        }
        intern(f->funcs, &f->nfuncs, json_string_value(v));
    }
    symbolizer *sym = sym_new();
    if (!sym) return ferr(err, errlen, "cannot start libdw");
    for (size_t i = 0; i < f->nmods; i++)
        sym_add_module(sym, f->mods[i].path, f->mods[i].start, f->mods[i].size, f->mods[i].bias,
                       f->mods[i].build_id, f->mods[i].blen);
    sym_ready(sym);
    size_t cap = 1 << 20;
    int rc = -1;
    for (;;) {
        char *meta = malloc(cap);
        if (!meta) { ferr(err, errlen, "out of memory"); break; }
        /* Interning is repeatable: same strings get the same ids again. */
        if ((*len = build_meta(f, sym, root, kind, meta, cap))) { *out = meta; rc = 0; break; }
        free(meta);
        cap *= 4;
        if (cap > (1u << 31)) { ferr(err, errlen, "metadata too large"); break; }
    }
    sym_free(sym);
    return rc;
}

int mlz_symbolized_meta(mlz_raw_stack *stacks, size_t nstacks, mlz_raw_module *mods, size_t nmods,
                        json_t *root, const char *kind, char **meta, size_t *len, char *err, size_t errlen)
{
    fin f = { .stacks = stacks, .nstacks = nstacks, .mods = mods, .nmods = nmods };
    f.files = json_object();
    f.funcs = json_object();
    int rc = f.files && f.funcs ? make_meta(&f, root, kind, meta, len, err, errlen)
                                : ferr(err, errlen, "out of memory");
    json_decref(f.files);
    json_decref(f.funcs);
    return rc;
}

int mlz_finalize(const char *spool_path, const char *out, const char *kind, int encoding,
                 int replace, char *err, size_t errlen)
{
    fin f = { 0 };
    int rc = -1;
    mlz_error e = { 0 };
    char *meta = NULL;
    mlz_reader *r = mlz_reader_open(spool_path, MLZ_READ_TRUNCATED_OK, &e);
    if (!r) return ferr(err, errlen, "%s: %s: %s", spool_path, mlz_rule_name(e.rule), e.msg);
    const mlz_meta *m = mlz_reader_meta(r);
    if (!m->kind || strcmp(m->kind, "spool")) {
        ferr(err, errlen, "%s: not a spool (kind %s)", spool_path, m->kind ? m->kind : "none");
        goto out;
    }
    f.files = json_object();
    f.funcs = json_object();

    mlz_event ev;
    int k;
    while ((k = mlz_reader_next(r, &ev, &e)) == 1)
        if (ev.type >= MLZ_EV_EXT_FIRST && collect(&f, &ev)) {
            ferr(err, errlen, "%s: malformed spool record at byte %llu", spool_path, (unsigned long long)ev.offset);
            goto out;
        }
    if (k < 0) {
        ferr(err, errlen, "%s: %s at byte %llu: %s", spool_path, mlz_rule_name(e.rule),
             (unsigned long long)e.offset, e.msg);
        goto out;
    }
    f.truncated = mlz_reader_was_truncated(r);

    size_t ml = 0;
    if (make_meta(&f, m->root, kind ? kind : "trace", &meta, &ml, err, errlen)) goto out;

    /* Pass 2: the events. */
    uint64_t start = mlz_reader_header(r)->start_us;
    mlz_reader_close(r);
    r = mlz_reader_open(spool_path, MLZ_READ_TRUNCATED_OK, &e);
    if (!r) { ferr(err, errlen, "%s: reopening: %s", spool_path, e.msg); goto out; }
    static uint8_t buf[MLZ_SPLIT_MAX_RAW], zbuf[MLZ_LZ4_BOUND];
    static mlz_writer w;
    mlz_writer_opts o = { .start_us = start, .meta = meta, .meta_len = ml, .flags = mlz_encoding_flags(encoding),
                          .replace = replace, .mode = 0600, .buf = buf, .buf_size = sizeof buf,
                          .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    int we = mlz_writer_open(&w, out, &o);
    if (we) { ferr(err, errlen, "%s: %s", out, strerror(-we)); goto out; }
    while ((k = mlz_reader_next(r, &ev, &e)) == 1) {
        if (ev.type >= MLZ_EV_EXT_FIRST) continue;
        if (ev.type == MLZ_EV_ALLOC)
            we = mlz_writer_alloc(&w, ev.time_us, ev.addr, ev.size, ev.stack_id, ev.thread);
        else if (ev.type == MLZ_EV_FREE) we = mlz_writer_free(&w, ev.time_us, ev.addr);
        else if (ev.type == MLZ_EV_GC) we = mlz_writer_gc(&w, ev.time_us, ev.objects, ev.bytes);
        else we = mlz_writer_marker(&w, ev.time_us, ev.name_id);
        if (we) break;
    }
    if (k < 0 || we) {
        mlz_writer_abort(&w);
        ferr(err, errlen, "%s: %s", out, we ? strerror(-we) : e.msg);
        goto out;
    }
    we = mlz_writer_close(&w);
    if (we) { ferr(err, errlen, "%s: %s", out, strerror(-we)); goto out; }
    rc = 0;
out:
    if (r) mlz_reader_close(r);
    free(meta);
    for (size_t i = 0; i < f.nstacks; i++) free(f.stacks[i].pcs);
    free(f.stacks);
    for (size_t i = 0; i < f.nmods; i++) free(f.mods[i].path);
    free(f.mods);
    if (f.files) json_decref(f.files);
    if (f.funcs) json_decref(f.funcs);
    if (f.counters) json_decref(f.counters);
    free(f.coverage);
    return rc;
}
