/*
 * test_lf_bloom.c - the counting Bloom filter on the free path: never a
 * false negative, false positives at the rate theory predicts, counts that
 * go back to zero when the samples are freed (the reason it is counting),
 * saturated cells that stick, and adds/removes racing on many threads.
 * Also built and run under ThreadSanitizer.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "../check.h"
#include "bloom.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 1
#else
#define SLOW 0
#endif


/* Heap-like addresses, 16-aligned. */
static uint64_t addr(uint64_t *s) { return 0x550000000000ull + (check_rng(s) & 0xFFFFFFFFF0ull); }

static void test_reference_fp_rate(void)
{
    enum { N = 5000, Q = 1000000 };
    mlz_bloom b;
    REQUIRE(mlz_bloom_init(&b, 0) == 0);
    CHECK_EQ_U64(b.mask + 1, 1u << MLZ_BLOOM_DEFAULT_LOG2_CELLS);
    uint64_t *ins = malloc(N * sizeof *ins);
    REQUIRE(ins);
    uint64_t s = 11;
    for (int i = 0; i < N; i++) mlz_bloom_add(&b, ins[i] = addr(&s));
    int fn = 0;
    for (int i = 0; i < N; i++) fn += !mlz_bloom_maybe(&b, ins[i]);
    CHECK_EQ_U64(fn, 0);
    /* Theory for an unblocked filter: (1 - e^(-kn/m))^k. Confining a
     * pointer's cells to one cache line costs some accuracy (blocks are
     * unevenly loaded): accept up to twice that, and require it to be low. */
    double m = (double)(b.mask + 1), theory = pow(1 - exp(-MLZ_BLOOM_K * (double)N / m), MLZ_BLOOM_K);
    uint64_t q = 99;
    int fp = 0;
    for (int i = 0; i < Q; i++) fp += mlz_bloom_maybe(&b, addr(&q) + 8);
    double rate = (double)fp / Q;
    fprintf(stderr, "  fp rate %.6f, theory %.6f, saturation %.4f\n", rate, theory, mlz_bloom_saturation(&b));
    CHECK(rate < 2 * theory + 1e-5);
    CHECK(rate < 0.05);
    free(ins);
    mlz_bloom_destroy(&b);
}

/* The property the counting filter exists for: after every sample is freed
 * the filter is empty again, so a hot address reused later costs nothing. */
static void test_removes_restore_empty(void)
{
    enum { N = 50000 };
    mlz_bloom b;
    REQUIRE(mlz_bloom_init(&b, 16) == 0);
    uint64_t *v = malloc(N * sizeof *v), s = 5;
    REQUIRE(v);
    for (int i = 0; i < N; i++) mlz_bloom_add(&b, v[i] = addr(&s));
    /* Remove half: the rest stay "maybe", always. */
    for (int i = 0; i < N; i += 2) mlz_bloom_remove(&b, v[i]);
    int fn = 0;
    for (int i = 1; i < N; i += 2) fn += !mlz_bloom_maybe(&b, v[i]);
    CHECK_EQ_U64(fn, 0);
    for (int i = 1; i < N; i += 2) mlz_bloom_remove(&b, v[i]);
    CHECK_EQ_U64(atomic_load(&b.nonzero), 0);
    int maybe = 0;
    for (int i = 0; i < N; i++) maybe += mlz_bloom_maybe(&b, v[i]);
    CHECK_EQ_U64(maybe, 0);
    /* The same address added and removed a million times stays cheap. */
    for (int i = 0; i < 1000000; i++) { mlz_bloom_add(&b, v[0]); mlz_bloom_remove(&b, v[0]); }
    CHECK(!mlz_bloom_maybe(&b, v[0]));
    free(v);
    mlz_bloom_destroy(&b);
}

/* 255 live samples on one cell saturate it; it then never goes back to
 * zero (a lost count must only ever cost a false positive). */
/* The free hook inlines only mlz_bloom_first_default (the payload's
 * filter has the default size) and leaves the other cells to
 * mlz_bloom_rest: the two must make up the whole test, the first cell
 * of an added pointer must be set (a "no" there is a phantom leak), and
 * all k cells must share one cache line. The first cell alone lets through
 * about the fraction of cells in use, which is the price of inlining it. */
static void test_first_cell_then_rest(void)
{
    enum { N = 3000, Q = 200000 };
    mlz_bloom b;
    REQUIRE(mlz_bloom_init(&b, 0) == 0);
    CHECK_EQ_U64(b.shift, 64 - MLZ_BLOOM_DEFAULT_LOG2_CELLS);
    uint64_t s = 5;
    for (int i = 0; i < N; i++) {
        uint64_t p = addr(&s);
        mlz_bloom_add(&b, p);
        CHECK(mlz_bloom_first_default(&b, p));
        CHECK(mlz_bloom_rest(&b, p));
        uint64_t h = mlz__bloom_mix(p), first = mlz__bloom_cell(h, 0, b.shift);
        CHECK(first <= b.mask);
        for (unsigned k = 1; k < MLZ_BLOOM_K; k++) CHECK_EQ_U64(mlz__bloom_cell(h, k, b.shift) >> 6, first >> 6);
    }
    uint64_t q = 77;
    int firsts = 0, mismatches = 0;
    for (int i = 0; i < Q; i++) {
        uint64_t p = addr(&q) + 8;
        int f = mlz_bloom_first_default(&b, p);
        /* the immediate shift picks the cell that the filter's own does */
        mismatches += f != (atomic_load(&b.cells)[mlz__bloom_cell(mlz__bloom_mix(p), 0, b.shift)] != 0);
        firsts += f;
        mismatches += mlz_bloom_maybe(&b, p) != (f && mlz_bloom_rest(&b, p));
    }
    CHECK_EQ_U64(mismatches, 0);
    double sat = mlz_bloom_saturation(&b), rate = (double)firsts / Q;
    fprintf(stderr, "  first cell lets through %.4f, saturation %.4f\n", rate, sat);
    CHECK(rate > sat * 0.8 && rate < sat * 1.2);
    mlz_bloom_destroy(&b);
}

static void test_saturated_cells_stick(void)
{
    mlz_bloom b;
    REQUIRE(mlz_bloom_init(&b, 9) == 0);
    uint64_t p = 0x551234567890ull;
    for (int i = 0; i < 300; i++) mlz_bloom_add(&b, p);
    CHECK(atomic_load(&b.stuck) >= 1);
    for (int i = 0; i < 300; i++) mlz_bloom_remove(&b, p);
    CHECK(mlz_bloom_maybe(&b, p));
    /* A removal of something never added cannot push a cell below zero. */
    mlz_bloom c;
    REQUIRE(mlz_bloom_init(&c, 9) == 0);
    mlz_bloom_remove(&c, p);
    mlz_bloom_add(&c, p);
    CHECK(mlz_bloom_maybe(&c, p));
    mlz_bloom_destroy(&b);
    mlz_bloom_destroy(&c);
}

/* 8 threads add and remove their own pointers on a small filter, so cells
 * are shared heavily; each checks after every step that all its live
 * pointers are still "maybe". */
enum { THREADS = 8 };
static mlz_bloom shared;
static _Atomic int false_negatives;

static void *worker(void *arg)
{
    uint64_t s = (uint64_t)(uintptr_t)arg * 7919 + 1;
    enum { LIVE = 64 };
    uint64_t live[LIVE] = { 0 };
    int rounds = SLOW ? 20000 : 200000;
    for (int r = 0; r < rounds; r++) {
        int k = (int)(check_rng(&s) % LIVE);
        if (live[k]) mlz_bloom_remove(&shared, live[k]);
        live[k] = addr(&s);
        mlz_bloom_add(&shared, live[k]);
        int j = (int)(check_rng(&s) % LIVE);
        if (live[j] && !mlz_bloom_maybe(&shared, live[j])) atomic_fetch_add(&false_negatives, 1);
    }
    for (int k = 0; k < LIVE; k++)
        if (live[k]) mlz_bloom_remove(&shared, live[k]);
    return NULL;
}

static void test_concurrent_add_remove(void)
{
    REQUIRE(mlz_bloom_init(&shared, 10) == 0);   /* 1024 cells, 512 live pointers */
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK_EQ_U64(atomic_load(&false_negatives), 0);
    /* Everything was removed: only stuck cells may remain. */
    if (!atomic_load(&shared.stuck)) CHECK_EQ_U64(atomic_load(&shared.nonzero), 0);
    mlz_bloom_destroy(&shared);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_reference_fp_rate);
    RUN(test_removes_restore_empty);
    RUN(test_first_cell_then_rest);
    RUN(test_saturated_cells_stick);
    RUN(test_concurrent_add_remove);
    CHECK_EXIT();
}
