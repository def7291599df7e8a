/*
 * pprof.c - see pprof.h. Field numbers from google/pprof proto/profile.proto.
 *
 * Locations are interned by module, address and their chain of symbolized
 * frames, functions by (name, file), strings by content; ids are the intern
 * index + 1 (0 means "none" in profile.proto). The message is built in
 * memory and gzip'd in one pass: a profile has one sample per site, so it
 * stays small next to the trace it comes from.
 */
#include "pprof.h"
#include "keymap.h"
#include "pbenc.h"
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

enum {   /* Profile */
    F_SAMPLE_TYPE = 1, F_SAMPLE = 2, F_MAPPING = 3, F_LOCATION = 4, F_FUNCTION = 5,
    F_STRING_TABLE = 6, F_TIME_NANOS = 9, F_DURATION_NANOS = 10, F_PERIOD_TYPE = 11,
    F_PERIOD = 12, F_COMMENT = 13, F_DEFAULT_SAMPLE_TYPE = 14,
};
enum { VT_TYPE = 1, VT_UNIT = 2 };                              /* ValueType */
enum { S_LOCATION_ID = 1, S_VALUE = 2 };                        /* Sample */
enum { M_ID = 1, M_START = 2, M_LIMIT = 3, M_OFFSET = 4, M_FILENAME = 5, M_BUILD_ID = 6,
       M_HAS_FUNCTIONS = 7, M_HAS_FILENAMES = 8, M_HAS_LINES = 9, M_HAS_INLINES = 10 };
enum { L_ID = 1, L_MAPPING_ID = 2, L_ADDRESS = 3, L_LINE = 4 };  /* Location */
enum { LN_FUNCTION_ID = 1, LN_LINE = 2 };                       /* Line */
enum { FN_ID = 1, FN_NAME = 2, FN_SYSTEM_NAME = 3, FN_FILENAME = 4 };  /* Function */

typedef struct pp_loc { uint64_t mapping, address; size_t first_line, nlines; } pp_loc;
typedef struct pp_line { uint64_t func; int64_t line; } pp_line;
typedef struct pp_func { uint64_t name, file; } pp_func;

typedef struct pp {
    const mlz_meta *m;
    keymap *strs, *funcs, *locs;
    pp_loc *loc;   size_t nloc, caploc;
    pp_line *line; size_t nline, capline;
    pp_func *fn;   size_t nfn, capfn;
    uint64_t *map_id;            /* module index -> mapping id */
    size_t *map_order;           /* mapping id - 1 -> module index */
    int oom;
} pp;

/* Grows *arr (of elements of size sz) to hold one more; 0 or -1. */
static int push(void *arr, size_t *n, size_t *cap, size_t sz)
{
    if (*n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 64;
    void *p = realloc(*(void **)arr, c * sz);
    if (!p) return -1;
    *(void **)arr = p;
    *cap = c;
    return 0;
}

static uint64_t str_id(pp *x, const char *s)
{
    uint32_t i = keymap_intern(x->strs, s, strlen(s), NULL);
    if (i == UINT32_MAX) { x->oom = 1; return 0; }
    return i;
}

static uint64_t func_id(pp *x, const mlz_frame *f)
{
    const char *file = mlz_meta_file(x->m, f->file_id);
    uint64_t key[2] = { str_id(x, rep_func(x->m, f)), str_id(x, file ? file : "") };
    int added;
    uint32_t i = keymap_intern(x->funcs, key, sizeof key, &added);
    if (i == UINT32_MAX) { x->oom = 1; return 0; }
    if (added) {
        if (push(&x->fn, &x->nfn, &x->capfn, sizeof *x->fn)) { x->oom = 1; return 0; }
        x->fn[x->nfn++] = (pp_func){ key[0], key[1] };
    }
    return (uint64_t)i + 1;
}

/* The location of frames[0..n-1]: frames[0..n-2] are inlined into
 * frames[n-1], all at one address. */
static uint64_t loc_id(pp *x, const mlz_frame *fr, size_t n)
{
    uint8_t key[12 + 16 * 12];
    size_t k = 0;
    memcpy(key, &fr[n - 1].module, 4);
    memcpy(key + 4, &fr[n - 1].addr, 8);
    k = 12;
    for (size_t i = 0; i < n && k + 12 <= sizeof key; i++) {
        memcpy(key + k, &fr[i].func_id, 4);
        memcpy(key + k + 4, &fr[i].file_id, 4);
        memcpy(key + k + 8, &fr[i].line, 4);
        k += 12;
    }
    int added;
    uint32_t i = keymap_intern(x->locs, key, k, &added);
    if (i == UINT32_MAX) { x->oom = 1; return 0; }
    if (added) {
        if (push(&x->loc, &x->nloc, &x->caploc, sizeof *x->loc)) { x->oom = 1; return 0; }
        const mlz_frame *outer = &fr[n - 1];
        int32_t mod = outer->module;
        pp_loc *l = &x->loc[x->nloc++];
        l->mapping = mod >= 0 && (size_t)mod < x->m->nmodules ? x->map_id[mod] : 0;
        l->address = rep_frame_pc(x->m, outer);
        l->first_line = x->nline;
        l->nlines = n;
        for (size_t j = 0; j < n; j++) {   /* innermost first, as profile.proto asks */
            if (push(&x->line, &x->nline, &x->capline, sizeof *x->line)) { x->oom = 1; return 0; }
            x->line[x->nline++] = (pp_line){ func_id(x, &fr[j]), fr[j].line };
        }
    }
    return (uint64_t)i + 1;
}

static uint64_t nonneg(double v)
{
    return v > 0 ? (uint64_t)llround(v) : 0;
}

static void value_type(pb_buf *out, pb_buf *sub, unsigned field, uint64_t type, uint64_t unit)
{
    pb_reset(sub);
    pb_uint(sub, VT_TYPE, type);
    pb_uint(sub, VT_UNIT, unit);
    pb_bytes(out, field, sub->p, sub->n);
}

/* Mapping ids: the main executable first ("mapping[0] will be the main
 * binary"), then the others in the file's order. */
static int order_mappings(pp *x)
{
    size_t nm = x->m->nmodules, k = 0;
    x->map_id = calloc(nm ? nm : 1, sizeof *x->map_id);
    x->map_order = calloc(nm ? nm : 1, sizeof *x->map_order);
    if (!x->map_id || !x->map_order) return -1;
    const char *exe = x->m->exe;
    for (size_t i = 0; i < nm; i++)
        if (exe && x->m->modules[i].path && !strcmp(x->m->modules[i].path, exe)) {
            x->map_order[k++] = i;
            x->map_id[i] = k;
            break;
        }
    for (size_t i = 0; i < nm; i++)
        if (!x->map_id[i]) {
            x->map_order[k++] = i;
            x->map_id[i] = k;
        }
    return 0;
}

static int gzip_out(FILE *f, const pb_buf *b, char *err, size_t errlen)
{
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    /* windowBits 15 + 16: a gzip wrapper, which pprof expects on disk. */
    if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        snprintf(err, errlen, "zlib: cannot start compressing");
        return -1;
    }
    uint8_t chunk[65536];
    zs.next_in = b->p;
    zs.avail_in = (uInt)b->n;   /* profiles are far below 4 GiB */
    int zr;
    do {
        zs.next_out = chunk;
        zs.avail_out = sizeof chunk;
        zr = deflate(&zs, Z_FINISH);
        if (zr == Z_STREAM_ERROR) break;
        size_t have = sizeof chunk - zs.avail_out;
        if (have && fwrite(chunk, 1, have, f) != have) {
            deflateEnd(&zs);
            snprintf(err, errlen, "write failed");
            return -1;
        }
    } while (zr != Z_STREAM_END);
    deflateEnd(&zs);
    if (zr != Z_STREAM_END) {
        snprintf(err, errlen, "zlib: compression failed");
        return -1;
    }
    return 0;
}

/* sample_type: the four values every sample carries, in that order. The
 * strings are interned here in a fixed order, so ids stay the same. */
static void write_sample_types(pp *x, pb_buf *out, pb_buf *sub)
{
    uint64_t s_alloc_objects = str_id(x, "alloc_objects"), s_count = str_id(x, "count");
    uint64_t s_alloc_space = str_id(x, "alloc_space"), s_bytes = str_id(x, "bytes");
    uint64_t s_inuse_objects = str_id(x, "inuse_objects"), s_inuse_space = str_id(x, "inuse_space");
    str_id(x, "space");   /* the period's type, written last */
    value_type(out, sub, F_SAMPLE_TYPE, s_alloc_objects, s_count);
    value_type(out, sub, F_SAMPLE_TYPE, s_alloc_space, s_bytes);
    value_type(out, sub, F_SAMPLE_TYPE, s_inuse_objects, s_count);
    value_type(out, sub, F_SAMPLE_TYPE, s_inuse_space, s_bytes);
}

/* One sample per merged site with samples: its locations, leaf first (a run
 * of inlined frames and the frame they sit in share one location), and its
 * four estimates. ids has room for the deepest stack. */
static void write_samples(pp *x, const prof *p, uint64_t *ids, pb_buf *out, pb_buf *sub)
{
    for (size_t i = 0; i < p->nsites; i++) {
        const prof_site *s = &p->sites[i];
        if (p->site_of[i] != i || !s->samples) continue;
        const mlz_stack *st = s->stack;
        size_t n = 0;
        for (uint32_t j = 0; j < st->depth;) {
            uint32_t k = j;
            while (k + 1 < st->depth && st->frames[k].inlined && k - j < 15) k++;
            ids[n++] = loc_id(x, &st->frames[j], k - j + 1);
            j = k + 1;
        }
        uint64_t v[4] = { nonneg(s->alloc_count.value), nonneg(s->alloc_bytes.value),
                          nonneg(s->live_count.value), nonneg(s->live_bytes.value) };
        pb_reset(sub);
        pb_packed(sub, S_LOCATION_ID, ids, n);
        pb_packed(sub, S_VALUE, v, 4);   /* all four, zeros included */
        pb_bytes(out, F_SAMPLE, sub->p, sub->n);
    }
}

static void write_mappings(pp *x, pb_buf *out, pb_buf *sub)
{
    for (size_t k = 0; k < x->m->nmodules; k++) {
        const mlz_meta_module *mod = &x->m->modules[x->map_order[k]];
        pb_reset(sub);
        pb_uint(sub, M_ID, k + 1);
        pb_uint(sub, M_START, mod->base);
        pb_uint(sub, M_LIMIT, mod->base + mod->size);
        pb_uint(sub, M_OFFSET, 0);   /* base is the lowest mapped address: file offset 0 */
        pb_uint(sub, M_FILENAME, str_id(x, mod->path ? mod->path : ""));
        pb_uint(sub, M_BUILD_ID, mod->build_id ? str_id(x, mod->build_id) : 0);
        /* Frames come symbolized: pprof must not try to symbolize again. */
        pb_bool(sub, M_HAS_FUNCTIONS, 1);
        pb_bool(sub, M_HAS_FILENAMES, 1);
        pb_bool(sub, M_HAS_LINES, 1);
        pb_bool(sub, M_HAS_INLINES, 1);
        pb_bytes(out, F_MAPPING, sub->p, sub->n);
    }
}

/* The locations and functions the samples interned. */
static void write_locations(const pp *x, pb_buf *out, pb_buf *sub, pb_buf *sub2)
{
    for (size_t i = 0; i < x->nloc; i++) {
        const pp_loc *l = &x->loc[i];
        pb_reset(sub);
        pb_uint(sub, L_ID, i + 1);
        pb_uint(sub, L_MAPPING_ID, l->mapping);
        pb_uint(sub, L_ADDRESS, l->address);
        for (size_t j = 0; j < l->nlines; j++) {
            pb_reset(sub2);
            pb_uint(sub2, LN_FUNCTION_ID, x->line[l->first_line + j].func);
            pb_int(sub2, LN_LINE, x->line[l->first_line + j].line);
            pb_bytes(sub, L_LINE, sub2->p, sub2->n);
        }
        pb_bytes(out, F_LOCATION, sub->p, sub->n);
    }
    for (size_t i = 0; i < x->nfn; i++) {
        pb_reset(sub);
        pb_uint(sub, FN_ID, i + 1);
        pb_uint(sub, FN_NAME, x->fn[i].name);
        pb_uint(sub, FN_SYSTEM_NAME, x->fn[i].name);
        pb_uint(sub, FN_FILENAME, x->fn[i].file);
        pb_bytes(out, F_FUNCTION, sub->p, sub->n);
    }
}

/* Time, period and comment, then the string table, which must come last:
 * everything before has interned its strings. */
static void write_trailer(pp *x, const prof *p, uint64_t start_us, uint64_t end_us, pb_buf *out, pb_buf *sub)
{
    char note[160];
    if (p->rate <= 1) snprintf(note, sizeof note, "memlyze: exact (every allocation recorded)");
    else snprintf(note, sizeof note, "memlyze: sampled every %llu bytes on average; values are unbiased estimates",
                  (unsigned long long)p->rate);
    uint64_t s_note = str_id(x, note);
    pb_int(out, F_TIME_NANOS, (int64_t)(start_us * 1000));
    pb_int(out, F_DURATION_NANOS, end_us > start_us ? (int64_t)((end_us - start_us) * 1000) : 0);
    value_type(out, sub, F_PERIOD_TYPE, str_id(x, "space"), str_id(x, "bytes"));
    pb_int(out, F_PERIOD, (int64_t)(p->rate ? p->rate : 1));
    pb_uint(out, F_COMMENT, s_note);
    pb_uint(out, F_DEFAULT_SAMPLE_TYPE, str_id(x, "inuse_space"));
    for (size_t i = 0; i < keymap_count(x->strs); i++) {
        size_t len;
        const char *s = keymap_key(x->strs, (uint32_t)i, &len);
        pb_bytes(out, F_STRING_TABLE, s, len);
    }
}

static void pp_free(pp *x)
{
    keymap_free(x->strs);
    keymap_free(x->funcs);
    keymap_free(x->locs);
    free(x->loc);
    free(x->line);
    free(x->fn);
    free(x->map_id);
    free(x->map_order);
}

int pprof_write(FILE *f, const prof *p, uint64_t start_us, uint64_t end_us, char *err, size_t errlen)
{
    pp x = { .m = p->meta };
    pb_buf out = { 0 }, sub = { 0 }, sub2 = { 0 };
    size_t maxdepth = 1;
    for (size_t i = 0; i < p->nsites; i++)
        if (p->sites[i].stack->depth > maxdepth) maxdepth = p->sites[i].stack->depth;
    uint64_t *ids = malloc(maxdepth * sizeof *ids);
    x.strs = keymap_new();
    x.funcs = keymap_new();
    x.locs = keymap_new();
    int rc = -1;
    if (ids && x.strs && x.funcs && x.locs && !order_mappings(&x)) {
        str_id(&x, "");   /* string_table[0] must be "" */
        write_sample_types(&x, &out, &sub);
        write_samples(&x, p, ids, &out, &sub);
        write_mappings(&x, &out, &sub);
        write_locations(&x, &out, &sub, &sub2);
        write_trailer(&x, p, start_us, end_us, &out, &sub);
        if (!x.oom && !out.oom && !sub.oom && !sub2.oom) rc = gzip_out(f, &out, err, errlen);
        else snprintf(err, errlen, "out of memory");
    } else {
        snprintf(err, errlen, "out of memory");
    }
    free(ids);
    pb_free(&out);
    pb_free(&sub);
    pb_free(&sub2);
    pp_free(&x);
    return rc;
}
