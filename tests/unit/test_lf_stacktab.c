/*
 * test_lf_stacktab.c - stack interning against a naive model: stable ids,
 * exact frames, growth across index levels, graceful truncation, and eight
 * threads interning overlapping stacks. Also built and run under TSan.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "../check.h"
#include "stacktab.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 1
#else
#define SLOW 0
#endif


typedef struct {
    uint64_t pcs[MLZ_MAX_FRAMES];
    unsigned depth;
} stack;

/* Stacks that look real: a shared root (main, start), random code addresses
 * below it, and neighbours that differ in one frame only. */
static stack *make_stacks(int n, unsigned maxdepth, uint64_t seed)
{
    stack *v = malloc((size_t)n * sizeof *v);
    if (!v) return NULL;
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        if (i > 0 && (check_rng(&s) % 4) == 0 && v[i - 1].depth > 0) {
            v[i] = v[i - 1];
            v[i].pcs[check_rng(&s) % v[i].depth] ^= 0x10;
        } else {
            v[i].depth = (unsigned)(1 + check_rng(&s) % maxdepth);
            for (unsigned d = 0; d < v[i].depth; d++)
                v[i].pcs[d] = 0x400000 + (check_rng(&s) & 0xFFFFF);
            if (v[i].depth > 2) {
                v[i].pcs[v[i].depth - 1] = 0x401000; /* _start */
                v[i].pcs[v[i].depth - 2] = 0x401234; /* main */
            }
        }
        /* Make every stack distinct: the first frame carries the index. */
        v[i].pcs[0] = 0x7f0000000000ull + (uint64_t)i * 4;
    }
    return v;
}

static int same_frames(const mlz_stacktab *t, uint32_t id, const stack *st)
{
    const uint64_t *pcs;
    unsigned depth;
    if (!mlz_stacktab_get(t, id, &pcs, &depth)) return 0;
    return depth == st->depth && memcmp(pcs, st->pcs, depth * sizeof *pcs) == 0;
}

static void test_reference_model(void)
{
    enum { N = 5000 };
    mlz_stacktab t;
    REQUIRE(mlz_stacktab_init(&t, 0, 0) == 0);
    stack *v = make_stacks(N, MLZ_MAX_FRAMES, 1);
    REQUIRE(v);
    static uint32_t ids[N];
    int bad = 0;
    for (int i = 0; i < N; i++) {
        ids[i] = mlz_stacktab_intern(&t, v[i].pcs, v[i].depth);
        /* Single thread, all distinct: ids are exactly 1, 2, 3, ... */
        if (ids[i] != (uint32_t)i + 1) bad++;
    }
    CHECK_EQ_U64(bad, 0);
    CHECK_EQ_U64(mlz_stacktab_count(&t), N + 1);
    for (int i = N - 1; i >= 0; i--) {
        if (mlz_stacktab_intern(&t, v[i].pcs, v[i].depth) != ids[i]) bad++;
        if (!same_frames(&t, ids[i], &v[i])) bad++;
    }
    CHECK_EQ_U64(bad, 0);
    CHECK_EQ_U64(mlz_stacktab_count(&t), N + 1);

    const uint64_t *pcs;
    unsigned depth;
    CHECK(!mlz_stacktab_get(&t, 0, &pcs, &depth));
    CHECK(!mlz_stacktab_get(&t, N + 1, &pcs, &depth));
    CHECK(!mlz_stacktab_get(&t, MLZ_STACK_TRUNCATED, &pcs, &depth));

    /* Depth 0 is a stack too; deeper than MLZ_MAX_FRAMES is cut. */
    uint32_t empty = mlz_stacktab_intern(&t, NULL, 0);
    CHECK(empty == N + 1 && mlz_stacktab_intern(&t, NULL, 0) == empty);
    CHECK(mlz_stacktab_get(&t, empty, &pcs, &depth) && depth == 0);
    uint64_t deep[MLZ_MAX_FRAMES + 40];
    for (unsigned d = 0; d < MLZ_MAX_FRAMES + 40; d++) deep[d] = 0x500000 + d;
    uint32_t cut = mlz_stacktab_intern(&t, deep, MLZ_MAX_FRAMES + 40);
    CHECK(cut == N + 2);
    CHECK(mlz_stacktab_intern(&t, deep, MLZ_MAX_FRAMES) == cut);
    CHECK(mlz_stacktab_get(&t, cut, &pcs, &depth) && depth == MLZ_MAX_FRAMES);

    mlz_stacktab_stats st;
    mlz_stacktab_get_stats(&t, &st);
    CHECK_EQ_U64(st.ids, N + 2);
    CHECK_EQ_U64(st.clamped, 1);
    CHECK_EQ_U64(st.truncated, 0);
    CHECK_EQ_U64(st.unindexed, 0);
    CHECK(st.levels >= 4);
    free(v);
    mlz_stacktab_destroy(&t);
}

static void test_growth(void)
{
    const int n = SLOW ? 60000 : 200000;
    mlz_stacktab t;
    REQUIRE(mlz_stacktab_init(&t, 400000, 0) == 0);
    mlz_stacktab_stats st;
    mlz_stacktab_get_stats(&t, &st);
    /* Starts small: one 4 KiB index level and a record. */
    CHECK_EQ_U64(st.levels, 1);
    CHECK(st.bytes_used <= 4096 + 64);
    stack *v = make_stacks(n, 12, 2);
    REQUIRE(v);
    unsigned levels_seen = 1;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (mlz_stacktab_intern(&t, v[i].pcs, v[i].depth) != (uint32_t)i + 1) bad++;
        if ((i & 1023) == 0) {
            mlz_stacktab_get_stats(&t, &st);
            levels_seen = st.levels;
        }
    }
    /* Everything is still found, wherever its level. */
    for (int i = 0; i < n; i++) {
        if (mlz_stacktab_intern(&t, v[i].pcs, v[i].depth) != (uint32_t)i + 1) bad++;
        if (!same_frames(&t, (uint32_t)i + 1, &v[i])) bad++;
    }
    CHECK_EQ_U64(bad, 0);
    mlz_stacktab_get_stats(&t, &st);
    printf("  growth: %d stacks, %u levels, %.1f MiB used of %.1f MiB reserved, %llu tag collisions\n",
           n, st.levels, st.bytes_used / 1048576.0, st.bytes_reserved / 1048576.0,
           (unsigned long long)st.collisions);
    /* 0.7 * 512 * (2^L - 1) >= n */
    CHECK(st.levels >= (SLOW ? 8u : 10u));
    CHECK(levels_seen >= 3);
    CHECK_EQ_U64(st.unindexed, 0);
    CHECK(st.bytes_used < st.bytes_reserved / 4);
    free(v);
    mlz_stacktab_destroy(&t);
}

static void test_full(void)
{
    mlz_stacktab t;
    REQUIRE(mlz_stacktab_init(&t, 100, 0) == 0);
    stack *v = make_stacks(150, 8, 3);
    REQUIRE(v);
    int got = 0, trunc = 0;
    for (int i = 0; i < 150; i++) {
        uint32_t id = mlz_stacktab_intern(&t, v[i].pcs, v[i].depth);
        if (id == MLZ_STACK_TRUNCATED) trunc++;
        else if (id == (uint32_t)got + 1) got++;
    }
    CHECK_EQ_U64(got, 100);
    CHECK_EQ_U64(trunc, 50);
    CHECK_EQ_U64(mlz_stacktab_count(&t), 101);
    CHECK(mlz_stacktab_intern(&t, v[7].pcs, v[7].depth) == 8); /* old ones still resolve */
    mlz_stacktab_stats st;
    mlz_stacktab_get_stats(&t, &st);
    CHECK_EQ_U64(st.truncated, 50);
    mlz_stacktab_destroy(&t);

    /* Frame arena of 100 frames: ten 10-frame stacks fit, the 11th does not. */
    REQUIRE(mlz_stacktab_init(&t, 1000, 100 * sizeof(uint64_t)) == 0);
    int fit = 0;
    for (int i = 0; i < 12; i++) {
        uint64_t pcs[10];
        for (int d = 0; d < 10; d++) pcs[d] = 0x1000 + (uint64_t)i * 64 + (uint64_t)d;
        fit += mlz_stacktab_intern(&t, pcs, 10) != MLZ_STACK_TRUNCATED;
    }
    CHECK_EQ_U64(fit, 10);
    mlz_stacktab_get_stats(&t, &st);
    CHECK_EQ_U64(st.truncated, 2);
    mlz_stacktab_destroy(&t);
    CHECK(mlz_stacktab_init(&t, UINT32_MAX, 0) == -1);
    free(v);
}

/* ---- eight threads, overlapping stacks ---- */

#define NTHR 8
static mlz_stacktab ct;
static stack *pool;
static int pool_n;
static _Atomic int ready_threads;

typedef struct {
    int id;
    uint32_t *ids; /* per pool index: the first id this thread got */
    long changed;  /* a later intern gave another id (a duplicate) */
    long wrong;    /* ... whose frames differ: a bug */
} thr;

static void *interner(void *arg)
{
    thr *me = arg;
    uint64_t s = 0x5EED + (uint64_t)me->id;
    /* Two groups of four threads walk the pool in lock step from two
     * offsets, so new stacks are interned by several threads at once; random
     * jumps mix the groups. */
    atomic_fetch_add(&ready_threads, 1);
    while (atomic_load(&ready_threads) < NTHR) sched_yield();
    for (int k = 0; k < 2 * pool_n; k++) {
        int i = (int)(((uint64_t)k + (uint64_t)(me->id & 1) * (uint64_t)pool_n / 2) % (uint64_t)pool_n);
        if ((check_rng(&s) & 7) == 0) i = (int)(check_rng(&s) % (uint64_t)pool_n);
        uint32_t id = mlz_stacktab_intern(&ct, pool[i].pcs, pool[i].depth);
        if (me->ids[i] == 0) {
            me->ids[i] = id;
        } else if (me->ids[i] != id) {
            /* Allowed only as a duplicate: same frames under another id. */
            me->changed++;
            if (!same_frames(&ct, id, &pool[i])) me->wrong++;
        }
        if ((k & 3) == 0) sched_yield();
    }
    return NULL;
}

static void test_concurrent(void)
{
    pool_n = SLOW ? 3000 : 20000;
    REQUIRE(mlz_stacktab_init(&ct, 0, 0) == 0);
    pool = make_stacks(pool_n, 32, 4);
    REQUIRE(pool);
    thr th[NTHR];
    pthread_t pt[NTHR];
    for (int i = 0; i < NTHR; i++) {
        th[i].id = i;
        th[i].changed = th[i].wrong = 0;
        th[i].ids = calloc((size_t)pool_n, sizeof(uint32_t));
        REQUIRE(th[i].ids);
    }
    for (int i = 0; i < NTHR; i++) REQUIRE(pthread_create(&pt[i], NULL, interner, &th[i]) == 0);
    for (int i = 0; i < NTHR; i++) pthread_join(pt[i], NULL);

    /* owner[id] = the pool index an id stands for; no id may stand for two. */
    uint32_t count = mlz_stacktab_count(&ct);
    int *owner = malloc(count * sizeof *owner);
    REQUIRE(owner);
    for (uint32_t i = 0; i < count; i++) owner[i] = -1;
    long bad_frames = 0, shared_id = 0, changed = 0, wrong = 0, dups = 0, missing = 0;
    long distinct = 0;
    for (int k = 0; k < NTHR; k++) {
        changed += th[k].changed;
        wrong += th[k].wrong;
    }
    for (int i = 0; i < pool_n; i++) {
        uint32_t first = 0;
        int multi = 0;
        for (int k = 0; k < NTHR; k++) {
            uint32_t id = th[k].ids[i];
            if (id == 0) { missing++; continue; }
            if (id >= count || !same_frames(&ct, id, &pool[i])) { bad_frames++; continue; }
            if (owner[id] != -1 && owner[id] != i) shared_id++;
            if (owner[id] == -1) distinct++;
            owner[id] = i;
            if (first && id != first) multi = 1;
            if (!first) first = id;
        }
        dups += multi;
    }
    /* Every id handed out is a ready record (orphans included). */
    long not_ready = 0;
    for (uint32_t id = 1; id < count; id++) {
        const uint64_t *pcs;
        unsigned depth;
        not_ready += !mlz_stacktab_get(&ct, id, &pcs, &depth);
    }
    mlz_stacktab_stats st;
    mlz_stacktab_get_stats(&ct, &st);
    printf("  concurrent: %d stacks, %u ids (%ld returned, %ld orphaned), %ld stacks with"
           " duplicate ids, %ld id changes, %u levels\n", pool_n, count - 1, distinct,
           (long)(count - 1) - distinct, dups, changed, st.levels);
    CHECK_EQ_U64(bad_frames, 0);
    CHECK_EQ_U64(shared_id, 0);
    CHECK_EQ_U64(wrong, 0);
    CHECK_EQ_U64(not_ready, 0);
    CHECK(missing < (long)pool_n * NTHR / 10); /* every thread covered most of the pool */
    CHECK(distinct >= pool_n);
    CHECK(count - 1 <= 2u * (uint32_t)pool_n);
    CHECK_EQ_U64(st.truncated, 0);
    for (int i = 0; i < NTHR; i++) free(th[i].ids);
    free(owner);
    free(pool);
    mlz_stacktab_destroy(&ct);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_reference_model);
    RUN(test_growth);
    RUN(test_full);
    RUN(test_concurrent);
    CHECK_EXIT();
}
