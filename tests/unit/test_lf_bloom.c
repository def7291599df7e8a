/*
 * test_lf_bloom.c - the free-path Bloom filter: never a false negative,
 * false positives at the rate theory predicts, saturation, rebuilds from the
 * heap map, and rebuilds racing with inserts and frees on many threads.
 * Also built and run under ThreadSanitizer.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "../check.h"
#include "bloom.h"
#include "heapmap.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 1
#else
#define SLOW 0
#endif

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Heap-like addresses: 16-aligned ones are "inserted", the +8 ones are
 * queries that were certainly never inserted. */
static uint64_t addr(uint64_t *s) { return 0x550000000000ull + (rng(s) & 0xFFFFFFFFF0ull); }

/* The sampler's insert path. */
static int track(mlz_heapmap *m, mlz_bloom *b, uint64_t p)
{
    int64_t slot = mlz_heapmap_reserve(m, p);
    if (slot < 0) return 0;
    mlz_bloom_add(b, p);
    return mlz_heapmap_publish(m, slot, p, p & 0xFFFF, 1, 1, 1, 1);
}

static void test_reference_fp_rate(void)
{
    enum { N = 100000, Q = 1000000 };
    mlz_bloom b;
    REQUIRE(mlz_bloom_init(&b, 0) == 0);
    CHECK_EQ_U64(b.mask + 1, 1u << 20);
    uint64_t *ins = malloc(N * sizeof *ins);
    REQUIRE(ins);
    uint64_t s = 11;
    for (int i = 0; i < N; i++) {
        ins[i] = addr(&s);
        mlz_bloom_add(&b, ins[i]);
    }
    int fn = 0;
    for (int i = 0; i < N; i++) fn += !mlz_bloom_maybe(&b, ins[i]);
    CHECK_EQ_U64(fn, 0);

    long fp = 0;
    for (int i = 0; i < Q; i++) fp += mlz_bloom_maybe(&b, addr(&s) + 8);
    double m = (double)(b.mask + 1), fill = 1 - exp(-(double)MLZ_BLOOM_K * N / m);
    double theory = pow(fill, MLZ_BLOOM_K), rate = (double)fp / Q;
    printf("  fp rate %.5f, theory %.5f, saturation %.4f (theory %.4f)\n", rate, theory,
           mlz_bloom_saturation(&b), fill);
    /* ~10^4 expected hits: one standard deviation is 1%. */
    CHECK(fabs(rate / theory - 1) < 0.08);
    CHECK(fabs(mlz_bloom_saturation(&b) / fill - 1) < 0.01);
    free(ins);
    mlz_bloom_destroy(&b);
    CHECK(mlz_bloom_init(&b, 8) == -1 && mlz_bloom_init(&b, 37) == -1);
}

static void test_saturation_grows(void)
{
    mlz_bloom b;
    REQUIRE(mlz_bloom_init(&b, 14) == 0);
    uint64_t s = 5;
    double last = mlz_bloom_saturation(&b);
    CHECK(last == 0.0);
    int monotone = 1;
    for (int i = 0; i < 20000; i++) {
        mlz_bloom_add(&b, addr(&s));
        double now = mlz_bloom_saturation(&b);
        monotone &= now >= last;
        last = now;
    }
    CHECK(monotone);
    CHECK(last > 0.99); /* 80000 bits set into 16384 */
    mlz_bloom_destroy(&b);
}

static void test_rebuild(void)
{
    enum { N = 20000 };
    mlz_heapmap m;
    mlz_bloom b;
    REQUIRE(mlz_heapmap_init(&m, 16) == 0);
    REQUIRE(mlz_bloom_init(&b, 0) == 0);
    uint64_t *p = malloc(N * sizeof *p);
    REQUIRE(p);
    uint64_t s = 77;
    for (int i = 0; i < N; i++) {
        p[i] = addr(&s);
        CHECK(track(&m, &b, p[i]) == 1);
    }
    for (int i = 0; i < N; i += 2) CHECK(mlz_heapmap_remove(&m, p[i], NULL) == 1);
    /* Reserved but not yet published (and not yet added): kept too. */
    uint64_t r = addr(&s);
    int64_t rslot = mlz_heapmap_reserve(&m, r);
    REQUIRE(rslot >= 0);

    double before = mlz_bloom_saturation(&b);
    CHECK(mlz_bloom_rebuild(&b, &m) == 0);
    CHECK_EQ_U64(atomic_load(&b.rebuilds), 1);
    CHECK(mlz_bloom_saturation(&b) < before * 0.6);
    int fn = 0, kept_dead = 0;
    for (int i = 0; i < N; i++) {
        if (i & 1) fn += !mlz_bloom_maybe(&b, p[i]);
        else kept_dead += mlz_bloom_maybe(&b, p[i]);
    }
    CHECK_EQ_U64(fn, 0);
    CHECK(mlz_bloom_maybe(&b, r));
    /* 10^4 live in 2^20 bits: false positive rate ~1e-5. */
    CHECK(kept_dead <= 5);
    CHECK(mlz_heapmap_publish(&m, rslot, r, 1, 1, 1, 1, 1) == 1);

    /* A second rebuild while one runs returns at once. */
    atomic_store(&b.rebuilding, 1);
    CHECK(mlz_bloom_rebuild(&b, &m) == 1);
    atomic_store(&b.rebuilding, 0);
    CHECK(mlz_bloom_rebuild(&b, &m) == 0);
    CHECK(mlz_bloom_rebuild(&b, &m) == 0);
    CHECK_EQ_U64(atomic_load(&b.rebuilds), 3);
    CHECK(atomic_load(&b.retired) != NULL);
    CHECK(mlz_bloom_maybe(&b, r) && mlz_bloom_maybe(&b, p[1]));
    free(p);
    mlz_bloom_destroy(&b);
    mlz_heapmap_destroy(&m);
}

/* ---- inserts and frees racing with rebuilds ---- */

#define NWORK 8
#define OWN 512

static mlz_heapmap cm;
static mlz_bloom cb;
static _Atomic int workers_done;

typedef struct {
    int w;
    long ops;
    uint64_t p[OWN];
    uint8_t live[OWN];
    long false_neg, errors;
} worker;

static void *work(void *arg)
{
    worker *me = arg;
    uint64_t s = 0xB100 + (uint64_t)me->w;
    for (long op = 0; op < me->ops; op++) {
        if ((op & 63) == 0) sched_yield();
        int i = (int)(rng(&s) % OWN);
        if (!me->live[i]) {
            /* A fresh address most of the time, the old one sometimes. */
            if (!me->p[i] || (rng(&s) & 3)) me->p[i] = 0x100000000000ull * (uint64_t)(me->w + 1) + (addr(&s) & 0xFFFFFFFFF0ull);
            if (track(&cm, &cb, me->p[i]) != 1) me->errors++;
            me->live[i] = 1;
        } else {
            /* The free path: the filter must say maybe, the map must have it. */
            if (!mlz_bloom_maybe(&cb, me->p[i])) me->false_neg++;
            if (mlz_heapmap_remove(&cm, me->p[i], NULL) != 1) me->errors++;
            me->live[i] = 0;
        }
        if ((op & 1023) == 0)
            for (int k = 0; k < OWN; k++)
                if (me->live[k] && !mlz_bloom_maybe(&cb, me->p[k])) me->false_neg++;
    }
    atomic_fetch_add(&workers_done, 1);
    return NULL;
}

static void *rebuilder(void *arg)
{
    long *n = arg;
    while (atomic_load(&workers_done) < NWORK && *n < 400) {
        if (mlz_bloom_rebuild(&cb, &cm) == 0) (*n)++;
        sched_yield();
    }
    return NULL;
}

static void test_concurrent_rebuild(void)
{
    REQUIRE(mlz_heapmap_init(&cm, 14) == 0);
    REQUIRE(mlz_bloom_init(&cb, 16) == 0);
    static worker ws[NWORK];
    pthread_t th[NWORK], rt;
    long rebuilds = 0;
    for (int w = 0; w < NWORK; w++) {
        memset(&ws[w], 0, sizeof ws[w]);
        ws[w].w = w;
        ws[w].ops = SLOW ? 40000 : 250000;
    }
    for (int w = 0; w < NWORK; w++) REQUIRE(pthread_create(&th[w], NULL, work, &ws[w]) == 0);
    REQUIRE(pthread_create(&rt, NULL, rebuilder, &rebuilds) == 0);
    for (int w = 0; w < NWORK; w++) pthread_join(th[w], NULL);
    pthread_join(rt, NULL);

    long fn = 0, errors = 0, live = 0;
    for (int w = 0; w < NWORK; w++) {
        fn += ws[w].false_neg;
        errors += ws[w].errors;
        for (int k = 0; k < OWN; k++)
            if (ws[w].live[k]) {
                live++;
                fn += !mlz_bloom_maybe(&cb, ws[w].p[k]);
            }
    }
    printf("  concurrent: %ld rebuilds, %ld live at the end\n", rebuilds, live);
    CHECK_EQ_U64(fn, 0);
    CHECK_EQ_U64(errors, 0);
    CHECK(rebuilds >= 10);
    CHECK_EQ_U64(atomic_load(&cm.live), live);
    /* After a final quiet rebuild the filter holds exactly the live set. */
    CHECK(mlz_bloom_rebuild(&cb, &cm) == 0);
    uint64_t s = 999;
    long fp = 0;
    for (int i = 0; i < 100000; i++) fp += mlz_bloom_maybe(&cb, addr(&s) + 8);
    double fill = 1 - exp(-(double)MLZ_BLOOM_K * live / (double)(cb.mask + 1));
    CHECK(fp < 100000 * pow(fill, MLZ_BLOOM_K) * 1.5 + 50);
    mlz_bloom_destroy(&cb);
    mlz_heapmap_destroy(&cm);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_reference_fp_rate);
    RUN(test_saturation_grows);
    RUN(test_rebuild);
    RUN(test_concurrent_rebuild);
    CHECK_EXIT();
}
