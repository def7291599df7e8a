/*
 * codec_split.c - the split-stream block codec (see codec_split.h and
 * docs/FORMAT.md "Split-stream blocks").
 *
 * Encoder and decoder run the same models over a block, in event order:
 *   - sizes: a 251-slot direct-mapped table of recent sizes; a hit is coded
 *     as its slot, a miss as a literal (which then takes the slot);
 *   - ALLOC addresses (model 2, flag SPLIT2): a row per size slot of the
 *     last 8 blocks of that size freed in this block (glibc's tcache hands
 *     those out first); a hit is coded as its rank among the row's entries
 *     not reused yet; else the j-th latest FREE of the block (any size:
 *     split or merged by the allocator) when it freed this address, coded
 *     as 8 + j; else the signed distance to the previous address allocated
 *     by the same thread (else by any thread). Each step is a few loads
 *     and a table look-up, in both directions. (Model 1, in files written
 *     before: per-size LIFOs that move entries, and a ring of 32.)
 *   - FREE: the object it frees, by its position among the block's live
 *     allocations (a list in birth order, from which a free moves the last
 *     entry into the freed one's place: O(1) both ways), counted from the
 *     end; 0 and a literal address (distance to the previous literal) for
 *     objects born in an earlier block;
 *   - threads as XOR with the previous allocation's thread.
 * Numbers are stored as byte planes (all low bytes, then all second bytes,
 * ...: a column loop each way), then every stream is compressed alone with
 * zstd, whose entropy coder sees one kind of symbol at a time.
 */
#include "codec_split.h"
#include "crc32.h"
#include "growbuf.h"
#include "mlz_format.h"
#include "varint.h"

#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

/* Weak: the payload links the format library but never writes split
 * blocks, and must not depend on libzstd or zlib in the target. */
#pragma weak ZSTD_createCCtx
#pragma weak ZSTD_freeCCtx
#pragma weak ZSTD_createDCtx
#pragma weak ZSTD_freeDCtx
#pragma weak ZSTD_CCtx_setParameter
#pragma weak ZSTD_compress2
#pragma weak ZSTD_decompressDCtx
#pragma weak ZSTD_compressBound
#pragma weak ZSTD_isError
#pragma weak ZSTD_compress
#pragma weak ZSTD_decompress
#pragma weak ZSTD_getFrameContentSize
#pragma weak ZSTD_findFrameCompressedSize
#pragma weak crc32

/* The column loops in two copies, picked once by the CPU: AVX2 widens and
 * sums 32 bytes per instruction, baseline x86-64 (SSE2) 16, with more
 * shuffles to widen bytes to 64-bit values. Not in sanitizer builds: the
 * copy is picked by an ifunc resolver, which runs while the program is
 * relocated, before the sanitizer's runtime (TSan crashed there). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1                    /* GCC */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1                    /* clang */
#endif
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(SANITIZED)
#define COLUMN_LOOPS __attribute__((target_clones("avx2", "default")))
#else
#define COLUMN_LOOPS
#endif

#define DIR_BYTES (MLZ_SPLIT_NSTREAMS * 8)

/* The freed blocks of one size slot (a row): one cache line. The rows'
 * states (and model 1's sizes and counts) sit apart, in lines that stay in
 * L1, so a push or a take touches a single line of the 64 KiB of addresses. */
typedef struct reuse_slot {
    uint64_t addr[MLZ_SPLIT_REUSE_DEPTH];
} __attribute__((aligned(64))) reuse_slot;

/* The models' state; reset at every block up to `reuse`, whose rows are
 * read only where the counts and masks say they hold something. */
typedef struct model {
    uint64_t size_tab[MLZ_SPLIT_SIZE_SLOTS];
    uint8_t  size_len[256];   /* v1 varint bytes of size_tab[i]; 0 = empty (always
                                 for 251..255: a size code names slot code - 1, so
                                 one load checks any code) */
    /* Model 2: row s is a ring of 8 addresses, written downwards. Its
     * state, one load and one store: bits 0-2 the position of the latest
     * entry; bit 8 + r set when the r-th latest (r = 0: the latest) holds
     * a block not reused yet (a push shifts them). */
    uint16_t row_state[MLZ_SPLIT_REUSE_SLOTS];
    /* Model 1: row s is a LIFO of reuse_count[s] blocks of size reuse_size[s]. */
    uint64_t reuse_size[MLZ_SPLIT_REUSE_SLOTS];
    uint8_t  reuse_count[MLZ_SPLIT_REUSE_SLOTS];
    uint64_t ring[MLZ_SPLIT_RING];            /* freed addresses, any size */
    uint32_t ring_head, ring_count;
    uint32_t th_tag[MLZ_SPLIT_THREAD_SLOTS];  /* thread + 1; 0 = empty */
    uint64_t th_addr[MLZ_SPLIT_THREAD_SLOTS];
    uint64_t prev_addr, prev_free_lit;
    uint16_t prev_thread;
    reuse_slot reuse[MLZ_SPLIT_REUSE_SLOTS];  /* the rows' addresses */
} model;

typedef struct stream { uint8_t *p; size_t len, cap; } stream;
typedef struct lits { uint64_t *v; size_t n, cap; } lits;

/* Encoder's map from an address to its latest live allocation in the
 * block (idx) and to its latest FREE (fidx: index + 1, 0 = none). */
typedef struct live_ent { uint64_t addr; uint32_t idx, gen, fidx; } live_ent;
#define LIVE_SLOTS (2 * MLZ_SPLIT_MAX_EVENTS)
#define LIVE_DEAD  UINT32_MAX

struct mlz_split_codec {
    int level;
    int model;                 /* address model: 2, or 1 for files without SPLIT2 */
    uint8_t nth_bit[256][8];   /* [mask][k]: position of mask's (k+1)-th lowest set bit, 0xFF if none */
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    mlz_split_cols cols;
    model m;
    stream s[MLZ_SPLIT_NSTREAMS];
    uint8_t *out; size_t out_cap;
    live_ent *live; uint32_t gen;
    uint32_t *free_idx;        /* encoder: the allocation each FREE names, or LIVE_DEAD */
    uint16_t *slot;            /* decoder: each ALLOC's row, reuse_slot_of(its size) */
    size_t slot_cap;
    size_t free_idx_cap;
    uint32_t *alloc_back;      /* encoder: j when the j-th latest FREE freed this ALLOC's address, else 0 */
    size_t alloc_back_cap;
    uint32_t *live_list, *live_pos;   /* the block's live allocations (see FREE; the decoder keeps indices) */
    size_t live_list_cap, live_pos_cap;
    lits scratch[5];           /* literal columns on their way in or out */
};

static inline uint64_t zz(uint64_t d) { return (d << 1) ^ (uint64_t)((int64_t)d >> 63); }
static inline uint64_t unzz(uint64_t z) { return (z >> 1) ^ (0 - (z & 1)); }
static inline unsigned size_slot(uint64_t s) { return (unsigned)(s % MLZ_SPLIT_SIZE_SLOTS); }
static inline unsigned reuse_slot_of(uint64_t s) { return (unsigned)((s * 0xC2B2AE3D27D4EB4Full) >> 54); }

static int cols_reserve(mlz_split_cols *c, uint32_t n)
{
    if (n <= c->cap) return 0;
    uint32_t cap = c->cap ? c->cap : 4096;
    while (cap < n) cap *= 2;
    void *k = realloc(c->kind, cap), *d = realloc(c->delta, cap * 8ul);
    if (k) c->kind = k;
    if (d) c->delta = d;
    void *a = realloc(c->a_addr, cap * 8ul), *s = realloc(c->a_size, cap * 8ul);
    if (a) c->a_addr = a;
    if (s) c->a_size = s;
    void *st = realloc(c->a_stack, cap * 8ul), *t = realloc(c->a_thread, cap * 2ul);
    if (st) c->a_stack = st;
    if (t) c->a_thread = t;
    void *f = realloc(c->f_addr, cap * 8ul);
    if (f) c->f_addr = f;
    if (!k || !d || !a || !s || !st || !t || !f) return -1;
    c->cap = cap;
    return 0;
}

mlz_split_codec *mlz_split_new(int level)
{
    if (!ZSTD_createCCtx || !crc32) return NULL;
    /* Aligned: the freed-block rows of the model are cache lines. */
    mlz_split_codec *c = aligned_alloc(64, (sizeof *c + 63) & ~(size_t)63);
    if (!c) return NULL;
    memset(c, 0, sizeof *c);
    c->level = level;
    c->model = 2;
    for (unsigned mask = 0; mask < 256; mask++) {
        unsigned k = 0;
        memset(c->nth_bit[mask], 0xFF, 8);
        for (unsigned b = 0; b < 8; b++)
            if (mask >> b & 1) c->nth_bit[mask][k++] = (uint8_t)b;
    }
    c->cctx = ZSTD_createCCtx();
    c->dctx = ZSTD_createDCtx();
    if (!c->cctx || !c->dctx) { mlz_split_free(c); return NULL; }
    return c;
}

void mlz_split_free(mlz_split_codec *c)
{
    if (!c) return;
    if (c->cctx) ZSTD_freeCCtx(c->cctx);
    if (c->dctx) ZSTD_freeDCtx(c->dctx);
    mlz_split_cols *k = &c->cols;
    free(k->kind); free(k->delta); free(k->a_addr); free(k->a_size);
    free(k->a_stack); free(k->a_thread); free(k->f_addr); free(k->other);
    for (int i = 0; i < MLZ_SPLIT_NSTREAMS; i++) free(c->s[i].p);
    free(c->out);
    free(c->live);
    free(c->free_idx);
    free(c->slot);
    free(c->alloc_back);
    free(c->live_list);
    free(c->live_pos);
    for (int i = 0; i < 5; i++) free(c->scratch[i].v);
    free(c);
}

void mlz_split_set_model(mlz_split_codec *c, int model) { c->model = model; }

const mlz_split_cols *mlz_split_columns(const mlz_split_codec *c) { return &c->cols; }

const uint8_t *mlz_split_stream(const mlz_split_codec *c, int i, size_t *len)
{
    *len = c->s[i].len;
    return c->s[i].p;
}

long mlz_split_meta_pack(const void *json, size_t len, int level, uint8_t **out)
{
    *out = NULL;
    if (!ZSTD_compress || len > MLZ_META_MAX) return -1;
    size_t cap = 4 + ZSTD_compressBound(len);
    uint8_t *o = malloc(cap);
    if (!o) return -1;
    size_t n = ZSTD_compress(o + 4, cap - 4, json, len, level);
    if (ZSTD_isError(n) || n > UINT32_MAX - 4) { free(o); return -1; }
    mlz_put_u32(o, mlz_split_crc(o + 4, n));
    *out = o;
    return (long)(4 + n);
}

int mlz_split_meta_unpack(const uint8_t *in, size_t len, char **json, size_t *json_len,
                          char *why, size_t whylen)
{
    *json = NULL;
    if (!ZSTD_decompress) { snprintf(why, whylen, "compressed metadata needs libzstd"); return -1; }
    /* The CRC first: zstd's own checks let some damaged bits through (bits
     * its decoder ignores), and those would decode into other JSON. */
    if (len < 4 || mlz_get_u32(in) != mlz_split_crc(in + 4, len - 4)) {
        snprintf(why, whylen, "metadata checksum mismatch");
        return -1;
    }
    in += 4;
    len -= 4;
    unsigned long long n = ZSTD_getFrameContentSize(in, len);
    if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN) {
        snprintf(why, whylen, "metadata is not a zstd frame of known size");
        return -1;
    }
    if (n > MLZ_META_MAX) { snprintf(why, whylen, "metadata frame claims %llu bytes (limit %u)", n, MLZ_META_MAX); return -1; }
    size_t fl = ZSTD_findFrameCompressedSize(in, len);
    if (ZSTD_isError(fl) || fl != len) {
        snprintf(why, whylen, "metadata is not exactly one zstd frame");
        return -1;
    }
    char *j = malloc((size_t)n + 1);
    if (!j) { snprintf(why, whylen, "out of memory for %llu bytes of metadata", n); return -1; }
    size_t d = ZSTD_decompress(j, (size_t)n, in, len);
    if (ZSTD_isError(d) || d != n) {
        free(j);
        snprintf(why, whylen, "metadata frame does not decompress to its %llu bytes", n);
        return -1;
    }
    j[n] = 0;
    *json = j;
    *json_len = (size_t)n;
    return 0;
}

uint32_t mlz_split_crc(const uint8_t *p, size_t n)
{
    return mlz_crc32(p, n);
}

/* ------------------------------------------------------------ the models */

static void model_reset(model *m)
{
    memset(m, 0, offsetof(model, reuse));
}

/* Model 2: a block freed by reference joins the row of its size slot,
 * dropping the row's oldest entry when all 8 are in use. */
static inline void row_push(model *m, unsigned s, uint64_t addr)
{
    unsigned st = m->row_state[s], t = (st - 1u) & 7;
    m->reuse[s].addr[t] = addr;
    m->row_state[s] = (uint16_t)((((st >> 8) << 1 | 1) & 0xFF) << 8 | t);
}

/* Takes the r-th latest entry of row s (one not reused yet). */
static inline uint64_t row_take(model *m, unsigned s, unsigned r)
{
    unsigned st = m->row_state[s];
    m->row_state[s] = (uint16_t)(st & ~(0x100u << r));
    return m->reuse[s].addr[(st + r) & 7];
}

/* Encoder: the rank (1 = latest) of addr among row s's entries not reused
 * yet, which it takes; 0 if absent. */
static uint32_t row_take_addr(model *m, unsigned s, uint64_t addr)
{
    unsigned st = m->row_state[s], k = 0;
    for (unsigned r = 0; r < 8; r++) {
        if (!(st >> (8 + r) & 1)) continue;
        k++;
        if (m->reuse[s].addr[(st + r) & 7] == addr) {
            row_take(m, s, r);
            return k;
        }
    }
    return 0;
}

/* Model 1 (decoding only): a block freed by reference goes on the LIFO of
 * its size (a row holding another size is emptied first; a full LIFO drops
 * its oldest) and into the ring of the last 32 frees. */
static inline void reuse_push(model *m, uint64_t size, uint64_t addr)
{
    m->ring_head = (m->ring_head + 1) % MLZ_SPLIT_RING;
    m->ring[m->ring_head] = addr;
    if (m->ring_count < MLZ_SPLIT_RING) m->ring_count++;
    unsigned s = reuse_slot_of(size);
    uint64_t *v = m->reuse[s].addr;
    unsigned n = m->reuse_count[s];
    if (m->reuse_size[s] != size) { m->reuse_size[s] = size; n = 0; }
    if (n == MLZ_SPLIT_REUSE_DEPTH) {
        memmove(v, v + 1, (MLZ_SPLIT_REUSE_DEPTH - 1) * sizeof v[0]);
        n--;
    }
    v[n] = addr;
    m->reuse_count[s] = (uint8_t)(n + 1);
}

/* Removes the entry `depth` (1 = top) of slot s's LIFO; returns its address. */
static uint64_t reuse_take(model *m, unsigned s, uint32_t depth)
{
    uint64_t *v = m->reuse[s].addr;
    uint32_t n = m->reuse_count[s], j = n - depth;
    uint64_t a = v[j];
    for (uint32_t i = j + 1; i < n; i++) v[i - 1] = v[i];   /* depth 1: none */
    m->reuse_count[s] = (uint8_t)(n - 1);
    return a;
}

static uint64_t addr_base(const model *m, uint16_t thread)
{
    unsigned t = thread % MLZ_SPLIT_THREAD_SLOTS;
    return m->th_tag[t] == (uint32_t)thread + 1 ? m->th_addr[t] : m->prev_addr;
}

static void addr_seen(model *m, uint16_t thread, uint64_t addr)
{
    unsigned t = thread % MLZ_SPLIT_THREAD_SLOTS;
    m->th_tag[t] = (uint32_t)thread + 1;
    m->th_addr[t] = addr;
    m->prev_addr = addr;
}

/* --------------------------------------------------------- v1 -> columns */

static int parse_v1(mlz_split_cols *c, const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    c->n = c->nalloc = c->nfree = 0;
    c->other_len = 0;
    c->raw_len = len;
    while (p < end) {
        if (c->n >= MLZ_SPLIT_MAX_EVENTS || cols_reserve(c, c->n + 1)) return -1;
        uint8_t t = *p++;
        uint64_t d, v;
        size_t u;
        if (t >= 128 || mlz_varint_get(p, end, &d, &u)) return -1;
        p += u;
        c->kind[c->n] = t;
        c->delta[c->n++] = d;
        if (t == MLZ_EV_ALLOC) {
            if (end - p < 8) return -1;
            uint32_t i = c->nalloc++;
            c->a_addr[i] = mlz_get_u64(p); p += 8;
            if (mlz_varint_get(p, end, &c->a_size[i], &u)) return -1;
            p += u;
            if (mlz_varint_get(p, end, &c->a_stack[i], &u)) return -1;
            p += u;
            if (end - p < 2) return -1;
            c->a_thread[i] = mlz_get_u16(p); p += 2;
            continue;
        }
        if (t == MLZ_EV_FREE) {
            if (end - p < 8) return -1;
            c->f_addr[c->nfree++] = mlz_get_u64(p); p += 8;
            continue;
        }
        const uint8_t *tail = p;
        int nv = t == MLZ_EV_GC ? 2 : 1;
        for (int k = 0; k < nv; k++) {
            if (mlz_varint_get(p, end, &v, &u)) return -1;
            p += u;
        }
        if (t >= MLZ_EV_EXT_FIRST) {
            if (v > MLZ_EXT_MAX || (uint64_t)(end - p) < v) return -1;
            p += v;
        }
        size_t tl = (size_t)(p - tail);
        if (grow_to((void **)&c->other, &c->other_cap, c->other_len + tl, 1)) return -1;
        memcpy(c->other + c->other_len, tail, tl);
        c->other_len += tl;
    }
    return 0;
}

/* ------------------------------------------------------------- encoding */

static int s_need(stream *s, size_t n) { return grow_to((void **)&s->p, &s->cap, s->len + n, 1); }

/* A column of numbers as byte planes: width byte, then width planes. */
static int put_num_col(stream *s, const uint64_t *v, uint32_t n, size_t stride)
{
    uint64_t all = 0;
    for (uint32_t i = 0; i < n; i++) all |= v[i * stride];
    unsigned w = 0;
    while (w < 8 && (all >> (8 * w))) w++;
    if (s_need(s, 1 + (size_t)w * n)) return -1;
    s->p[s->len++] = (uint8_t)w;
    for (unsigned b = 0; b < w; b++) {
        uint8_t *o = s->p + s->len;
        for (uint32_t i = 0; i < n; i++) o[i] = (uint8_t)(v[i * stride] >> (8 * b));
        s->len += n;
    }
    return 0;
}

static int lit_add(lits *l, uint64_t x)
{
    if (grow_to((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v)) return -1;
    l->v[l->n++] = x;
    return 0;
}

/* addr's entry in the block's map, made (with neither an allocation nor a
 * free) if the address is new to the block. */
static live_ent *live_at(mlz_split_codec *c, uint64_t addr)
{
    uint32_t h = (uint32_t)((addr * 0x9E3779B97F4A7C15ull) >> 46) & (LIVE_SLOTS - 1);
    for (;;) {
        live_ent *e = &c->live[h];
        if (e->gen != c->gen) { *e = (live_ent){ addr, LIVE_DEAD, c->gen, 0 }; return e; }
        if (e->addr == addr) return e;
        h = (h + 1) & (LIVE_SLOTS - 1);
    }
}

/* Works out, for every FREE, the allocation of this block it frees, and
 * for every ALLOC, how many FREEs back its address was last freed. */
static int link_frees(mlz_split_codec *c)
{
    mlz_split_cols *k = &c->cols;
    if (!c->live && !(c->live = calloc(LIVE_SLOTS, sizeof *c->live))) return -1;
    if (grow_to((void **)&c->free_idx, &c->free_idx_cap, k->nfree + 1, sizeof *c->free_idx) ||
        grow_to((void **)&c->alloc_back, &c->alloc_back_cap, k->nalloc + 1, sizeof *c->alloc_back))
        return -1;
    if (++c->gen == 0) { memset(c->live, 0, LIVE_SLOTS * sizeof *c->live); c->gen = 1; }
    uint32_t ai = 0, fi = 0;
    for (uint32_t i = 0; i < k->n; i++) {
        if (k->kind[i] == MLZ_EV_ALLOC) {
            live_ent *e = live_at(c, k->a_addr[ai]);
            c->alloc_back[ai] = e->fidx ? fi - (e->fidx - 1) : 0;
            e->idx = ai++;                /* the latest allocation wins */
        } else if (k->kind[i] == MLZ_EV_FREE) {
            live_ent *e = live_at(c, k->f_addr[fi]);
            c->free_idx[fi] = e->idx;
            e->idx = LIVE_DEAD;           /* freed (the entry stays: probe chains) */
            e->fidx = ++fi;
        }
    }
    return 0;
}

long mlz_split_encode(mlz_split_codec *c, const uint8_t *v1, size_t len, const uint8_t **out)
{
    mlz_split_cols *k = &c->cols;
    if (c->model != 2 || len == 0 || len > MLZ_SPLIT_MAX_RAW || parse_v1(k, v1, len) || link_frees(c))
        return -1;
    for (int i = 0; i < MLZ_SPLIT_NSTREAMS; i++) c->s[i].len = 0;
    stream *S = c->s;
    if (s_need(&S[MLZ_S_KIND], k->n)) return -1;
    memcpy(S[MLZ_S_KIND].p, k->kind, k->n);
    S[MLZ_S_KIND].len = k->n;
    if (put_num_col(&S[MLZ_S_DELTA], k->delta, k->n, 1)) return -1;

    lits *L = c->scratch;
    for (int i = 0; i < 5; i++) L[i].n = 0;
#define size_l L[0]
#define addr_l L[1]
#define thr_l L[2]
#define ref_l L[3]
#define flit_l L[4]
    if (s_need(&S[MLZ_S_SIZE_CODE], k->nalloc) || s_need(&S[MLZ_S_ADDR_CODE], k->nalloc)) return -1;
    model *m = &c->m;
    model_reset(m);
    if (grow_to((void **)&c->live_list, &c->live_list_cap, k->nalloc + 1, sizeof *c->live_list) ||
        grow_to((void **)&c->live_pos, &c->live_pos_cap, k->nalloc + 1, sizeof *c->live_pos))
        return -1;
    uint32_t ai = 0, fi = 0, nlive = 0;
    for (uint32_t i = 0; i < k->n; i++) {
        if (k->kind[i] == MLZ_EV_ALLOC) {
            uint64_t size = k->a_size[ai], addr = k->a_addr[ai];
            uint16_t th = k->a_thread[ai];
            unsigned ss = size_slot(size);
            if (m->size_len[ss] && m->size_tab[ss] == size) {
                S[MLZ_S_SIZE_CODE].p[S[MLZ_S_SIZE_CODE].len++] = (uint8_t)(ss + 1);
            } else {
                S[MLZ_S_SIZE_CODE].p[S[MLZ_S_SIZE_CODE].len++] = 0;
                m->size_tab[ss] = size;
                m->size_len[ss] = (uint8_t)mlz_varint_len(size);
                if (lit_add(&size_l, size)) return -1;
            }
            uint32_t code = row_take_addr(m, reuse_slot_of(size), addr), j = c->alloc_back[ai];
            if (!code && j && j <= MLZ_SPLIT_BACK_MAX) code = MLZ_SPLIT_REUSE_DEPTH + j;
            S[MLZ_S_ADDR_CODE].p[S[MLZ_S_ADDR_CODE].len++] = (uint8_t)code;
            c->live_pos[ai] = nlive;
            c->live_list[nlive++] = ai;
            if (!code && lit_add(&addr_l, zz(addr - addr_base(m, th)))) return -1;
            addr_seen(m, th, addr);
            if (lit_add(&thr_l, (uint64_t)(th ^ m->prev_thread))) return -1;
            m->prev_thread = th;
            ai++;
        } else if (k->kind[i] == MLZ_EV_FREE) {
            uint32_t idx = c->free_idx[fi];
            uint64_t addr = k->f_addr[fi++];
            if (idx != LIVE_DEAD) {
                uint32_t p = c->live_pos[idx];
                if (lit_add(&ref_l, nlive - p)) return -1;
                c->live_list[p] = c->live_list[--nlive];
                c->live_pos[c->live_list[p]] = p;
                row_push(m, reuse_slot_of(k->a_size[idx]), addr);
            } else {
                if (lit_add(&ref_l, 0) || lit_add(&flit_l, zz(addr - m->prev_free_lit))) return -1;
                m->prev_free_lit = addr;
            }
        }
    }
    if (put_num_col(&S[MLZ_S_SIZE_LIT], size_l.v, (uint32_t)size_l.n, 1) ||
        put_num_col(&S[MLZ_S_ADDR_LIT], addr_l.v, (uint32_t)addr_l.n, 1) ||
        put_num_col(&S[MLZ_S_STACK], k->a_stack, k->nalloc, 1) ||
        put_num_col(&S[MLZ_S_THREAD], thr_l.v, (uint32_t)thr_l.n, 1) ||
        put_num_col(&S[MLZ_S_FREE_REF], ref_l.v, (uint32_t)ref_l.n, 1) ||
        put_num_col(&S[MLZ_S_FREE_LIT], flit_l.v, (uint32_t)flit_l.n, 1) ||
        s_need(&S[MLZ_S_OTHER], k->other_len))
        return -1;
    if (k->other_len) memcpy(S[MLZ_S_OTHER].p, k->other, k->other_len);
    S[MLZ_S_OTHER].len = k->other_len;

    size_t bound = MLZ_SPLIT_HEADER + DIR_BYTES;
    for (int i = 0; i < MLZ_SPLIT_NSTREAMS; i++) bound += ZSTD_compressBound(S[i].len);
    if (grow_to((void **)&c->out, &c->out_cap, bound, 1)) return -1;
    uint8_t *dir = c->out + MLZ_SPLIT_HEADER, *o = dir + DIR_BYTES;
    for (int i = 0; i < MLZ_SPLIT_NSTREAMS; i++) {
        size_t packed = 0;
        if (S[i].len) {
            /* Matches of 7 bytes at least, except in the literal columns:
             * the other streams are codes and small numbers, where short
             * matches save little and cost the decoder a sequence each
             * (measured: files 1-3% smaller, decoding 7-13% faster). */
            int lit = i == MLZ_S_SIZE_LIT || i == MLZ_S_ADDR_LIT || i == MLZ_S_FREE_LIT;
            if (ZSTD_isError(ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, c->level)) ||
                ZSTD_isError(ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_minMatch, lit ? 0 : 7)))
                return -1;
            size_t z = ZSTD_compress2(c->cctx, o, ZSTD_compressBound(S[i].len), S[i].p, S[i].len);
            if (ZSTD_isError(z)) return -1;
            if (z >= S[i].len) { memcpy(o, S[i].p, S[i].len); z = S[i].len; }  /* stored */
            packed = z;
        }
        mlz_put_u32(dir + 8 * i, (uint32_t)S[i].len);
        mlz_put_u32(dir + 8 * i + 4, (uint32_t)packed);
        o += packed;
    }
    size_t payload = (size_t)(o - dir);
    mlz_put_u32(c->out, (uint32_t)payload);
    mlz_put_u32(c->out + 4, k->n);
    mlz_put_u32(c->out + 8, (uint32_t)len);
    mlz_put_u32(c->out + 12, mlz_split_crc(dir, payload));
    *out = c->out;
    return (long)(MLZ_SPLIT_HEADER + payload);
}

/* ------------------------------------------------------------- decoding */

#define BAD(...) do { snprintf(why, whylen, __VA_ARGS__); return -1; } while (0)

/* The v1 varint bytes beyond the first of a value of a column of width 1
 * (low byte b0) or 2 (b0, b1): from the bytes, so that loops over the
 * planes vectorise. */
static inline uint32_t varint_extra1(uint8_t b0) { return b0 >> 7; }
static inline uint32_t varint_extra2(uint8_t b0, uint8_t b1) { return ((b1 | (b0 >> 7)) != 0) + (b1 >= 0x40); }

/* The v1 varint bytes of a column's n values, from its byte planes where
 * the width allows (byte loops the compiler vectorises): a value needs a
 * second byte from 2^7 on and a third from 2^14 on. */

COLUMN_LOOPS static size_t varint_bytes(const uint8_t *restrict p, uint32_t n, unsigned w, const uint64_t *v)
{
    size_t sum = n;
    uint32_t t = 0;   /* at most 2n: 32-bit lanes vectorise four times wider than size_t */
    if (w == 1) {
        for (uint32_t i = 0; i < n; i++) t += varint_extra1(p[i]);
        sum += t;
    } else if (w == 2) {
        const uint8_t *restrict hi = p + n;
        for (uint32_t i = 0; i < n; i++) t += varint_extra2(p[i], hi[i]);
        sum += t;
    } else if (w > 2) {
        sum = 0;
        for (uint32_t i = 0; i < n; i++) sum += mlz_varint_len(v[i]);
    }
    return sum;
}

/* The v1 bytes beyond the first of the ALLOCs' and the FREEs' delta
 * varints (the delta column has one value per event), with masks rather
 * than branches so that the widths of 1 and 2 vectorise. */
COLUMN_LOOPS static void delta_extra_by_kind(const stream *s, const uint8_t *restrict kind, uint32_t n, const uint64_t *v,
                                size_t *alloc, size_t *free)
{
    unsigned w = s->p[0];
    const uint8_t *restrict p = s->p + 1;
    uint32_t ta = 0, tf = 0;
    if (w == 1) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t e = varint_extra1(p[i]);
            ta += e & (kind[i] == MLZ_EV_ALLOC);
            tf += e & (kind[i] == MLZ_EV_FREE);
        }
    } else if (w == 2) {
        const uint8_t *restrict hi = p + n;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t e = varint_extra2(p[i], hi[i]);
            ta += e & (0u - (kind[i] == MLZ_EV_ALLOC));
            tf += e & (0u - (kind[i] == MLZ_EV_FREE));
        }
    } else if (w > 2) {
        for (uint32_t i = 0; i < n; i++) {
            uint32_t e = (uint32_t)mlz_varint_len(v[i]) - 1;
            ta += kind[i] == MLZ_EV_ALLOC ? e : 0;
            tf += kind[i] == MLZ_EV_FREE ? e : 0;
        }
    }
    *alloc = ta;
    *free = tf;
}

/* The width of a byte-plane column of n numbers, or -1 if its length does
 * not fit it or it is above maxw. */
static int col_width(const stream *s, uint32_t n, unsigned maxw)
{
    if (s->len < 1) return -1;
    unsigned w = s->p[0];
    if (w > maxw || s->len != 1 + (size_t)w * n || (n == 0 && w)) return -1;
    return (int)w;
}

/* Reads a byte-plane column of n numbers; -1 if its length or width is wrong
 * or the width is not the smallest that holds the values. With vbytes, also
 * gives the v1 varint bytes of the values. */

COLUMN_LOOPS static int get_num_col(const stream *s, uint32_t n, uint64_t *restrict v, unsigned maxw, size_t *vbytes)
{
    int sw = col_width(s, n, maxw);
    if (sw < 0) return -1;
    unsigned w = (unsigned)sw;
    const uint8_t *restrict p = s->p + 1;
    /* One pass for the common widths (each a simple, vectorisable loop),
     * plane by plane for the rest. */
    if (w == 0) {
        memset(v, 0, (size_t)n * sizeof *v);
    } else if (w == 1) {
        for (uint32_t i = 0; i < n; i++) v[i] = p[i];
    } else if (w == 2) {
        const uint8_t *restrict p1 = p + n;   /* not p[n + i]: its 32-bit wrap stops vectorising */
        for (uint32_t i = 0; i < n; i++) v[i] = p[i] | (uint64_t)p1[i] << 8;
    } else if (w == 3) {
        const uint8_t *restrict p1 = p + n, *restrict p2 = p + 2 * (size_t)n;
        for (uint32_t i = 0; i < n; i++) v[i] = p[i] | (uint64_t)p1[i] << 8 | (uint64_t)p2[i] << 16;
    } else {
        for (uint32_t i = 0; i < n; i++) v[i] = p[i];
        for (unsigned b = 1; b < w; b++) {
            const uint8_t *restrict q = p + (size_t)b * n;
            for (uint32_t i = 0; i < n; i++) v[i] |= (uint64_t)q[i] << (8 * b);
        }
    }
    if (w) {   /* minimal width: the top plane is not all zero */
        const uint8_t *top = s->p + 1 + (size_t)(w - 1) * n;
        uint32_t i = 0;
        while (i < n && !top[i]) i++;
        if (i == n) return -1;
    }
    if (vbytes) *vbytes = varint_bytes(p, n, w, v);
    return 0;
}

/* The sum (mod 2^64) of a column's values, plane by plane: plane b adds
 * its byte sum times 2^(8b). Byte sums of at most 2^17 values fit 32 bits,
 * and the compiler vectorises them. */
COLUMN_LOOPS static uint64_t col_sum(const stream *s, uint32_t n)
{
    unsigned w = s->p[0];
    uint64_t sum = 0;
    for (unsigned b = 0; b < w; b++) {
        const uint8_t *restrict q = s->p + 1 + (size_t)b * n;
        uint32_t t = 0;
        for (uint32_t i = 0; i < n; i++) t += q[i];
        sum += (uint64_t)t << (8 * b);
    }
    return sum;
}

/* The smallest and largest of a column's n >= 1 values: from the planes
 * for widths up to 2 (vectorised), else from the values. */
COLUMN_LOOPS static void col_range(const stream *s, uint32_t n, const uint64_t *v, uint64_t *lo, uint64_t *hi)
{
    unsigned w = s->p[0];
    const uint8_t *restrict p = s->p + 1;
    if (w == 0) {
        *lo = *hi = 0;
    } else if (w == 1) {
        uint8_t l = 255, h = 0;
        for (uint32_t i = 0; i < n; i++) { l = p[i] < l ? p[i] : l; h = p[i] > h ? p[i] : h; }
        *lo = l, *hi = h;
    } else if (w == 2) {
        const uint8_t *restrict p1 = p + n;
        uint16_t l = 65535, h = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint16_t x = (uint16_t)(p[i] | p1[i] << 8);
            l = x < l ? x : l;
            h = x > h ? x : h;
        }
        *lo = l, *hi = h;
    } else {
        uint64_t l = UINT64_MAX, h = 0;
        for (uint32_t i = 0; i < n; i++) { l = v[i] < l ? v[i] : l; h = v[i] > h ? v[i] : h; }
        *lo = l, *hi = h;
    }
}

/* The number of values in a literal column, from its length; UINT32_MAX
 * when that cannot tell (width 0: then the caller counts the 0 codes; or
 * a malformed stream, which get_num_col then rejects). */
static uint32_t lit_count(const stream *s, uint32_t max)
{
    unsigned w = s->len ? s->p[0] : 0;
    if (!w || (s->len - 1) % w || (s->len - 1) / w > max) return UINT32_MAX;
    return (uint32_t)((s->len - 1) / w);
}

COLUMN_LOOPS static uint32_t zeros8(const uint8_t *v, uint32_t n)
{
    uint32_t z = 0;
    for (uint32_t i = 0; i < n; i++) z += v[i] == 0;
    return z;
}

COLUMN_LOOPS static uint32_t zeros64(const uint64_t *v, uint32_t n)
{
    uint32_t z = 0;
    for (uint32_t i = 0; i < n; i++) z += v[i] == 0;
    return z;
}

/* The ALLOCs and FREEs among n event kinds; 1 if any kind is reserved (>= 128). */
COLUMN_LOOPS static int count_kinds(const uint8_t *kind, uint32_t n, uint32_t *na, uint32_t *nf)
{
    uint32_t a = 0, f = 0;
    uint8_t any = 0;
    for (uint32_t i = 0; i < n; i++) {
        a += kind[i] == MLZ_EV_ALLOC;
        f += kind[i] == MLZ_EV_FREE;
        any |= kind[i];
    }
    *na = a, *nf = f;
    return any >= 128;
}

/* Unpacks the stream directory and the streams themselves. */
static int unpack(mlz_split_codec *c, const uint8_t *payload, size_t len, uint32_t n,
                  char *why, size_t whylen)
{
    if (len < DIR_BYTES) BAD("block payload of %zu bytes is shorter than its stream directory", len);
    const uint8_t *src = payload + DIR_BYTES, *end = payload + len;
    for (int i = 0; i < MLZ_SPLIT_NSTREAMS; i++) {
        uint32_t raw = mlz_get_u32(payload + 8 * i), packed = mlz_get_u32(payload + 8 * i + 4);
        size_t limit = i == MLZ_S_KIND || i == MLZ_S_SIZE_CODE || i == MLZ_S_ADDR_CODE ? n
                     : i == MLZ_S_OTHER ? MLZ_SPLIT_MAX_RAW : 1 + 8 * (size_t)n;
        if (raw > limit) BAD("stream %d claims %u bytes, more than %zu events allow", i, raw, limit);
        if ((packed == 0) != (raw == 0) || packed > raw)
            BAD("stream %d has impossible sizes (%u packed, %u raw)", i, packed, raw);
        if ((size_t)(end - src) < packed) BAD("stream %d runs past the end of its block", i);
        stream *s = &c->s[i];
        if (grow_to((void **)&s->p, &s->cap, raw ? raw : 1, 1)) BAD("out of memory");
        if (packed == raw) {
            if (raw) memcpy(s->p, src, raw);
        } else {
            size_t d = ZSTD_decompressDCtx(c->dctx, s->p, raw, src, packed);
            if (ZSTD_isError(d) || d != raw) BAD("stream %d does not decompress to its %u bytes", i, raw);
        }
        s->len = raw;
        src += packed;
    }
    if (src != end) BAD("%zu bytes after the last stream of the block", (size_t)(end - src));
    return 0;
}

/* Checks the tail (after the delta) of a GC, MARKER or extension event in
 * the OTHER stream; returns its length, or 0 if malformed. */
static size_t other_tail(uint8_t t, const uint8_t *p, const uint8_t *end)
{
    const uint8_t *q = p;
    uint64_t v = 0;
    size_t u;
    int nv = t == MLZ_EV_GC ? 2 : 1;
    for (int k = 0; k < nv; k++) {
        if (mlz_varint_get(q, end, &v, &u)) return 0;
        q += u;
    }
    if (t >= MLZ_EV_EXT_FIRST) {
        if (v > MLZ_EXT_MAX || (uint64_t)(end - q) < v) return 0;
        q += v;
    }
    return (size_t)(q - p);
}

/* Pass 1 of decoding: the sizes of the block's na ALLOCs from their codes
 * and literals (the recent-size table), and their v1 varint bytes. */
static int decode_sizes(model *m, const uint8_t *sc, const uint64_t *lit, uint32_t nlit, uint32_t na,
                        uint64_t *restrict size, uint16_t *restrict slot, size_t *bytes, char *why, size_t whylen)
{
    size_t sb = 0;
    uint32_t si = 0;
    for (uint32_t i = 0; i < na; i++) {
        uint8_t s = sc[i];
        uint64_t v;
        if (s) {
            if (!m->size_len[s - 1]) BAD("size code %u names an empty slot", s);
            v = m->size_tab[s - 1];
            sb += m->size_len[s - 1];
        } else {
            if (si == nlit) BAD("more size codes 0 than size literals (%u)", nlit);
            v = lit[si++];
            unsigned ss = size_slot(v);
            if (m->size_len[ss] && m->size_tab[ss] == v) BAD("size literal %llu should have been a table hit", (unsigned long long)v);
            m->size_tab[ss] = v;
            m->size_len[ss] = (uint8_t)mlz_varint_len(v);
            sb += m->size_len[ss];
        }
        size[i] = v;
        slot[i] = (uint16_t)reuse_slot_of(v);
    }
    if (si != nlit) BAD("%u size literals for %u size codes 0", nlit, si);
    *bytes = sb;
    return 0;
}

/* Pass 2: the threads of the ALLOCs (each stored XOR the previous one);
 * -1 if the column is malformed, else 1 if they are all one thread. Most
 * blocks are: every XOR after the first is 0, which a byte OR over the
 * planes shows without widening them to 64-bit values and reading those
 * back (8 MB written and read per million ALLOCs); the check and the fill
 * vectorise. Other blocks take the column's values (into scratch) through
 * the running XOR, which does not. */
COLUMN_LOOPS static int decode_threads(const stream *s, uint32_t na, uint16_t *restrict th, uint64_t *scratch)
{
    int w = col_width(s, na, 2);
    if (w < 0) return -1;
    if (w == 0) {   /* all 0 */
        memset(th, 0, (size_t)na * sizeof *th);
        return 1;
    }
    const uint8_t *p0 = s->p + 1, *p1 = w == 2 ? p0 + na : p0;   /* p1: the top plane */
    uint8_t rest = 0;
    for (uint32_t i = 1; i < na; i++) rest |= p0[i];
    if (w == 2)
        for (uint32_t i = 1; i < na; i++) rest |= p1[i];
    if (!rest) {
        /* Only the first value may be non-zero: it must fill the top plane
         * (get_num_col's smallest-width rule). */
        if (!p1[0]) return -1;
        uint16_t t = w == 1 ? p0[0] : (uint16_t)(p0[0] | p1[0] << 8);
        for (uint32_t i = 0; i < na; i++) th[i] = t;
        return 1;
    }
    if (get_num_col(s, na, scratch, 2, NULL)) return -1;
    uint16_t prev = 0, first = (uint16_t)scratch[0], other = 0;
    for (uint32_t i = 0; i < na; i++) {
        prev = (uint16_t)(prev ^ scratch[i]);
        th[i] = prev;
        other |= (uint16_t)(prev ^ first);
    }
    return other == 0;
}

/* Pass 3's inputs. */
typedef struct event_pass {
    const uint8_t *kind, *ac;
    const uint64_t *addr_lit, *flits, *refs;
    uint32_t n, nal, nfl;
} event_pass;

/* Pass 3: the addresses, in event order (the freed-blocks and address-base
 * models), with the live list on allocation indices: a FREE names its
 * object by its place from the list's end, which then takes the last
 * entry's place. The block's sizes (pass 1) give a freed block's row.
 * model2 and one_thread are constants in each copy the compiler makes. */
static inline __attribute__((always_inline)) int
event_pass_run(mlz_split_codec *c, const event_pass *e, const int model2, const int one_thread,
               char *why, size_t whylen)
{
    model *m = &c->m;
    const uint8_t *restrict kind = e->kind, *restrict ac = e->ac;
    /* Literals are taken without a bound check; the counts are checked at
     * the end (the columns have room for n + 1 values, more than codes 0). */
    const uint64_t *restrict al = e->addr_lit, *restrict fl = e->flits;
    const uint64_t *restrict refs = e->refs;
    uint32_t *restrict live = c->live_list;
    uint32_t nlive = 0;
    const uint64_t *restrict a_size = c->cols.a_size;
    const uint16_t *restrict a_thread = c->cols.a_thread, *restrict slot = c->slot;
    uint64_t *restrict a_addr = c->cols.a_addr, *restrict f_addr = c->cols.f_addr;
    uint32_t ai = 0, fi = 0;
    uint64_t last_addr = 0;   /* one_thread: the address base */
    for (uint32_t i = 0; i < e->n; i++) {
        uint8_t t = kind[i];
        if (t == MLZ_EV_ALLOC) {
            uint64_t addr;
            uint8_t a = ac[ai];
            if (!a) {
                /* Writers code the first match (docs/FORMAT.md); readers do
                 * not re-check it: the CRC guards the bytes, and a different
                 * choice would still decode to the same events. */
                addr = (one_thread ? last_addr : addr_base(m, a_thread[ai])) + unzz(*al++);
            } else if (model2 && a <= MLZ_SPLIT_REUSE_DEPTH) {
                unsigned rs = slot[ai];
                unsigned r = c->nth_bit[m->row_state[rs] >> 8][a - 1];
                if (r == 0xFF) BAD("address code %u names no freed block of size %llu", a, (unsigned long long)a_size[ai]);
                addr = row_take(m, rs, r);
            } else if (model2) {
                uint32_t j = a - MLZ_SPLIT_REUSE_DEPTH;
                if (j > fi) BAD("address code %u names a FREE before the block's first", a);
                addr = f_addr[fi - j];
            } else if (a <= MLZ_SPLIT_REUSE_DEPTH) {
                unsigned rs = slot[ai];
                uint64_t size = a_size[ai];
                if (m->reuse_size[rs] != size || a > m->reuse_count[rs])
                    BAD("address code %u names no freed block of size %llu", a, (unsigned long long)size);
                addr = reuse_take(m, rs, a);
            } else {
                uint32_t j = a - MLZ_SPLIT_REUSE_DEPTH;
                if (j > m->ring_count) BAD("address code %u names no recently freed block", a);
                addr = m->ring[(m->ring_head + MLZ_SPLIT_RING + 1 - j) % MLZ_SPLIT_RING];
            }
            if (one_thread) last_addr = addr;
            else addr_seen(m, a_thread[ai], addr);
            live[nlive++] = ai;
            a_addr[ai++] = addr;
        } else if (t == MLZ_EV_FREE) {
            uint64_t ref = refs[fi], addr;
            if (ref - 1 < nlive) {
                uint32_t p = nlive - (uint32_t)ref, o = live[p];
                live[p] = live[--nlive];
                addr = a_addr[o];
                if (model2) row_push(m, slot[o], addr);
                else reuse_push(m, a_size[o], addr);
            } else if (ref) {
                BAD("FREE names live object %llu from the end of %u", (unsigned long long)ref, nlive);
            } else {
                addr = m->prev_free_lit + unzz(*fl++);
                m->prev_free_lit = addr;
            }
            f_addr[fi++] = addr;
        }
    }
    if (al != e->addr_lit + e->nal) BAD("%u address literals for %zu address codes 0", e->nal, (size_t)(al - e->addr_lit));
    if (fl != e->flits + e->nfl) BAD("%u free literals for %zu free references 0", e->nfl, (size_t)(fl - e->flits));
    return 0;
}

/* The pass's copies, each a function of its own: inlined into
 * mlz_split_decode, the loop ran short of registers and kept its indices
 * on the stack, adding a store-to-load delay to every FREE. */
static __attribute__((noinline)) int event_pass_model1(mlz_split_codec *c, const event_pass *e, char *why, size_t whylen)
{
    return event_pass_run(c, e, 0, 0, why, whylen);
}

static __attribute__((noinline)) int event_pass_one_thread(mlz_split_codec *c, const event_pass *e, char *why, size_t whylen)
{
    return event_pass_run(c, e, 1, 1, why, whylen);
}

static __attribute__((noinline)) int event_pass_threads(mlz_split_codec *c, const event_pass *e, char *why, size_t whylen)
{
    return event_pass_run(c, e, 1, 0, why, whylen);
}

/* Pass 4, for blocks that have them: the GC, MARKER and extension events'
 * tails in the other stream, checked and measured; -1 if malformed. */
static long other_pass(const uint8_t *kind, uint32_t n, const uint8_t *oth, const uint8_t *oend,
                       char *why, size_t whylen)
{
    size_t op = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t t = kind[i];
        if (t == MLZ_EV_ALLOC || t == MLZ_EV_FREE) continue;
        size_t tl = other_tail(t, oth + op, oend);
        if (!tl) BAD("malformed or missing fields for event %u (type %d)", i, t);
        op += tl;
    }
    return (long)op;
}

int mlz_split_decode(mlz_split_codec *c, const uint8_t *payload, size_t len,
                     uint32_t n, char *why, size_t whylen, int *bad_kind)
{
    *bad_kind = 0;
    mlz_split_cols *k = &c->cols;
    if (n == 0 || n > MLZ_SPLIT_MAX_EVENTS) BAD("block holds %u events (1..%u allowed)", n, MLZ_SPLIT_MAX_EVENTS);
    if (unpack(c, payload, len, n, why, whylen)) return -1;
    if (cols_reserve(k, n)) BAD("out of memory");
    stream *S = c->s;
    if (S[MLZ_S_KIND].len != n) BAD("kind stream holds %zu events, block header says %u", S[MLZ_S_KIND].len, n);
    uint32_t na, nf;
    const uint8_t *kind = S[MLZ_S_KIND].p;
    if (count_kinds(kind, n, &na, &nf)) {
        for (uint32_t i = 0; i < n; i++)
            if (kind[i] >= 128) { *bad_kind = 1; BAD("invalid event type %d (128..255 are reserved)", kind[i]); }
    }
    memcpy(k->kind, kind, n);
    k->n = n; k->nalloc = na; k->nfree = nf;
    size_t delta_bytes = 0, stack_bytes = 0;   /* v1 varints, for raw_len */
    if (get_num_col(&S[MLZ_S_DELTA], n, k->delta, 8, &delta_bytes)) BAD("malformed delta stream");
    if (S[MLZ_S_SIZE_CODE].len != na || S[MLZ_S_ADDR_CODE].len != na)
        BAD("size or address code streams do not hold one code per ALLOC (%u)", na);
    if (get_num_col(&S[MLZ_S_STACK], na, k->a_stack, 8, &stack_bytes)) BAD("malformed stack stream");
    k->delta_sum = col_sum(&S[MLZ_S_DELTA], n);
    k->stack_lo = k->stack_hi = 0;
    if (na) col_range(&S[MLZ_S_STACK], na, k->a_stack, &k->stack_lo, &k->stack_hi);

    /* Literal columns: one value per 0 code. Their counts come from their
     * lengths (no counting pass); the passes below check each literal they
     * take against them, and the totals after. */
    const uint8_t *sc = S[MLZ_S_SIZE_CODE].p, *ac = S[MLZ_S_ADDR_CODE].p;
    lits *L = c->scratch;
    for (int i = 0; i < 5; i++)
        if (grow_to((void **)&L[i].v, &L[i].cap, n + 1, sizeof *L[i].v)) BAD("out of memory");
    uint64_t *size_lit = L[0].v, *addr_lit = L[1].v, *thr = L[2].v, *refs = L[3].v, *flits = L[4].v;
    int one_thread = decode_threads(&S[MLZ_S_THREAD], na, k->a_thread, thr);
    if (one_thread < 0) BAD("malformed thread stream");
    if (get_num_col(&S[MLZ_S_FREE_REF], nf, refs, 8, NULL)) BAD("malformed free reference stream");
    uint32_t nsl = lit_count(&S[MLZ_S_SIZE_LIT], na), nal = lit_count(&S[MLZ_S_ADDR_LIT], na);
    uint32_t nfl = lit_count(&S[MLZ_S_FREE_LIT], nf);
    if (nsl == UINT32_MAX) nsl = zeros8(sc, na);
    if (nal == UINT32_MAX) nal = zeros8(ac, na);
    if (nfl == UINT32_MAX) nfl = zeros64(refs, nf);
    if (get_num_col(&S[MLZ_S_SIZE_LIT], nsl, size_lit, 8, NULL)) BAD("malformed size literal stream");
    if (get_num_col(&S[MLZ_S_ADDR_LIT], nal, addr_lit, 8, NULL)) BAD("malformed address literal stream");
    if (get_num_col(&S[MLZ_S_FREE_LIT], nfl, flits, 8, NULL)) BAD("malformed free literal stream");

    /* The models, in two more passes (the threads were above): the sizes
     * depend on ALLOCs alone; the live list and the addresses run in event
     * order, in one pass (as two, the FREEs' objects went through memory
     * between them, and every event paid the loop and its kind twice). */
    model *m = &c->m;
    model_reset(m);
    size_t size_bytes;
    if (grow_to((void **)&c->slot, &c->slot_cap, (size_t)na + 1, sizeof *c->slot)) BAD("out of memory");
    if (decode_sizes(m, sc, size_lit, nsl, na, k->a_size, c->slot, &size_bytes, why, whylen)) return -1;
    if (grow_to((void **)&c->live_list, &c->live_list_cap, (size_t)na + 1, sizeof *c->live_list))
        BAD("out of memory");
    event_pass e = {
        .kind = kind, .ac = ac, .addr_lit = addr_lit, .flits = flits, .refs = refs,
        .n = n, .nal = nal, .nfl = nfl,
    };
    /* One copy of the pass per model, and one for blocks of a single thread
     * (most: their address base is simply the previous ALLOC's address). */
    int rc = c->model != 2 ? event_pass_model1(c, &e, why, whylen)
           : one_thread    ? event_pass_one_thread(c, &e, why, whylen)
                           : event_pass_threads(c, &e, why, whylen);
    if (rc) return -1;
    const uint8_t *oth = S[MLZ_S_OTHER].p;
    long olen = na + nf == n ? 0 : other_pass(kind, n, oth, oth + S[MLZ_S_OTHER].len, why, whylen);
    if (olen < 0) return -1;
    size_t op = (size_t)olen, raw;
    /* The v1 length, column by column. */
    raw = (size_t)n + 10 * (size_t)na + 8 * (size_t)nf + op   /* type bytes, fixed fields, tails */
        + delta_bytes + size_bytes + stack_bytes;
    if (op != S[MLZ_S_OTHER].len) BAD("%zu unused bytes in the other-events stream", S[MLZ_S_OTHER].len - op);
    if (raw > MLZ_SPLIT_MAX_RAW) BAD("block decodes to %zu bytes, over the %u limit", raw, MLZ_SPLIT_MAX_RAW);
    if (grow_to((void **)&k->other, &k->other_cap, op ? op : 1, 1)) BAD("out of memory");
    if (op) memcpy(k->other, oth, op);
    k->other_len = op;
    k->raw_len = raw;
    /* Per kind, for the reports' byte counts: type byte, fixed fields and
     * varints (a delta takes at least one byte). */
    size_t da, df;
    delta_extra_by_kind(&S[MLZ_S_DELTA], kind, n, k->delta, &da, &df);
    k->alloc_v1_bytes = 12 * (uint64_t)na + da + size_bytes + stack_bytes;
    k->free_v1_bytes = 10 * (uint64_t)nf + df;
    return 0;
}

size_t mlz_split_to_v1(const mlz_split_cols *k, uint8_t *out)
{
    uint8_t *o = out;
    const uint8_t *oth = k->other, *oend = k->other + k->other_len;
    uint32_t ai = 0, fi = 0;
    for (uint32_t i = 0; i < k->n; i++) {
        uint8_t t = k->kind[i];
        *o++ = t;
        o += mlz_varint_put(o, k->delta[i]);
        if (t == MLZ_EV_ALLOC) {
            mlz_put_u64(o, k->a_addr[ai]); o += 8;
            o += mlz_varint_put(o, k->a_size[ai]);
            o += mlz_varint_put(o, k->a_stack[ai]);
            mlz_put_u16(o, k->a_thread[ai]); o += 2;
            ai++;
        } else if (t == MLZ_EV_FREE) {
            mlz_put_u64(o, k->f_addr[fi++]); o += 8;
        } else {
            size_t tl = other_tail(t, oth, oend);
            memcpy(o, oth, tl);
            o += tl;
            oth += tl;
        }
    }
    return (size_t)(o - out);
}
