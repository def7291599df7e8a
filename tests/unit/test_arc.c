/*
 * test_arc.c - the .arc writer and reader (heapgraph/arc_write.c, arc_read.c)
 * against the seed's encoding: ids aligned to their class, headers that
 * decode back with the seed's formula, the bitmap-length decision, and
 * streams written here read back with every pointer resolved.
 */
#include "../check.h"
#include "../../heapgraph/arc.h"

static uint64_t seed_decode_id(uint64_t p)     /* the seed's two lines */
{
    return (p & ((1ull << 48) - 1)) & -(32ull << ((p >> 37) & 31));
}

static void test_ids_aligned_and_decodable(void)
{
    arc_ids ids;
    memset(&ids, 0, sizeof ids);
    uint64_t s = 7;
    for (int i = 0; i < 20000; i++) {
        uint64_t size = 1 + check_rng(&s) % (i % 100 ? 5000 : (1u << 24));
        uint64_t id = arc_new_id(&ids, size);
        REQUIRE(id);
        unsigned k = arc_offset_bits(size);
        CHECK(k >= 5 && (1ull << k) >= size && (k == 5 || (1ull << (k - 1)) < size));
        CHECK_EQ_U64(id & ((1ull << k) - 1), 0);                /* aligned to 2^ceil(log2 size) */
        CHECK(id & ARC_CLASS_BIT);                              /* bit 42 */
        uint64_t h = arc_header(id, size, i & 1);
        CHECK_EQ_U64(seed_decode_id(h), id);
        CHECK_EQ_U64((h & ((1ull << 48) - 1)) - seed_decode_id(h) + 1, size);
        CHECK_EQ_U64(h >> 63, (uint64_t)(i & 1));
        CHECK_EQ_U64((h >> 48) & 0x7fff, 0);
    }
}

static void test_class_full(void)
{
    arc_ids ids;
    memset(&ids, 0, sizeof ids);
    /* 2^36-byte objects: the class region (bits 0..36) holds two. */
    CHECK(arc_new_id(&ids, 1ull << 36));
    CHECK(arc_new_id(&ids, 1ull << 36));
    CHECK_EQ_U64(arc_new_id(&ids, 1ull << 36), 0);
    CHECK_EQ_U64(arc_new_id(&ids, (1ull << 36) + 1), 0);     /* beyond 36 offset bits */
    CHECK_EQ_U64(arc_new_id(&ids, 0), 0);
}

static void test_bitmap_length(void)
{
    /* One bit per whole 64-bit word: ceil((size // 8) / 8) bytes. */
    static const uint64_t size[] = { 1, 7, 8, 13, 63, 64, 65, 71, 72, 512, 513, 520 };
    static const uint64_t want[] = { 0, 0, 1, 1, 1, 1, 1, 1, 2, 8, 8, 9 };
    for (size_t i = 0; i < sizeof size / sizeof *size; i++) CHECK_EQ_U64(ARC_BITMAP_BYTES(size[i]), want[i]);
}

/* A stream of a root and a ring of objects with interior, weak, null and
 * self pointers, written with arc_put_* and read back. */
static void test_roundtrip(void)
{
    enum { N = 300 };
    arc_ids ids;
    memset(&ids, 0, sizeof ids);
    uint64_t id[N], size[N], s = 11;
    for (int i = 0; i < N; i++) {
        size[i] = i == 0 ? 8 * N : 8 + check_rng(&s) % 300;
        id[i] = arc_new_id(&ids, size[i]);
    }
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    REQUIRE(f);
    for (int i = 0; i < N; i++) CHECK(!arc_put_forward(f, id[i], size[i]));
    uint8_t data[8 * N], bm[N / 8 + 2];
    for (int i = 0; i < N; i++) {
        memset(data, 0xab, sizeof data);
        memset(bm, 0, sizeof bm);
        uint64_t words = size[i] / 8;
        for (uint64_t w = 0; w < words; w++) {
            int t = (int)((i + w + 1) % N);
            uint64_t v = w % 4 == 0 ? id[t] + (w * 3) % size[t]          /* interior */
                       : w % 4 == 1 ? id[t] | ARC_WEAK                    /* weak */
                       : w % 4 == 2 ? 0                                   /* null */
                       : id[i] + size[i] - 1;                             /* self, last byte */
            memcpy(data + 8 * w, &v, 8);
            bm[w / 8] |= (uint8_t)(1u << (w % 8));
        }
        CHECK(!arc_put_object(f, id[i], size[i], bm, data));
    }
    fclose(f);
    arc_file a;
    arc_error e;
    uint8_t *buf = malloc(len);
    memcpy(buf, mem, len);
    free(mem);
    int rc = arc_parse(&a, buf, len, &e);
    if (rc) fprintf(stderr, "  %s at %llu: %s\n", e.rule, (unsigned long long)e.offset, e.msg);
    REQUIRE(rc == 0);
    CHECK_EQ_U64(a.nobjs, N);
    CHECK_EQ_U64(a.objs[a.root].id, id[0]);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_U64(a.objs[i].id, id[i]);
        CHECK_EQ_U64(a.objs[i].size, size[i]);
        CHECK(a.objs[i].fwd_off < a.objs[i].off);
        long k = arc_find(&a, id[i] + size[i] - 1);
        CHECK_EQ_U64(k, i);
        CHECK(arc_find(&a, id[i] + (1ull << arc_offset_bits(size[i])) - 1) == (size[i] == (1ull << arc_offset_bits(size[i])) ? i : -1));
    }
    arc_close(&a);
}

static void test_partial_word_untagged(void)
{
    /* 13 bytes: one whole word (tagged), 5 trailing bytes with no bit. */
    arc_ids ids;
    memset(&ids, 0, sizeof ids);
    uint64_t a = arc_new_id(&ids, 13);
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    uint8_t data[13] = { 0 }, bm[1] = { 1 };
    memcpy(data, &a, 8);
    arc_put_object(f, a, 13, bm, data);
    fclose(f);
    CHECK_EQ_U64(len, 8 + 1 + 13);
    arc_file af;
    arc_error e;
    uint8_t *buf = malloc(len);
    memcpy(buf, mem, len);
    CHECK(arc_parse(&af, buf, len, &e) == 0);
    arc_close(&af);
    mem[8] = 3;   /* a bit for the partial word */
    buf = malloc(len);
    memcpy(buf, mem, len);
    CHECK(arc_parse(&af, buf, len, &e) == -1 && !strcmp(e.rule, "bitmap-padding") && e.offset == 8);
    arc_close(&af);
    free(mem);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_ids_aligned_and_decodable);
    RUN(test_class_full);
    RUN(test_bitmap_length);
    RUN(test_roundtrip);
    RUN(test_partial_word_untagged);
    CHECK_EXIT();
}
