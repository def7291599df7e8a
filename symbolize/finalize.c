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
 *
 * A process that exec'd leaves one spool per image (segments): pass 1 reads
 * them all, each image's stacks renumbered after the previous image's and
 * symbolized against that image's modules only; pass 2 writes their events
 * one after the other, joined by an exec MARKER and FREE events for what the
 * old image still held.
 */
#include "errbuf.h"
#include "finalize.h"
#include "addrset.h"
#include "jsonw.h"
#include "proc.h"
#include "mlz_format.h"
#include "codec_split.h"
#include "symbolize.h"
#include "varint.h"

#include <errno.h>
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
    /* Segments: the current one while collecting, and per segment the id
     * offset of its stacks and its first module (mod_first[nseg] = nmods). */
    uint32_t seg, nseg;
    uint64_t id_off, max_id;
    uint64_t *id_offs;
    size_t *mod_first;
    char *exec_rec;           /* the current segment's last EXEC record, or NULL */
    uint64_t exec_t;          /* and its time */
    symbolizer *given;        /* the caller's, for a single image; or NULL */
    const char *proc_root;    /* the live target's /proc/PID/root, or NULL */
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
        st.id += f->id_off;
        if (st.id > f->max_id) f->max_id = st.id;
        st.seg = f->seg;
        st.depth = (uint32_t)depth;
        st.pcs = calloc(depth ? depth : 1, sizeof *st.pcs);
        if (!st.pcs) return -1;
        for (uint64_t i = 0; i < depth; i++)
            if (get_v(&p, end, &st.pcs[i])) { free(st.pcs); return -1; }
        st.t_us = ev->time_us;      /* older spools: the stream's time */
        if (p < end && get_v(&p, end, &st.t_us)) { free(st.pcs); return -1; }
        if (f->nstacks == f->cstacks) {
            f->cstacks = f->cstacks ? 2 * f->cstacks : 1024;
            raw_stack *n = realloc(f->stacks, f->cstacks * sizeof *n);
            if (!n) { free(st.pcs); return -1; }
            f->stacks = n;
        }
        f->stacks[f->nstacks++] = st;
    } else if (ev->type == MLZ_EV_EXEC) {
        free(f->exec_rec);
        f->exec_rec = (size_t)(end - p) > 0 && p[0] == 'E' ? strndup((const char *)p + 1, (size_t)(end - p) - 1) : NULL;
        f->exec_t = ev->time_us;
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
        size_t first = f->mod_first ? f->mod_first[f->seg] : 0;
        for (size_t i = first; i < f->nmods; i++) {
            raw_module *o = &f->mods[i];
            if (o->start != m.start || o->size != m.size || o->bias != m.bias || o->blen != m.blen ||
                memcmp(o->build_id, m.build_id, m.blen) || strlen(o->path) != plen || memcmp(o->path, p, plen))
                continue;
            if (!o->gone_us) return 0;                          /* the same mapping, seen again */
            if (!o->superseded) { o->gone_us = 0; return 0; }   /* back, and nothing was there meanwhile */
        }
        for (size_t i = first; i < f->nmods; i++)
            if (f->mods[i].start < m.start + m.size && m.start < f->mods[i].start + f->mods[i].size)
                f->mods[i].superseded = 1;
        m.path = strndup((const char *)p, plen);
        if (!m.path) return -1;
        if (f->nmods == f->cmods) {
            f->cmods = f->cmods ? 2 * f->cmods : 64;
            raw_module *n = realloc(f->mods, f->cmods * sizeof *n);
            if (!n) { free(m.path); return -1; }
            f->mods = n;
        }
        f->mods[f->nmods++] = m;
    } else if (ev->type == MLZ_EV_MODULE_GONE) {
        uint64_t start, t, plen;
        if (get_v(&p, end, &start) || get_v(&p, end, &t) || get_v(&p, end, &plen) || (size_t)(end - p) != plen)
            return -1;
        size_t first = f->mod_first ? f->mod_first[f->seg] : 0;
        for (size_t i = f->nmods; i-- > first;)
            if (f->mods[i].start == start && !f->mods[i].gone_us && strlen(f->mods[i].path) == plen &&
                !memcmp(f->mods[i].path, p, plen)) {
                f->mods[i].gone_us = t ? t : 1;
                break;
            }
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

/* Copies a JSON value of strings, integers, booleans, arrays and objects. */
static void jw_json(mlz_jw *w, const char *key, json_t *v)
{
    if (json_is_string(v)) mlz_jw_str(w, key, json_string_value(v));
    else if (json_is_integer(v)) mlz_jw_i64(w, key, json_integer_value(v));
    else if (json_is_boolean(v)) mlz_jw_bool(w, key, json_is_true(v));
    else if (json_is_array(v)) {
        mlz_jw_arr(w, key);
        for (size_t k = 0; k < json_array_size(v); k++) jw_json(w, NULL, json_array_get(v, k));
        mlz_jw_end(w);
    } else if (json_is_object(v)) {
        const char *ck;
        json_t *cv;
        mlz_jw_obj(w, key);
        json_object_foreach(v, ck, cv) jw_json(w, ck, cv);
        mlz_jw_end(w);
    }
}

/*
 * Views: the module maps stacks are symbolized in. One per image, unless a
 * library was unloaded and another loaded over its addresses: then one more
 * from each such unload on, and a stack is read in the map of the time it
 * was allocated from. In that map, of the modules that shared addresses,
 * each address goes to the one unloaded first after that time, or else to
 * the one still loaded.
 */
typedef struct view {
    uint32_t seg;
    uint64_t from_us;            /* stacks allocated from then (to the next view's) */
    size_t *mods, nmods;         /* indices into fin.mods, no two overlapping */
    int used;                    /* a stack was allocated in it */
    symbolizer *sym;             /* for used views only */
} view;

static uint64_t gone_or_never(const raw_module *m) { return m->gone_us ? m->gone_us : UINT64_MAX; }

static int overlap(const raw_module *a, const raw_module *b)
{
    return a->start < b->start + b->size && b->start < a->start + a->size;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void free_views(fin *f, view *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i].sym && v[i].sym != f->given) sym_free(v[i].sym);
        free(v[i].mods);
    }
    free(v);
}

/* The views of image s (modules [lo, hi)), appended to *v. */
static int image_views(fin *f, uint32_t s, size_t lo, size_t hi, view **v, size_t *nv)
{
    size_t n = hi - lo, nb = 0, no = 0;
    uint8_t *over = calloc(n ? n : 1, 1);
    uint64_t *bounds = calloc(n + 1, sizeof *bounds);
    size_t *order = calloc(n ? n : 1, sizeof *order);
    int rc = -1;
    if (!over || !bounds || !order) goto out;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (overlap(&f->mods[lo + i], &f->mods[lo + j])) over[i] = over[j] = 1;
    for (size_t i = 0; i < n; i++)
        if (over[i]) {
            if (f->mods[lo + i].gone_us) bounds[nb++] = f->mods[lo + i].gone_us;
            order[no++] = lo + i;
        }
    qsort(bounds, nb, sizeof *bounds, cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < nb; i++)
        if (!u || bounds[i] != bounds[u - 1]) bounds[u++] = bounds[i];
    nb = u;
    /* The shared-address modules by unload time (stable: insertion sort). */
    for (size_t i = 1; i < no; i++)
        for (size_t j = i; j > 0 && gone_or_never(&f->mods[order[j]]) < gone_or_never(&f->mods[order[j - 1]]); j--) {
            size_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
        }
    view *nvw = realloc(*v, (*nv + nb + 1) * sizeof *nvw);
    if (!nvw) goto out;
    *v = nvw;
    for (size_t b = 0; b <= nb; b++) {
        view *w = &(*v)[(*nv)++];
        *w = (view){ .seg = s, .from_us = b ? bounds[b - 1] : 0, .mods = malloc((n ? n : 1) * sizeof *w->mods) };
        if (!w->mods) goto out;
        uint64_t upto = b < nb ? bounds[b] : UINT64_MAX;
        for (size_t i = 0; i < n; i++)
            if (!over[i]) w->mods[w->nmods++] = lo + i;
        size_t first_shared = w->nmods;
        for (size_t k = 0; k < no; k++) {
            const raw_module *m = &f->mods[order[k]];
            if (gone_or_never(m) < upto) continue;      /* unloaded before this view */
            int taken = 0;
            for (size_t i = first_shared; i < w->nmods && !taken; i++) taken = overlap(m, &f->mods[w->mods[i]]);
            if (!taken) w->mods[w->nmods++] = order[k];
        }
    }
    rc = 0;
out:
    free(over);
    free(bounds);
    free(order);
    return rc;
}

/* Every image's views, each stack given its own, and their symbolizers. */
static int make_views(fin *f, view **out, size_t *nout)
{
    view *v = NULL;
    size_t nv = 0;
    uint32_t nseg = f->nseg ? f->nseg : 1;
    size_t *first = calloc(nseg + 1, sizeof *first);
    if (!first) return -1;
    for (uint32_t s = 0; s < nseg; s++) {
        size_t lo = f->mod_first ? f->mod_first[s] : 0, hi = f->mod_first ? f->mod_first[s + 1] : f->nmods;
        first[s] = nv;
        if (image_views(f, s, lo, hi, &v, &nv)) goto fail;
    }
    first[nseg] = nv;
    for (size_t i = 0; i < f->nstacks; i++) {
        mlz_raw_stack *st = &f->stacks[i];
        size_t k = first[st->seg];
        while (k + 1 < first[st->seg + 1] && v[k + 1].from_us <= st->t_us) k++;
        st->view = (uint32_t)k;
        v[k].used = 1;
    }
    /* A symbolizer opens every module of its view: only for the views a
     * stack needs (a program that dlopens and dlcloses all the time has a
     * view per unload, and finalize spent minutes opening files for them). */
    for (size_t k = 0; k < nv; k++) {
        if (!v[k].used) continue;
        if (f->given && nv == 1) { v[k].sym = f->given; continue; }
        raw_module *mods = malloc((v[k].nmods ? v[k].nmods : 1) * sizeof *mods);
        if (!mods) goto fail;
        for (size_t i = 0; i < v[k].nmods; i++) mods[i] = f->mods[v[k].mods[i]];
        v[k].sym = mlz_symbolizer_for(mods, v[k].nmods, f->proc_root);
        free(mods);
        if (!v[k].sym) goto fail;
    }
    free(first);
    *out = v;
    *nout = nv;
    return 0;
fail:
    free(first);
    free_views(f, v, nv);
    return -1;
}

/* Writes the whole metadata; returns its length or 0 on overflow. images:
 * one object per exec'd image when there was more than one (or NULL). */
static size_t build_meta(fin *f, const view *views, json_t *spool_root, json_t *images,
                         const char *kind, char *buf, size_t cap)
{
    mlz_jw w;
    mlz_jw_init(&w, buf, cap);
    mlz_jw_obj(&w, NULL);
    mlz_jw_str(&w, "kind", kind);
    static const char *copy[] = { "memlyze", "rate", "pid", "exe", "cmdline", "clock", "session", "unwind" };
    for (size_t i = 0; i < sizeof copy / sizeof *copy; i++) {
        json_t *v = json_object_get(spool_root, copy[i]);
        if (json_is_string(v) || json_is_integer(v) || json_is_array(v)) jw_json(&w, copy[i], v);
    }
    if (images) jw_json(&w, "images", images);
    /* A heap dump's link to its .arc (heapdump.c), kept as given. */
    if (json_object_get(spool_root, "heapdump")) jw_json(&w, "heapdump", json_object_get(spool_root, "heapdump"));
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
            const view *v = &views[st->view];
            int n = sym_resolve(v->sym, st->pcs[j], fr, 16, &mod, &rel);
            if (mod >= 0) mod = (int)v->mods[mod];
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
static int make_meta(fin *f, json_t *root, json_t *images, const char *const *names, size_t nnames,
                     uint64_t *name_ids, const char *kind, char **out, size_t *len, char *err, size_t errlen)
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
    for (size_t i = 0; i < nnames; i++) name_ids[i] = intern(f->funcs, &f->nfuncs, names[i]);
    /* One symbolizer per image (its addresses mean nothing in another),
     * and per unload of a library another was loaded over. */
    view *views;
    size_t nviews;
    if (make_views(f, &views, &nviews)) return errbuf_set(err, errlen, "out of memory, or cannot start libdw");
    int rc = -1;
    size_t cap = 1 << 20;
    for (;;) {
        char *meta = malloc(cap);
        if (!meta) { errbuf_set(err, errlen, "out of memory"); break; }
        /* Interning is repeatable: same strings get the same ids again. */
        if ((*len = build_meta(f, views, root, images, kind, meta, cap))) { *out = meta; rc = 0; break; }
        free(meta);
        cap *= 4;
        if (cap > (1u << 31)) { errbuf_set(err, errlen, "metadata too large"); break; }
    }
    free_views(f, views, nviews);
    return rc;
}

symbolizer *mlz_symbolizer_for(const mlz_raw_module *mods, size_t nmods, const char *proc_root)
{
    symbolizer *s = sym_new();
    if (!s) return NULL;
    sym_set_root(s, proc_root);
    for (size_t i = 0; i < nmods; i++)
        sym_add_module(s, mods[i].path, mods[i].start, mods[i].size, mods[i].bias, mods[i].build_id, mods[i].blen);
    sym_ready(s);
    return s;
}

int mlz_symbolized_meta(mlz_raw_stack *stacks, size_t nstacks, mlz_raw_module *mods, size_t nmods,
                        symbolizer *sym, const char *proc_root, json_t *root, const char *kind, char **meta,
                        size_t *len, char *err, size_t errlen)
{
    fin f = { .stacks = stacks, .nstacks = nstacks, .mods = mods, .nmods = nmods, .given = sym,
              .proc_root = proc_root, .counters = json_object_get(root, "counters") };
    f.files = json_object();
    f.funcs = json_object();
    int rc = f.files && f.funcs ? make_meta(&f, root, NULL, NULL, 0, NULL, kind, meta, len, err, errlen)
                                : errbuf_set(err, errlen, "out of memory");
    json_decref(f.files);
    json_decref(f.funcs);
    return rc;
}


/* An image's command line from its spool metadata, joined by spaces. */
static void cmdline_of(json_t *root, char *buf, size_t cap)
{
    size_t n = 0;
    json_t *a = json_object_get(root, "cmdline");
    buf[0] = 0;
    for (size_t i = 0; json_is_array(a) && i < json_array_size(a); i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s) continue;
        int k = snprintf(buf + n, cap - n, "%s%s", n ? " " : "", s);
        if (k < 0 || (size_t)k >= cap - n) break;
        n += (size_t)k;
    }
}

/* The EXEC record "reason TAB path TAB command" split in place. */
static void split_exec(char *rec, char **why, char **path, char **cmd)
{
    *why = rec;
    *path = strchr(rec, '\t');
    if (*path) *(*path)++ = 0; else *path = rec + strlen(rec);
    *cmd = strchr(*path, '\t');
    if (*cmd) *(*cmd)++ = 0; else *cmd = *path + strlen(*path);
}

/* The "images" metadata: one object per image, and the unprofiled last exec. */
static json_t *images_meta(json_t **roots, const uint64_t *starts, size_t n, const char *why,
                           const char *path, const char *cmd)
{
    json_t *a = json_array();
    for (size_t s = 0; a && s < n; s++) {
        json_t *o = json_object();
        static const char *keys[] = { "exe", "cmdline", "pid", "start_ticks" };
        for (size_t k = 0; o && k < sizeof keys / sizeof *keys; k++)
            if (json_object_get(roots[s], keys[k])) json_object_set(o, keys[k], json_object_get(roots[s], keys[k]));
        if (o) json_object_set_new(o, "start_us", json_integer((json_int_t)starts[s]));
        json_array_append_new(a, o);
    }
    if (a && why) {
        json_t *o = json_object();
        json_object_set_new(o, "exe", json_string(path));
        json_object_set_new(o, "command", json_string(cmd));
        json_object_set_new(o, "unprofiled", json_string(why));
        json_array_append_new(a, o);
    }
    return a;
}

typedef struct end_ctx { mlz_writer *w; uint64_t t; } end_ctx;

static int end_one(void *ctx, uint64_t addr)
{
    end_ctx *c = ctx;
    return mlz_writer_free(c->w, c->t, addr);
}

/* The file system the process of the spools sees, if it still runs:
 * "/proc/TID/root" into buf (through a live thread: a main thread that
 * exited has none), else "". pid: its number here, or 0 for the spool's
 * own (inside a PID namespace the payload knows another). Only the spool's
 * start time makes it that process and not a later one with its number. */
static const char *live_root(json_t *root, pid_t pid, char *buf, size_t cap)
{
    json_t *jp = json_object_get(root, "pid"), *jt = json_object_get(root, "start_ticks");
    if (!pid && json_is_integer(jp)) pid = (pid_t)json_integer_value(jp);
    buf[0] = 0;
    if (pid <= 0 || !json_is_integer(jt) || json_integer_value(jt) <= 0 ||
        mlz_proc_start_ticks(pid) != (unsigned long long)json_integer_value(jt))
        return NULL;
    pid_t via = mlz_proc_live_tid(pid);
    if (via) snprintf(buf, cap, "/proc/%d/root", (int)via);
    return via ? buf : NULL;
}

int mlz_finalize_segments(const char *const *spools, size_t n, const char *out, const char *kind,
                          int encoding, int replace, pid_t pid, mlz_fin_summary *sum, char *err, size_t errlen)
{
    fin f = { 0 };
    int rc = -1, we = 0, k = 0;
    mlz_error e = { 0 };
    mlz_event ev;
    char *meta = NULL, **names = NULL;
    mlz_reader *r = NULL;
    addrset live = { 0 };
    json_t *images = NULL, **roots = calloc(n ? n : 1, sizeof *roots);
    uint64_t *starts = calloc(n ? n : 1, sizeof *starts), *name_ids = calloc(n + 1, sizeof *name_ids);
    names = calloc(n + 1, sizeof *names);
    f.id_offs = calloc(n ? n : 1, sizeof *f.id_offs);
    f.mod_first = calloc(n + 1, sizeof *f.mod_first);
    f.files = json_object();
    f.funcs = json_object();
    size_t nnames = 0;
    if (!n) { errbuf_set(err, errlen, "no spool to finalize"); goto out; }
    if (!roots || !starts || !name_ids || !names || !f.id_offs || !f.mod_first || !f.files || !f.funcs) {
        errbuf_set(err, errlen, "out of memory");
        goto out;
    }
    f.nseg = (uint32_t)n;

    /* Pass 1: stacks, modules, records, per image. */
    for (size_t s = 0; s < n; s++) {
        const char *sp = spools[s];
        if (!(r = mlz_reader_open(sp, MLZ_READ_TRUNCATED_OK, &e))) {
            errbuf_set(err, errlen, "%s: %s: %s", sp, mlz_rule_name(e.rule), e.msg);
            goto out;
        }
        const mlz_meta *m = mlz_reader_meta(r);
        if (!m->kind || strcmp(m->kind, "spool")) {
            errbuf_set(err, errlen, "%s: not a spool (kind %s)", sp, m->kind ? m->kind : "none");
            goto out;
        }
        roots[s] = json_incref(m->root);
        json_t *pid0 = json_object_get(roots[0], "pid"), *pid = json_object_get(m->root, "pid");
        if (s && json_is_integer(pid0) && json_is_integer(pid) && json_integer_value(pid0) != json_integer_value(pid)) {
            errbuf_set(err, errlen, "%s: pid %lld, not an image of %s's process (pid %lld)", sp,
                 (long long)json_integer_value(pid), spools[0], (long long)json_integer_value(pid0));
            goto out;
        }
        starts[s] = mlz_reader_header(r)->start_us;
        f.seg = (uint32_t)s;
        f.id_offs[s] = f.id_off = f.max_id;
        f.mod_first[s] = f.nmods;
        free(f.exec_rec);
        f.exec_rec = NULL;
        while ((k = mlz_reader_next(r, &ev, &e)) == 1)
            if (ev.type >= MLZ_EV_EXT_FIRST && collect(&f, &ev)) {
                errbuf_set(err, errlen, "%s: malformed spool record at byte %llu", sp, (unsigned long long)ev.offset);
                goto out;
            }
        if (k < 0) {
            errbuf_set(err, errlen, "%s: %s at byte %llu: %s", sp, mlz_rule_name(e.rule),
                 (unsigned long long)e.offset, e.msg);
            goto out;
        }
        /* An earlier image's spool is unsealed by nature (exec runs no
         * destructor): only the last one's cut means lost events. */
        if (s == n - 1) f.truncated = mlz_reader_was_truncated(r);
        mlz_reader_close(r);
        r = NULL;
    }
    f.mod_first[n] = f.nmods;

    /* The markers: one per exec followed, one for an exec into an image
     * that could not load the payload (the last image's EXEC record). */
    char line[4096];
    for (size_t s = 1; s < n; s++) {
        cmdline_of(roots[s], line, sizeof line);
        if (asprintf(&names[nnames++], "exec: %s", line) < 0) { names[--nnames] = NULL; errbuf_set(err, errlen, "out of memory"); goto out; }
    }
    char *why = NULL, *xpath = NULL, *xcmd = NULL;
    if (f.exec_rec) {
        split_exec(f.exec_rec, &why, &xpath, &xcmd);
        if (!*why) why = "the new image did not start the profiler";
        if (asprintf(&names[nnames++], "exec not profiled (%s): %s", why, *xcmd ? xcmd : xpath) < 0) {
            names[--nnames] = NULL;
            errbuf_set(err, errlen, "out of memory");
            goto out;
        }
    }
    if ((n > 1 || why) && !(images = images_meta(roots, starts, n, why, xpath, xcmd))) {
        errbuf_set(err, errlen, "out of memory");
        goto out;
    }
    size_t ml = 0;
    char proc_root[32];
    f.proc_root = live_root(roots[n - 1], pid, proc_root, sizeof proc_root);
    if (make_meta(&f, roots[n - 1], images, (const char *const *)names, nnames, name_ids,
                  kind ? kind : "trace", &meta, &ml, err, errlen))
        goto out;

    /* Pass 2: the events, image after image. */
    static uint8_t buf[MLZ_SPLIT_MAX_RAW], zbuf[MLZ_LZ4_BOUND];
    static mlz_writer w;
    mlz_writer_opts o = { .start_us = starts[0], .meta = meta, .meta_len = ml, .flags = mlz_encoding_flags(encoding),
                          .replace = replace, .mode = 0600, .buf = buf, .buf_size = sizeof buf,
                          .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    we = mlz_writer_open(&w, out, &o);
    if (we) { errbuf_set(err, errlen, "%s: %s", mlz_writer_error_path(&w, out), strerror(-we)); goto out; }
    uint64_t last = starts[0], allocs = 0, bytes = 0;
    end_ctx ec = { &w, 0 };
    for (size_t s = 0; s < n && !we; s++) {
        if (!(r = mlz_reader_open(spools[s], MLZ_READ_TRUNCATED_OK, &e))) {
            mlz_writer_abort(&w);
            errbuf_set(err, errlen, "%s: reopening: %s", spools[s], e.msg);
            goto out;
        }
        if (s > 0) {
            /* The exec: the old image's heap is gone with it. */
            ec.t = starts[s] > last ? starts[s] : last;
            if ((we = mlz_writer_marker(&w, ec.t, name_ids[s - 1])) ||
                (we = addrset_drain(&live, end_one, &ec)))
                break;
        }
        while (!we && (k = mlz_reader_next(r, &ev, &e)) == 1) {
            if (ev.type >= MLZ_EV_EXT_FIRST) continue;
            if (ev.time_us > last) last = ev.time_us;
            if (ev.type == MLZ_EV_ALLOC) {
                we = mlz_writer_alloc(&w, ev.time_us, ev.addr, ev.size, ev.stack_id + f.id_offs[s], ev.thread);
                if (!we && addrset_put(&live, ev.addr, ev.size)) we = -ENOMEM;
                allocs++;
                bytes += ev.size;
            } else if (ev.type == MLZ_EV_FREE) {
                we = mlz_writer_free(&w, ev.time_us, ev.addr);
                addrset_del(&live, ev.addr);
            } else if (ev.type == MLZ_EV_GC) {
                we = mlz_writer_gc(&w, ev.time_us, ev.objects, ev.bytes);
            } else if (!(s > 0 && ev.name_id == 0)) {   /* the exec marker says it */
                we = mlz_writer_marker(&w, ev.time_us, ev.name_id);
            }
        }
        if (k < 0) break;
        mlz_reader_close(r);
        r = NULL;
    }
    if (!we && k >= 0 && why) {
        ec.t = f.exec_t > last ? f.exec_t : last;
        if (!(we = mlz_writer_marker(&w, ec.t, name_ids[nnames - 1]))) we = addrset_drain(&live, end_one, &ec);
    }
    if (k < 0 || we) {
        mlz_writer_abort(&w);
        errbuf_set(err, errlen, "%s: %s", out, we ? strerror(-we) : e.msg);
        goto out;
    }
    if (sum) {
        *sum = (mlz_fin_summary){ .allocs = allocs, .alloc_bytes = bytes, .live = live.live,
                                  .live_bytes = live.live_bytes, .images = n, .unprofiled_exec = why != NULL };
    }
    we = mlz_writer_close(&w);
    if (we) { errbuf_set(err, errlen, "%s: %s", mlz_writer_error_path(&w, out), strerror(-we)); goto out; }
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
    free(f.exec_rec);
    free(f.id_offs);
    free(f.mod_first);
    for (size_t s = 0; roots && s < n; s++) json_decref(roots[s]);
    free(roots);
    free(starts);
    for (size_t i = 0; names && i < nnames; i++) free(names[i]);
    free(names);
    free(name_ids);
    json_decref(images);
    addrset_free(&live);
    return rc;
}

int mlz_finalize(const char *spool_path, const char *out, const char *kind, int encoding,
                 int replace, char *err, size_t errlen)
{
    return mlz_finalize_segments(&spool_path, 1, out, kind, encoding, replace, 0, NULL, err, errlen);
}
