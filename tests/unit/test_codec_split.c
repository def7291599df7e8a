/*
 * test_codec_split.c - the split-stream block codec: every stream model on
 * its edge cases (first event of a block, frees of objects born in an
 * earlier block, address reuse, 2^64-1 values, threads appearing mid-block),
 * v1 -> split -> v1 byte-identical round trips through files, the index's
 * seek by time, and rejection of every truncation and every bit flip of a
 * split file's event stream with a rule and an offset. Address model 2's
 * rows and back references, its rejection of codes that name nothing, and
 * files of model 1 (written before it) read back event for event.
 */
#include "../check.h"
#include "codec_split.h"
#include "mlz_format.h"
#include "varint.h"

#include <fcntl.h>
#include <zstd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static uint8_t wbuf[MLZ_SPLIT_MAX_RAW], zbuf[MLZ_LZ4_BOUND];

static const char META[] =
    "{\"stack_traces\":{\"0\":[{\"file_id\":0,\"line\":42,\"func_id\":0}],"
    "\"1\":[{\"file_id\":0,\"line\":7,\"func_id\":0}]},"
    "\"files\":{\"0\":\"/src/a.c\"},\"functions\":{\"0\":\"main\"},\"kind\":\"trace\",\"rate\":1}";

/* ---------------------------------------------- v1 event bytes, by hand */

typedef struct v1buf { uint8_t b[1 << 16]; size_t n; } v1buf;

static void v1_alloc(v1buf *v, uint64_t dt, uint64_t addr, uint64_t size, uint64_t stack, uint16_t th)
{
    v->b[v->n++] = MLZ_EV_ALLOC;
    v->n += mlz_varint_put(v->b + v->n, dt);
    mlz_put_u64(v->b + v->n, addr); v->n += 8;
    v->n += mlz_varint_put(v->b + v->n, size);
    v->n += mlz_varint_put(v->b + v->n, stack);
    mlz_put_u16(v->b + v->n, th); v->n += 2;
}

static void v1_free(v1buf *v, uint64_t dt, uint64_t addr)
{
    v->b[v->n++] = MLZ_EV_FREE;
    v->n += mlz_varint_put(v->b + v->n, dt);
    mlz_put_u64(v->b + v->n, addr); v->n += 8;
}

static void v1_gc(v1buf *v, uint64_t dt, uint64_t objects, uint64_t bytes)
{
    v->b[v->n++] = MLZ_EV_GC;
    v->n += mlz_varint_put(v->b + v->n, dt);
    v->n += mlz_varint_put(v->b + v->n, objects);
    v->n += mlz_varint_put(v->b + v->n, bytes);
}

static void v1_ext(v1buf *v, uint8_t type, uint64_t dt, const char *s)
{
    v->b[v->n++] = type;
    v->n += mlz_varint_put(v->b + v->n, dt);
    size_t l = strlen(s);
    v->n += mlz_varint_put(v->b + v->n, l);
    memcpy(v->b + v->n, s, l);
    v->n += l;
}

/* Encodes v, decodes the block, checks the v1 bytes come back; leaves the
 * encoder's streams in enc for the caller to look at. */
static int roundtrip(mlz_split_codec *enc, const v1buf *v)
{
    const uint8_t *blk;
    long n = mlz_split_encode(enc, v->b, v->n, &blk);
    if (n <= MLZ_SPLIT_HEADER) return -1;
    uint8_t *copy = malloc((size_t)n);
    memcpy(copy, blk, (size_t)n);
    int rc = -1;
    mlz_split_codec *dec = mlz_split_new(1);
    char why[200];
    int bad_kind;
    static uint8_t out[MLZ_SPLIT_MAX_RAW];
    if (mlz_get_u32(copy) == (uint64_t)n - MLZ_SPLIT_HEADER &&
        mlz_get_u32(copy + 12) == mlz_split_crc(copy + MLZ_SPLIT_HEADER, (size_t)n - MLZ_SPLIT_HEADER) &&
        !mlz_split_decode(dec, copy + MLZ_SPLIT_HEADER, (size_t)n - MLZ_SPLIT_HEADER, mlz_get_u32(copy + 4),
                          why, sizeof why, &bad_kind)) {
        const mlz_split_cols *c = mlz_split_columns(dec);
        size_t len = mlz_split_to_v1(c, out);
        if (len == v->n && c->raw_len == v->n && !memcmp(out, v->b, len)) rc = 0;
        /* The per-kind byte counts the reports take whole. */
        uint64_t ab = 0, fb = 0;
        for (uint32_t i = 0, a = 0; i < c->n; i++) {
            if (c->kind[i] == MLZ_EV_ALLOC) ab += mlz_v1_alloc_len(c->delta[i], c->a_size[a], c->a_stack[a]), a++;
            else if (c->kind[i] == MLZ_EV_FREE) fb += mlz_v1_free_len(c->delta[i]);
        }
        if (ab != c->alloc_v1_bytes || fb != c->free_v1_bytes) {
            fprintf(stderr, "  v1 bytes by kind: %llu/%llu, columns say %llu/%llu\n", (unsigned long long)ab,
                    (unsigned long long)fb, (unsigned long long)c->alloc_v1_bytes, (unsigned long long)c->free_v1_bytes);
            rc = -1;
        }
    } else {
        fprintf(stderr, "  decode: %s\n", why);
    }
    mlz_split_free(dec);
    free(copy);
    return rc;
}

static const uint8_t *stream(mlz_split_codec *c, int i, size_t *len) { return mlz_split_stream(c, i, len); }

/* Reads value k of a number column. */
static uint64_t col_at(const uint8_t *s, size_t len, uint32_t n, uint32_t k)
{
    unsigned w = s[0];
    if (len != 1 + (size_t)w * n) return UINT64_MAX - 1;
    uint64_t v = 0;
    for (unsigned b = 0; b < w; b++) v |= (uint64_t)s[1 + (size_t)b * n + k] << (8 * b);
    return v;
}


/* Decodes a block made of the streams the last encode left in c, stream i
 * replaced by bytes, all stored uncompressed: 0, or -1 with why. */
static int decode_with(mlz_split_codec *c, uint32_t n, int i, const uint8_t *bytes, size_t len,
                       char *why, size_t whylen)
{
    static uint8_t payload[1 << 20];
    size_t off = 8 * MLZ_SPLIT_NSTREAMS;
    for (int k = 0; k < MLZ_SPLIT_NSTREAMS; k++) {
        size_t l;
        const uint8_t *p = stream(c, k, &l);
        if (k == i) p = bytes, l = len;
        mlz_put_u32(payload + 8 * k, (uint32_t)l);
        mlz_put_u32(payload + 8 * k + 4, (uint32_t)l);
        if (l) memcpy(payload + off, p, l);
        off += l;
    }
    mlz_split_codec *d = mlz_split_new(1);
    int bad_kind, rc = d ? mlz_split_decode(d, payload, off, n, why, whylen, &bad_kind) : -1;
    mlz_split_free(d);
    return rc;
}

/* ------------------------------------------------------------- models */

static void test_first_event_is_free_of_earlier_block(void)
{
    mlz_split_codec *c = mlz_split_new(3);
    REQUIRE(c);
    v1buf v = { .n = 0 };
    v1_free(&v, 0, 0x7f0000001000ull);       /* born before this block */
    v1_alloc(&v, 1, 0x7f0000002000ull, 32, 0, 1);
    v1_free(&v, 1, 0x7f0000002000ull);
    v1_free(&v, 1, 0x7f0000002000ull);       /* double free: not in the block's live set */
    CHECK(roundtrip(c, &v) == 0);
    size_t l;
    const uint8_t *ref = stream(c, MLZ_S_FREE_REF, &l);
    CHECK_EQ_U64(col_at(ref, l, 3, 0), 0);   /* literal */
    CHECK_EQ_U64(col_at(ref, l, 3, 1), 1);   /* the latest allocation */
    CHECK_EQ_U64(col_at(ref, l, 3, 2), 0);   /* freed already: literal */
    const uint8_t *lit = stream(c, MLZ_S_FREE_LIT, &l);
    CHECK_EQ_U64(col_at(lit, l, 2, 0), 2 * 0x7f0000001000ull);               /* zigzag from 0 */
    CHECK_EQ_U64(col_at(lit, l, 2, 1), 2 * (0x7f0000002000ull - 0x7f0000001000ull));
    mlz_split_free(c);
}

static void test_address_reuse_and_size_table(void)
{
    mlz_split_codec *c = mlz_split_new(3);
    REQUIRE(c);
    v1buf v = { .n = 0 };
    v1_alloc(&v, 0, 0x1000, 48, 0, 7);
    v1_alloc(&v, 0, 0x2000, 48, 0, 7);
    v1_free(&v, 0, 0x1000);
    v1_free(&v, 0, 0x2000);
    v1_alloc(&v, 0, 0x2000, 48, 0, 7);       /* LIFO top: depth 1 */
    v1_alloc(&v, 0, 0x1000, 48, 0, 7);       /* then depth 1 again */
    v1_alloc(&v, 0, 0x3000, 48, 0, 7);       /* nothing freed left: literal */
    v1_alloc(&v, 0, 0x3100, 64, 0, 7);
    CHECK(roundtrip(c, &v) == 0);
    size_t l;
    const uint8_t *ac = stream(c, MLZ_S_ADDR_CODE, &l);
    REQUIRE(l == 6);
    CHECK(ac[0] == 0 && ac[1] == 0 && ac[2] == 1 && ac[3] == 1 && ac[4] == 0 && ac[5] == 0);
    const uint8_t *lit = stream(c, MLZ_S_ADDR_LIT, &l);
    CHECK_EQ_U64(col_at(lit, l, 4, 0), 2 * 0x1000);       /* from base 0 */
    CHECK_EQ_U64(col_at(lit, l, 4, 1), 2 * 0x1000);       /* 0x2000 - 0x1000 */
    CHECK_EQ_U64(col_at(lit, l, 4, 2), 2 * 0x2000);       /* 0x3000 - 0x1000 (previous of thread 7) */
    CHECK_EQ_U64(col_at(lit, l, 4, 3), 2 * 0x100);
    const uint8_t *sc = stream(c, MLZ_S_SIZE_CODE, &l);
    REQUIRE(l == 6);
    CHECK(sc[0] == 0 && sc[1] != 0 && sc[1] == sc[2] && sc[5] == 0);
    stream(c, MLZ_S_SIZE_LIT, &l);
    CHECK_EQ_U64(l, 1 + 2 * 1);                            /* two literals (48, 64), one byte each */
    /* Frees name live objects from the end of the live list: 0x1000 is
     * second from the end (2), then 0x2000 is the last (1). */
    const uint8_t *ref = stream(c, MLZ_S_FREE_REF, &l);
    CHECK_EQ_U64(col_at(ref, l, 2, 0), 2);
    CHECK_EQ_U64(col_at(ref, l, 2, 1), 1);
    /* A reused address of another size is found among the recently freed
     * blocks of any size (rank 1), not in the size's LIFO. */
    v1buf w = { .n = 0 };
    v1_alloc(&w, 0, 0x1000, 48, 0, 1);
    v1_free(&w, 0, 0x1000);
    v1_alloc(&w, 0, 0x1000, 32, 0, 1);
    CHECK(roundtrip(c, &w) == 0);
    ac = stream(c, MLZ_S_ADDR_CODE, &l);
    CHECK(l == 2 && ac[1] == MLZ_SPLIT_REUSE_DEPTH + 1);
    mlz_split_free(c);
}

/* Model 2: a row gives blocks of a size back by their rank among those not
 * reused yet and keeps the last 8; past a row, the j-th latest FREE of any
 * size (j <= MLZ_SPLIT_BACK_MAX) names the address; past that, a literal. */
static void test_rows_and_back_references(void)
{
    mlz_split_codec *c = mlz_split_new(3);
    REQUIRE(c);
    size_t l;
    v1buf v = { .n = 0 };
    for (int i = 1; i <= 3; i++) v1_alloc(&v, 0, 0x1000ull * i, 48, 0, 1);   /* A, B, C */
    for (int i = 1; i <= 3; i++) v1_free(&v, 0, 0x1000ull * i);              /* latest first: C, B, A */
    v1_alloc(&v, 0, 0x2000, 48, 0, 1);       /* B: rank 2 */
    v1_alloc(&v, 0, 0x3000, 48, 0, 1);       /* C: rank 1 */
    v1_alloc(&v, 0, 0x1000, 48, 0, 1);       /* A: rank 1, the others are taken */
    CHECK(roundtrip(c, &v) == 0);
    const uint8_t *ac = stream(c, MLZ_S_ADDR_CODE, &l);
    REQUIRE(l == 6);
    CHECK(ac[3] == 2 && ac[4] == 1 && ac[5] == 1);

    /* Nine blocks of one size freed: the row keeps the last 8, so the
     * first comes back as the 9th latest FREE. */
    v = (v1buf){ .n = 0 };
    for (int i = 0; i < 9; i++) v1_alloc(&v, 0, 0x10000ull + 0x100 * i, 64, 0, 1);
    for (int i = 0; i < 9; i++) v1_free(&v, 0, 0x10000ull + 0x100 * i);
    v1_alloc(&v, 0, 0x10000, 64, 0, 1);
    v1_alloc(&v, 0, 0x10000 + 0x100 * 8, 64, 0, 1);
    CHECK(roundtrip(c, &v) == 0);
    ac = stream(c, MLZ_S_ADDR_CODE, &l);
    REQUIRE(l == 11);
    CHECK(ac[9] == MLZ_SPLIT_REUSE_DEPTH + 9 && ac[10] == 1);

    /* X freed, n other blocks freed after it, X allocated again with
     * another size (so from no row): the (n + 1)-th latest FREE. */
    for (unsigned n = MLZ_SPLIT_BACK_MAX - 2; n <= MLZ_SPLIT_BACK_MAX; n++) {
        v = (v1buf){ .n = 0 };
        v1_alloc(&v, 0, 0x900000, 32, 0, 1);
        for (unsigned i = 0; i < n; i++) v1_alloc(&v, 0, 0x100000ull + 0x40 * i, 16, 0, 1);
        v1_free(&v, 0, 0x900000);
        for (unsigned i = 0; i < n; i++) v1_free(&v, 0, 0x100000ull + 0x40 * i);
        v1_alloc(&v, 0, 0x900000, 4096, 0, 1);
        CHECK(roundtrip(c, &v) == 0);
        ac = stream(c, MLZ_S_ADDR_CODE, &l);
        REQUIRE(l == n + 2);
        CHECK_EQ_U64(ac[n + 1], n + 1 <= MLZ_SPLIT_BACK_MAX ? MLZ_SPLIT_REUSE_DEPTH + n + 1 : 0);
    }
    mlz_split_free(c);
}

/* Codes that name no block are rejected, whatever stands in the row. */
static void test_bad_address_codes_rejected(void)
{
    mlz_split_codec *c = mlz_split_new(3);
    REQUIRE(c);
    v1buf v = { .n = 0 };
    v1_alloc(&v, 0, 0x1000, 48, 0, 1);
    v1_free(&v, 0, 0x1000);
    v1_alloc(&v, 0, 0x1000, 48, 0, 1);
    CHECK(roundtrip(c, &v) == 0);
    char why[200];
    const uint8_t rank1[2] = { 0, 1 }, back1[2] = { 0, MLZ_SPLIT_REUSE_DEPTH + 1 };
    const uint8_t rank2[2] = { 0, 2 }, back2[2] = { 0, MLZ_SPLIT_REUSE_DEPTH + 2 }, last[2] = { 0, 255 };
    CHECK(decode_with(c, 3, MLZ_S_ADDR_CODE, rank1, 2, why, sizeof why) == 0);
    CHECK(decode_with(c, 3, MLZ_S_ADDR_CODE, back1, 2, why, sizeof why) == 0);   /* the same block */
    CHECK(decode_with(c, 3, MLZ_S_ADDR_CODE, rank2, 2, why, sizeof why) == -1 && strstr(why, "names no freed block"));
    CHECK(decode_with(c, 3, MLZ_S_ADDR_CODE, back2, 2, why, sizeof why) == -1 && strstr(why, "before the block's first"));
    CHECK(decode_with(c, 3, MLZ_S_ADDR_CODE, last, 2, why, sizeof why) == -1 && strstr(why, "before the block's first"));
    /* Two codes 0 for the one literal: the count is checked after the pass,
     * which takes literals unchecked. */
    const uint8_t lit2[2] = { 0, 0 };
    CHECK(decode_with(c, 3, MLZ_S_ADDR_CODE, lit2, 2, why, sizeof why) == -1 &&
          strstr(why, "1 address literals for 2 address codes 0"));
    /* The row entry was taken: a second ALLOC cannot take it again. */
    v1_alloc(&v, 0, 0x1000, 48, 0, 1);
    CHECK(roundtrip(c, &v) == 0);
    const uint8_t twice[3] = { 0, 1, 1 };
    size_t l;
    stream(c, MLZ_S_ADDR_LIT, &l);
    CHECK(decode_with(c, 4, MLZ_S_ADDR_CODE, twice, 3, why, sizeof why) == -1);
    mlz_split_free(c);
}

/* Column s (n values) resized to m values: plane by plane, the first
 * values kept, new ones 1 (so the width stays minimal). Its length. */
static size_t col_resize(const uint8_t *s, uint32_t n, uint32_t m, uint8_t *out)
{
    unsigned w = s[0];
    out[0] = (uint8_t)w;
    for (unsigned b = 0; b < w; b++)
        for (uint32_t i = 0; i < m; i++)
            out[1 + (size_t)b * m + i] = i < n ? s[1 + (size_t)b * n + i] : b == 0;
    return 1 + (size_t)w * m;
}

/* A literal column holds one value per 0 code: the reader takes its count
 * from its length and must reject one value too many or too few, in each
 * of the three literal columns (the block has codes other than 0 too, so
 * a column one value too long still fits the number of codes). A column
 * of width 0 (all zeros) has no count of its own: it stands for as many
 * zeros as there are 0 codes. */
static void test_literal_counts_checked(void)
{
    mlz_split_codec *c = mlz_split_new(3);
    REQUIRE(c);
    v1buf v = { .n = 0 };
    v1_alloc(&v, 0, 0x1000, 48, 0, 1);
    v1_alloc(&v, 0, 0x2000, 64, 0, 1);
    v1_free(&v, 0, 0x9000);     /* born in no ALLOC of the block: literals */
    v1_free(&v, 0, 0x9400);
    v1_free(&v, 0, 0x1000);     /* a reference */
    v1_alloc(&v, 0, 0x1000, 48, 0, 1);   /* a size and an address by code */
    CHECK(roundtrip(c, &v) == 0);
    const int cols[3] = { MLZ_S_SIZE_LIT, MLZ_S_ADDR_LIT, MLZ_S_FREE_LIT };
    char why[200];
    uint8_t col[64];
    for (int k = 0; k < 3; k++) {
        size_t l;
        const uint8_t *s = stream(c, cols[k], &l);
        REQUIRE(l == 1 + 2u * s[0] && s[0]);   /* two literals each */
        uint8_t orig[64];
        memcpy(orig, s, l);
        CHECK(decode_with(c, 6, cols[k], orig, l, why, sizeof why) == 0);
        size_t m = col_resize(orig, 2, 3, col);
        CHECK(decode_with(c, 6, cols[k], col, m, why, sizeof why) == -1 && strstr(why, "literal"));
        m = col_resize(orig, 2, 1, col);
        CHECK(decode_with(c, 6, cols[k], col, m, why, sizeof why) == -1 && strstr(why, "literal"));
    }
    /* Frees of address 0: zigzag steps of 0, a column of width 0. */
    v.n = 0;
    v1_alloc(&v, 0, 0x1000, 48, 0, 1);
    v1_free(&v, 0, 0);
    v1_free(&v, 0, 0);
    CHECK(roundtrip(c, &v) == 0);
    size_t l;
    const uint8_t *s = stream(c, MLZ_S_FREE_LIT, &l);
    CHECK(l == 1 && s[0] == 0);
    mlz_split_free(c);
}

static void test_extreme_values(void)
{
    mlz_split_codec *c = mlz_split_new(3);
    REQUIRE(c);
    v1buf v = { .n = 0 };
    const uint64_t M = UINT64_MAX;
    v1_alloc(&v, M, M, M, M, 0xffff);
    v1_alloc(&v, 0, 0, 0, 0, 0);
    v1_free(&v, M, M);
    v1_free(&v, 0, 0);
    v1_free(&v, 1, M);                       /* literal deltas wrap around */
    v1_gc(&v, M, M, M);
    v1_ext(&v, 16 + 64, M, "");
    v1_ext(&v, 127, 0, "payload");
    v1_alloc(&v, 5, M - 1, M, 1, 0xffff);
    CHECK(roundtrip(c, &v) == 0);
    mlz_split_free(c);
}

/* The decoder counts the v1 bytes of the delta and stack columns from their
 * byte planes when they are 1 or 2 bytes wide: values at each varint
 * boundary (2^7, 2^14), for each width, must give the block's v1 length. */
static void test_varint_boundaries_per_width(void)
{
    static const uint64_t w1[] = { 0, 1, 127, 128, 200, 255 };
    static const uint64_t w2[] = { 0, 127, 128, 255, 256, 16383, 16384, 32768, 65535 };
    static const uint64_t w3[] = { 0, 128, 16383, 16384, 65536, 2097151, 2097152, 16777215 };
    const uint64_t *sets[] = { w1, w2, w3 };
    size_t lens[] = { 6, 9, 8 };
    for (int k = 0; k < 3; k++) {
        mlz_split_codec *c = mlz_split_new(3);
        REQUIRE(c);
        v1buf v = { .n = 0 };
        for (size_t i = 0; i < lens[k]; i++)
            for (size_t j = 0; j < lens[k]; j++)   /* every delta with every stack */
                v1_alloc(&v, sets[k][i], 0x10000 + 64 * (i * 16 + j), 32, sets[k][j], 1);
        CHECK(roundtrip(c, &v) == 0);
        size_t l;
        const uint8_t *d = stream(c, MLZ_S_DELTA, &l), *st = stream(c, MLZ_S_STACK, &l);
        CHECK(d[0] == k + 1 && st[0] == k + 1);   /* the width the case is about */
        mlz_split_free(c);
    }
}

static void test_threads_mid_block(void)
{
    mlz_split_codec *c = mlz_split_new(3);
    REQUIRE(c);
    v1buf v = { .n = 0 };
    uint16_t th[] = { 1, 1, 2, 17, 1, 65535, 2, 33, 17 };   /* 1, 17 and 33 share a slot */
    for (unsigned i = 0; i < sizeof th / sizeof th[0]; i++)
        v1_alloc(&v, 1, 0x10000ull * th[i] + 64 * i, 16, 0, th[i]);
    CHECK(roundtrip(c, &v) == 0);
    size_t l;
    const uint8_t *t = stream(c, MLZ_S_THREAD, &l);
    CHECK_EQ_U64(col_at(t, l, 9, 0), 1);
    CHECK_EQ_U64(col_at(t, l, 9, 1), 0);     /* same thread: XOR 0 */
    CHECK_EQ_U64(col_at(t, l, 9, 5), 1 ^ 65535);
    /* Thread 17 at index 8: its slot now remembers 33, so the base is the
     * previous allocation (33's), not 17's. */
    const uint8_t *lit = stream(c, MLZ_S_ADDR_LIT, &l);
    uint64_t a7 = 0x10000ull * 33 + 64 * 7, a8 = 0x10000ull * 17 + 64 * 8;
    CHECK_EQ_U64(col_at(lit, l, 9, 8), 2 * (a7 - a8) - 1);   /* zigzag of a negative step */
    mlz_split_free(c);
}

/* Blocks of one thread decode the thread column from its byte planes
 * (every XOR after the first is 0); the column's rules still hold there:
 * its length, and the smallest width (a top plane of zeros is rejected). */
static void test_one_thread_blocks(void)
{
    mlz_split_codec *c = mlz_split_new(3);
    REQUIRE(c);
    const uint16_t ids[] = { 0, 7, 0x80, 0x1234, 65535 };   /* widths 0, 1, 1, 2, 2 */
    for (unsigned k = 0; k < sizeof ids / sizeof ids[0]; k++) {
        v1buf v = { .n = 0 };
        for (int i = 0; i < 5; i++) v1_alloc(&v, 1, 0x1000 + 64 * (uint64_t)i, 16, 0, ids[k]);
        CHECK(roundtrip(c, &v) == 0);
        /* ... and a last ALLOC of another thread: the planes say so. */
        v1_alloc(&v, 1, 0x9000, 16, 0, (uint16_t)(ids[k] ^ 0x300));
        CHECK(roundtrip(c, &v) == 0);
    }
    v1buf v = { .n = 0 };
    for (int i = 0; i < 3; i++) v1_alloc(&v, 1, 0x1000 + 64 * (uint64_t)i, 16, 0, 7);
    CHECK(roundtrip(c, &v) == 0);
    char why[200];
    const uint8_t good[4] = { 1, 7, 0, 0 }, wide[7] = { 2, 7, 0, 0, 0, 0, 0 }, zero[4] = { 1, 0, 0, 0 };
    const uint8_t zero0[1] = { 0 }, shortc[3] = { 1, 7, 0 };
    CHECK(decode_with(c, 3, MLZ_S_THREAD, good, sizeof good, why, sizeof why) == 0);
    CHECK(decode_with(c, 3, MLZ_S_THREAD, zero0, sizeof zero0, why, sizeof why) == 0);   /* thread 0 */
    CHECK(decode_with(c, 3, MLZ_S_THREAD, wide, sizeof wide, why, sizeof why) == -1 && strstr(why, "thread stream"));
    CHECK(decode_with(c, 3, MLZ_S_THREAD, zero, sizeof zero, why, sizeof why) == -1 && strstr(why, "thread stream"));
    CHECK(decode_with(c, 3, MLZ_S_THREAD, shortc, sizeof shortc, why, sizeof why) == -1 && strstr(why, "thread stream"));
    mlz_split_free(c);
}

static void test_random_blocks_roundtrip(void)
{
    mlz_split_codec *c = mlz_split_new(1);
    REQUIRE(c);
    uint64_t s = 42;
    for (int round = 0; round < 20; round++) {
        v1buf v = { .n = 0 };
        uint64_t live[64] = { 0 };
        while (v.n < sizeof v.b - 200) {
            uint64_t r = check_rng(&s);
            unsigned k = r & 63;
            if (live[k] && (r & 0x100)) { v1_free(&v, r >> 60, live[k]); live[k] = 0; }
            else if (r % 97 == 0) v1_gc(&v, 3, r >> 40, r >> 20);
            else {
                live[k] = 0x7f0000000000ull + ((r >> 20) & 0xffff0);
                v1_alloc(&v, (r >> 8) & 3, live[k], 16 + ((r >> 30) & 1008), (r >> 50) & 1, (uint16_t)(r >> 58));
            }
        }
        CHECK(roundtrip(c, &v) == 0);
    }
    mlz_split_free(c);
}

/* ------------------------------------------------------------ files */

static char *path_of(const char *name)
{
    static char p[4][128];
    static int i;
    i = (i + 1) % 4;
    snprintf(p[i], sizeof p[i], "%s/%s", dir, name);
    return p[i];
}


/* Writes a sample trace (allocations, frees across blocks, markers). */
/* every: end a block each `every` events (0: blocks as full as they go). */
static void write_sample(const char *p, unsigned flags, uint64_t events, uint64_t every)
{
    static mlz_writer w;
    mlz_writer_opts o = { .start_us = 1700000000000000ull, .meta = META, .meta_len = sizeof META - 1,
                          .flags = flags, .replace = 1, .buf = wbuf, .buf_size = sizeof wbuf,
                          .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    if (mlz_writer_open(&w, p, &o)) return;
    uint64_t t = o.start_us, s = 7, live[256] = { 0 };
    for (uint64_t i = 0; i < events; i++) {
        uint64_t r = check_rng(&s);
        t += i % 997 == 0 ? (r >> 24) % 100000 : r % 5;   /* some gaps: deltas of 3 bytes */
        if (every && i && i % every == 0) mlz_writer_end_block(&w);
        unsigned k = (r >> 8) & 255;
        if (i % 1000 == 999) mlz_writer_marker(&w, t, 0);
        else if (live[k]) { mlz_writer_free(&w, t, live[k]); live[k] = 0; }
        else {
            live[k] = 0x7f0000000000ull + ((r >> 20) & 0xfffff0);
            mlz_writer_alloc(&w, t, live[k], 16 + ((r >> 40) & 4095), (r >> 60) & 1, (uint16_t)(1 + (r >> 62)));
        }
    }
    mlz_writer_close(&w);
}

/* A heap that hands addresses back the way glibc's tcache does: per size
 * class, the block freed last is reused first; one allocation in eight
 * takes a block of another class (split or merged by the allocator). So
 * the address models meet every case: reuse by size, reuse across sizes,
 * fresh addresses, and frees of blocks born in an earlier block. */
static void write_churn(const char *p, unsigned flags, uint64_t events)
{
    static mlz_writer w;
    mlz_writer_opts o = { .start_us = 1700000000000000ull, .meta = META, .meta_len = sizeof META - 1,
                          .flags = flags, .replace = 1, .buf = wbuf, .buf_size = 65536,
                          .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    if (mlz_writer_open(&w, p, &o)) return;
    uint64_t t = o.start_us, s = 11, live[64] = { 0 }, size[64] = { 0 }, freed[64][16], next = 0x7f0000100000ull;
    unsigned nfreed[64] = { 0 };
    for (uint64_t i = 0; i < events; i++) {
        uint64_t r = check_rng(&s);
        t += r % 3;
        unsigned k = (r >> 8) & 63;
        if (live[k]) {
            mlz_writer_free(&w, t, live[k]);
            unsigned c = (unsigned)(size[k] / 16) & 63;
            if (nfreed[c] < 16) freed[c][nfreed[c]++] = live[k];
            live[k] = 0;
            continue;
        }
        uint64_t sz = 16 + ((r >> 20) % 48) * 16;
        unsigned c = (unsigned)(sz / 16) & 63;
        if ((r >> 30) % 8 == 0) c = (unsigned)(r >> 33) & 63;      /* another class's block */
        uint64_t a = nfreed[c] ? freed[c][--nfreed[c]] : (next += 1024);
        mlz_writer_alloc(&w, t, a, sz, (r >> 40) & 1, (uint16_t)(1 + (r >> 62)));
        live[k] = a;
        size[k] = sz;
    }
    mlz_writer_close(&w);
}

/* Copies every event of in into a new file of the given flags. */
static int convert(const char *in, const char *out, unsigned flags)
{
    mlz_error e;
    mlz_reader *r = mlz_reader_open(in, MLZ_READ_NO_INDEX, &e);
    if (!r) return -1;
    static mlz_writer w;
    const mlz_header *h = mlz_reader_header(r);
    const mlz_meta *m = mlz_reader_meta(r);
    mlz_writer_opts o = { .start_us = h->start_us, .meta = m->json, .meta_len = m->json_len, .flags = flags,
                          .replace = 1, .buf = wbuf, .buf_size = sizeof wbuf, .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    if (mlz_writer_open(&w, out, &o)) { mlz_reader_close(r); return -1; }
    mlz_writer_set_header_rest(&w, h->rest);
    mlz_event ev;
    int rc;
    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) mlz_writer_raw_event(&w, &ev);
    mlz_reader_close(r);
    if (rc < 0) { mlz_writer_abort(&w); return -1; }
    return mlz_writer_close(&w);
}

static void test_v1_split_v1_identical(void)
{
    write_sample(path_of("a.mlyze"), 0, 300000, 0);
    REQUIRE(convert(path_of("a.mlyze"), path_of("a.split"), MLZ_FLAG_SPLIT) == 0);
    REQUIRE(convert(path_of("a.split"), path_of("b.mlyze"), 0) == 0);
    size_t na, nb, ns;
    uint8_t *a = check_slurp(path_of("a.mlyze"), &na), *b = check_slurp(path_of("b.mlyze"), &nb), *sp = check_slurp(path_of("a.split"), &ns);
    REQUIRE(a && b && sp);
    CHECK(na == nb && !memcmp(a, b, na));
    CHECK(ns * 2 < na);                      /* and smaller, even on random data */
    mlz_error e;
    mlz_reader *r = mlz_reader_open(path_of("a.split"), 0, &e);
    REQUIRE(r);
    const mlz_header *h = mlz_reader_header(r);
    CHECK(h->flags == (MLZ_FLAG_SEALED | MLZ_FLAG_SPLIT | MLZ_FLAG_ZMETA | MLZ_FLAG_SPLIT2));
    CHECK_EQ_U64(h->raw_len, na - MLZ_HEADER_SIZE - (sizeof META - 1));
    CHECK(h->meta_len != sizeof META - 1);   /* compressed */
    const mlz_meta *m = mlz_reader_meta(r);
    CHECK(m->json_len == sizeof META - 1 && !memcmp(m->json, META, sizeof META - 1));
    CHECK(mlz_reader_has_index(r));          /* 300000 events: three blocks or more */
    mlz_reader_close(r);
    free(a); free(b); free(sp);
}

static void test_seek_by_time(void)
{
    write_sample(path_of("s.split"), MLZ_FLAG_SPLIT, 400000, 0);
    mlz_error e;
    mlz_reader *all = mlz_reader_open(path_of("s.split"), MLZ_READ_NO_INDEX, &e);
    mlz_reader *r = mlz_reader_open(path_of("s.split"), 0, &e);
    REQUIRE(all && r && mlz_reader_has_index(r));
    uint64_t target = mlz_reader_header(r)->start_us + 600000;
    mlz_event ev, want;
    int found = 0;
    while (mlz_reader_next(all, &want, &e) == 1)
        if (want.time_us >= target) { found = 1; break; }
    REQUIRE(found);
    REQUIRE(mlz_reader_seek_time(r, target, &e) == 0);
    REQUIRE(mlz_reader_next(r, &ev, &e) == 1);
    CHECK_EQ_U64(ev.time_us, want.time_us);
    CHECK_EQ_U64(ev.addr, want.addr);
    CHECK(ev.type == want.type);
    /* And the rest of the stream reads to its end without error. */
    int rc;
    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) {}
    CHECK(rc == 0);
    mlz_reader_close(r);
    mlz_reader_close(all);
}

/* Whole blocks as columns give the same events as reading one by one. */
static void test_block_columns_match_events(void)
{
    write_sample(path_of("b.split"), MLZ_FLAG_SPLIT, 250000, 0);
    mlz_error e;
    mlz_reader *ev_r = mlz_reader_open(path_of("b.split"), MLZ_READ_NO_INDEX, &e);
    mlz_reader *bl_r = mlz_reader_open(path_of("b.split"), MLZ_READ_NO_INDEX, &e);
    REQUIRE(ev_r && bl_r);
    mlz_block_view b;
    mlz_event ev;
    uint64_t n = 0, blocks = 0, mismatches = 0;
    int rc;
    while ((rc = mlz_reader_next_block(bl_r, &b, &e)) == 1) {
        blocks++;
        uint64_t t = b.base_us;
        uint32_t ai = 0, fi = 0;
        for (uint32_t i = 0; i < b.n; i++) {
            if (mlz_reader_next(ev_r, &ev, &e) != 1) { mismatches++; break; }
            t += b.delta[i];
            n++;
            if (ev.type != b.kind[i] || ev.time_us != t) mismatches++;
            if (b.kind[i] == MLZ_EV_ALLOC) {
                if (ev.addr != b.a_addr[ai] || ev.size != b.a_size[ai] || ev.stack_id != b.a_stack[ai] ||
                    ev.thread != b.a_thread[ai]) mismatches++;
                ai++;
            } else if (b.kind[i] == MLZ_EV_FREE) {
                if (ev.addr != b.f_addr[fi++]) mismatches++;
            }
        }
    }
    CHECK(rc == 0);
    CHECK(blocks >= 2);
    CHECK_EQ_U64(mismatches, 0);
    CHECK(mlz_reader_next(ev_r, &ev, &e) == 0);
    CHECK_EQ_U64(n, 250000);
    mlz_reader_close(ev_r);
    mlz_reader_close(bl_r);
    /* Not a split file: refused. */
    write_sample(path_of("b.v1"), 0, 10, 0);
    mlz_reader *v = mlz_reader_open(path_of("b.v1"), 0, &e);
    REQUIRE(v);
    CHECK(mlz_reader_next_block(v, &b, &e) == -1);
    mlz_reader_close(v);
}

/* Block reading checks every ALLOC's stack against the metadata: ids
 * above and below a dense range, and within a sparse one, are refused
 * with the rule of references; ids inside pass. */
static void test_unknown_stacks_rejected_by_blocks(void)
{
    static const char *metas[] = {
        "{\"stack_traces\":{\"1\":[],\"2\":[]},\"files\":{},\"functions\":{}}",       /* dense 1..2 */
        "{\"stack_traces\":{\"1\":[],\"3\":[]},\"files\":{},\"functions\":{}}",       /* sparse */
    };
    static const uint64_t bad[2][3] = { { 0, 3 }, { 0, 4, 2 } };   /* below, above, the sparse one's gap */
    static const int nbad[2] = { 2, 3 };
    static mlz_writer w;
    for (int m = 0; m < 2; m++) {
        for (int k = -1; k < nbad[m]; k++) {
            mlz_writer_opts o = { .start_us = 1, .meta = metas[m], .meta_len = strlen(metas[m]), .flags = MLZ_FLAG_SPLIT,
                                  .replace = 1, .buf = wbuf, .buf_size = sizeof wbuf };
            REQUIRE(mlz_writer_open(&w, path_of("st.split"), &o) == 0);
            for (uint64_t i = 0; i < 1000; i++)
                mlz_writer_alloc(&w, 1 + i, 0x10000 + 64 * i, 32, i == 500 && k >= 0 ? bad[m][k] : 1, 1);
            REQUIRE(mlz_writer_close(&w) == 0);
            mlz_error e;
            mlz_reader *r = mlz_reader_open(path_of("st.split"), MLZ_READ_NO_INDEX, &e);
            REQUIRE(r);
            mlz_block_view b;
            int rc = mlz_reader_next_block(r, &b, &e);
            if (k < 0) CHECK(rc == 1 && b.nalloc == 1000);
            else CHECK(rc == -1 && e.rule == MLZ_RULE_REFERENCE);
            mlz_reader_close(r);
        }
    }
}

/* Reads a whole file from memory, event by event and then (what memlyze
 * validate does) block by block: 0 if both end cleanly, -1 if both report
 * an error (rule and offset of the block path in *e), 1 if they disagree. */
static int read_all(const uint8_t *b, size_t n, mlz_error *e)
{
    int rc1, rc2;
    mlz_reader *r = mlz_reader_open_mem(b, n, 0, e);
    if (!r) return -1;
    mlz_event ev;
    while ((rc1 = mlz_reader_next(r, &ev, e)) == 1) {}
    mlz_reader_close(r);
    r = mlz_reader_open_mem(b, n, 0, e);
    if (!r) return 1;
    mlz_block_view bv;
    while ((rc2 = mlz_reader_next_block(r, &bv, e)) == 1) {}
    mlz_reader_close(r);
    return rc1 == rc2 ? rc1 : 1;
}


/* Files written before model 2 (no SPLIT2 flag) are read with model 1.
 * tests/data/split_model1.mlyze is what the model-1 writer made of
 * write_churn(.., 20000) in blocks of 64 KiB: its events come back byte
 * for byte, event by event and block by block, and through model 2. */
static void test_model1_file_still_reads(void)
{
    const char *fx = "tests/data/split_model1.mlyze";
    mlz_error e;
    mlz_reader *r = mlz_reader_open(fx, MLZ_READ_NO_INDEX, &e);
    REQUIRE(r);
    CHECK(mlz_reader_header(r)->flags == (MLZ_FLAG_SEALED | MLZ_FLAG_SPLIT | MLZ_FLAG_ZMETA));
    CHECK(mlz_reader_has_index(r) == 0);
    mlz_reader_close(r);
    write_churn(path_of("m.v1"), 0, 20000);
    REQUIRE(convert(fx, path_of("m1.v1"), 0) == 0);
    CHECK(check_same_file(path_of("m.v1"), path_of("m1.v1")));
    REQUIRE(convert(fx, path_of("m2.split"), MLZ_FLAG_SPLIT) == 0);
    REQUIRE(convert(path_of("m2.split"), path_of("m2.v1"), 0) == 0);
    CHECK(check_same_file(path_of("m.v1"), path_of("m2.v1")));
    size_t n;
    uint8_t *b = check_slurp(fx, &n);
    REQUIRE(b);
    CHECK(read_all(b, n, &e) == 0);
    free(b);
}

static void test_every_truncation_and_bit_flip(void)
{
    /* Small blocks (300 events each) so that several blocks are tested. */
    write_sample(path_of("f.split"), MLZ_FLAG_SPLIT, 1500, 300);
    size_t n;
    uint8_t *b = check_slurp(path_of("f.split"), &n);
    REQUIRE(b);
    mlz_error e;
    REQUIRE(read_all(b, n, &e) == 0);
    size_t data = MLZ_HEADER_SIZE;   /* the compressed metadata, then the blocks */
    int trunc_ok = 1, flip_ok = 1;
    for (size_t len = 0; len < n; len++) {
        memset(&e, 0, sizeof e);
        if (read_all(b, len, &e) != -1 || e.rule == MLZ_RULE_IO || e.offset > n) {
            if (trunc_ok) fprintf(stderr, "  truncation to %zu accepted\n", len);
            trunc_ok = 0;
        }
    }
    CHECK(trunc_ok);
    uint64_t flips = 0;
    for (size_t i = data; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (uint8_t)(1 << bit);
            memset(&e, 0, sizeof e);
            if (read_all(b, n, &e) != -1 || e.rule == MLZ_RULE_IO || e.offset < data || e.offset >= n) {
                if (flip_ok) fprintf(stderr, "  flip of bit %d at byte %zu accepted\n", bit, i);
                flip_ok = 0;
            }
            b[i] ^= (uint8_t)(1 << bit);
            flips++;
        }
    CHECK(flip_ok);
    CHECK(flips > 1000);
    /* Header flags: SPLIT and LZ4 together are refused (rule 2). */
    b[20] |= MLZ_FLAG_LZ4;
    CHECK(read_all(b, n, &e) == -1 && e.rule == MLZ_RULE_VERSION && e.offset == 20);
    /* ... and so is ZMETA without SPLIT. */
    b[20] = MLZ_FLAG_SEALED | MLZ_FLAG_ZMETA;
    CHECK(read_all(b, n, &e) == -1 && e.rule == MLZ_RULE_VERSION && e.offset == 20);
    free(b);
}

/* The metadata frame: exact round trip, and only one whole frame of a
 * stated size is accepted. */
static void test_metadata_frame(void)
{
    uint8_t *z;
    long n = mlz_split_meta_pack(META, sizeof META - 1, MLZ_SPLIT_LEVEL, &z);
    REQUIRE(n > 0);
    char *j, why[160];
    size_t jl;
    REQUIRE(mlz_split_meta_unpack(z, (size_t)n, &j, &jl, why, sizeof why) == 0);
    CHECK(jl == sizeof META - 1 && !memcmp(j, META, jl) && j[jl] == 0);
    free(j);
    /* Empty metadata is a frame too. */
    uint8_t *z0;
    long n0 = mlz_split_meta_pack("", 0, MLZ_SPLIT_LEVEL, &z0);
    REQUIRE(n0 > 0);
    CHECK(mlz_split_meta_unpack(z0, (size_t)n0, &j, &jl, why, sizeof why) == 0 && jl == 0);
    free(j);
    /* Every truncation, every bit flip, trailing bytes, two frames, and a
     * frame of unknown size (each with a right checksum). */
    int ok = 1;
    for (long k = 0; k < n; k++)
        if (mlz_split_meta_unpack(z, (size_t)k, &j, &jl, why, sizeof why) != -1 || j) ok = 0;
    for (long k = 0; k < n * 8; k++) {
        z[k / 8] ^= (uint8_t)(1 << (k % 8));
        if (mlz_split_meta_unpack(z, (size_t)n, &j, &jl, why, sizeof why) != -1 || j) ok = 0;
        z[k / 8] ^= (uint8_t)(1 << (k % 8));
    }
    CHECK(ok);
    uint8_t two[4096];
    REQUIRE((size_t)(n + n0) <= sizeof two);
    memcpy(two, z, (size_t)n);
    memcpy(two + n, z0 + 4, (size_t)n0 - 4);
    mlz_put_u32(two, mlz_split_crc(two + 4, (size_t)(n + n0 - 8)));
    CHECK(mlz_split_meta_unpack(two, (size_t)(n + n0 - 4), &j, &jl, why, sizeof why) == -1 && strstr(why, "one zstd frame"));
    uint8_t raw[] = "....{\"kind\":\"x\"}";
    mlz_put_u32(raw, mlz_split_crc(raw + 4, sizeof raw - 5));
    CHECK(mlz_split_meta_unpack(raw, sizeof raw - 1, &j, &jl, why, sizeof why) == -1 && strstr(why, "not a zstd frame"));
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_outBuffer out = { two + 4, sizeof two - 4, 0 };
    ZSTD_inBuffer in = { META, sizeof META - 1, 0 };
    /* Fed in two calls, the frame does not state its size. */
    REQUIRE(!ZSTD_isError(ZSTD_compressStream2(cc, &out, &in, ZSTD_e_continue)));
    ZSTD_inBuffer none = { META, 0, 0 };
    REQUIRE(ZSTD_compressStream2(cc, &out, &none, ZSTD_e_end) == 0);
    ZSTD_freeCCtx(cc);
    mlz_put_u32(two, mlz_split_crc(two + 4, out.pos));
    CHECK(mlz_split_meta_unpack(two, 4 + out.pos, &j, &jl, why, sizeof why) == -1 && strstr(why, "known size"));
    free(z);
    free(z0);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    snprintf(dir, sizeof dir, "/tmp/mlz-test-split-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(test_first_event_is_free_of_earlier_block);
    RUN(test_address_reuse_and_size_table);
    RUN(test_rows_and_back_references);
    RUN(test_bad_address_codes_rejected);
    RUN(test_literal_counts_checked);
    RUN(test_extreme_values);
    RUN(test_varint_boundaries_per_width);
    RUN(test_threads_mid_block);
    RUN(test_one_thread_blocks);
    RUN(test_random_blocks_roundtrip);
    RUN(test_v1_split_v1_identical);
    RUN(test_seek_by_time);
    RUN(test_block_columns_match_events);
    RUN(test_model1_file_still_reads);
    RUN(test_unknown_stacks_rejected_by_blocks);
    RUN(test_every_truncation_and_bit_flip);
    RUN(test_metadata_frame);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    CHECK_EXIT();
}
