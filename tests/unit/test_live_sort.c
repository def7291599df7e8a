/*
 * test_live_sort.c - live/snapshot.c's birth-order sort against a plain
 * stable sort by (microsecond, original position): the packed-key radix
 * path (times and indices in one word), the qsort path for births too far
 * apart to share a word with the index, ties within a microsecond, and the
 * edge sizes 0 and 1.
 */
#include "../check.h"
#include "snapshot.h"

typedef struct { uint64_t us; size_t i; } ref_key;

static int by_ref(const void *x, const void *y)
{
    const ref_key *a = x, *b = y;
    if (a->us != b->us) return a->us > b->us ? 1 : -1;
    return (a->i > b->i) - (a->i < b->i);
}

/* n entries with birth times drawn below span_ns (few distinct values when
 * coarse, so many share a microsecond); sorts and compares. */
static void check_sort(size_t n, uint64_t span_ns, uint64_t mono2real, int coarse, uint64_t seed)
{
    mlz_live_obj *v = malloc((n ? n : 1) * sizeof *v);
    ref_key *ref = malloc((n ? n : 1) * sizeof *ref);
    REQUIRE(v && ref);
    for (size_t i = 0; i < n; i++) {
        uint64_t t = check_rng(&seed) % span_ns;
        if (coarse) t -= t % (span_ns / 8 ? span_ns / 8 : 1);
        v[i] = (mlz_live_obj){ .addr = 0x1000 + 16 * i, .size = i, .time_ns = t, .stack_id = (uint32_t)i };
        ref[i] = (ref_key){ (t + mono2real) / 1000, i };
    }
    qsort(ref, n, sizeof *ref, by_ref);
    REQUIRE(mlz_live_sort_by_birth(&v, n, mono2real) == 0);
    size_t bad = 0;
    for (size_t k = 0; k < n; k++) bad += v[k].size != ref[k].i;
    CHECK_EQ_U64(bad, 0);
    free(v);
    free(ref);
}

static void test_radix_path(void)
{
    check_sort(100000, 16ull * 1000 * 1000 * 1000, 0, 0, 1);       /* 16 s of births */
    check_sort(100000, 3ull * 1000 * 1000, 1234567, 0, 2);         /* many per microsecond */
    check_sort(5000, 1ull << 40, 999, 1, 3);                        /* 8 distinct times */
}

/* 5000 entries need 13 bits of index; births 2^63 ns apart need 54 of time. */
static void test_births_too_far_apart(void)
{
    check_sort(5000, 1ull << 63, 0, 0, 4);
    check_sort(5000, 1ull << 63, 0, 1, 5);
}

static void test_edges(void)
{
    check_sort(0, 1000, 0, 0, 6);
    check_sort(1, 1000, 0, 0, 7);
    check_sort(2, 1, 0, 0, 8);                                       /* one microsecond */
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_radix_path);
    RUN(test_births_too_far_apart);
    RUN(test_edges);
    CHECK_EXIT();
}
