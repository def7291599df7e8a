/*
 * stacktab.c - stack interning with a growing, lock-free hash index.
 *
 * Three memory regions, each one MAP_NORESERVE reservation made at init:
 *
 *   recs[id]  fixed-size records, written once by the thread that created
 *             the id, readable once ready == 1;
 *   frames    a bump arena of PCs (atomic fetch_add hands out ranges);
 *   index     levels of 64-bit words {hash tag << 32 | id}, level i having
 *             2^(L0+i) slots, carved back to back.
 *
 * Growth without copying or rehashing: inserts go into the newest level;
 * once it is ~70% full the next, twice as large, becomes newest (a CAS on
 * nlevels: its memory is already reserved and zero, so there is nothing to
 * initialise or publish). Lookups probe every level, newest first, each with
 * linear probing that stops at an empty word. Words go from 0 to their final
 * value once (CAS, release), so a reader sees either nothing or a finished
 * record. With n stacks there are about log2(n / 358) levels.
 *
 * Duplicates: a thread creates the record (id, frames, ready) before it
 * indexes it. Two threads interning the same new stack at once both create
 * records; both then probe the same home slot of the same newest level, the
 * first CAS wins and the second meets the winner's word and returns the
 * winner's id. Only if the newest level changes between the two inserts can
 * both words survive: then the stack has two ids with identical frames. The
 * loser's record stays valid but unreferenced. Either way is harmless to the
 * reader, which merges by frames.
 */
#include "stacktab.h"

#include <string.h>

#define LEVEL0 ((uint64_t)1 << MLZ_STACKTAB_LEVEL0_LOG2)
#define PROBE_LIMIT 128 /* index words = 16 cache lines */

uint64_t mlz_stack_hash(const uint64_t *pcs, unsigned depth)
{
    /* One multiply-xorshift per frame (a bijection of the running state),
     * then a full finalizer; ~1 ns per frame. */
    uint64_t h = 0x9E3779B97F4A7C15ull ^ depth;
    for (unsigned i = 0; i < depth; i++) {
        h = (h ^ pcs[i]) * 0xD6E8FEB86659FD93ull;
        h ^= h >> 32;
    }
    return mlz_fmix64(h);
}

static uint64_t level_size(unsigned lvl) { return LEVEL0 << lvl; }
static uint64_t level_base(unsigned lvl) { return LEVEL0 * ((1ull << lvl) - 1); }

int mlz_stacktab_init(mlz_stacktab *t, uint32_t max_stacks, size_t arena_bytes)
{
    if (max_stacks == 0) max_stacks = MLZ_STACKTAB_DEFAULT_MAX;
    if (arena_bytes == 0) arena_bytes = MLZ_STACKTAB_DEFAULT_ARENA;
    if (max_stacks > UINT32_MAX - 2 || arena_bytes < sizeof(uint64_t)) return -1;

    /* Enough levels that 70% of all of them holds max_stacks, plus one for
     * levels that fill unevenly (long probe runs move inserts on early). */
    unsigned levels = 1;
    while (levels < MLZ_STACKTAB_MAX_LEVELS &&
           (double)level_base(levels) * 0.7 < (double)max_stacks)
        levels++;
    if (levels < MLZ_STACKTAB_MAX_LEVELS) levels++;

    memset(t, 0, sizeof *t);
    t->max_stacks = max_stacks;
    t->max_levels = levels;
    t->arena_cap = arena_bytes / sizeof(uint64_t);
    t->recs_map = ((size_t)max_stacks + 1) * sizeof(mlz_stack_rec);
    t->frames_map = (size_t)t->arena_cap * sizeof(uint64_t);
    t->index_map = (size_t)level_base(levels) * sizeof(uint64_t);
    t->recs = mlz_map_noreserve(t->recs_map);
    t->frames = mlz_map_noreserve(t->frames_map);
    t->index = mlz_map_noreserve(t->index_map);
    if (!t->recs || !t->frames || !t->index) {
        mlz_stacktab_destroy(t);
        return -1;
    }
    atomic_init(&t->next_id, 1);
    atomic_init(&t->nlevels, 1);
    return 0;
}

void mlz_stacktab_destroy(mlz_stacktab *t)
{
    mlz_unmap(t->recs, t->recs_map);
    mlz_unmap(t->frames, t->frames_map);
    mlz_unmap((void *)t->index, t->index_map);
    t->recs = NULL;
    t->frames = NULL;
    t->index = NULL;
}

static int same_stack(const mlz_stacktab *t, uint32_t id, uint64_t h,
                      const uint64_t *pcs, unsigned depth)
{
    if (id == 0 || id > t->max_stacks) return 0;
    const mlz_stack_rec *r = &t->recs[id];
    /* acquire: pairs with the creator's release of ready (fields, frames). */
    if (atomic_load_explicit(&r->ready, memory_order_acquire) != 1) return 0;
    return r->hash == h && r->depth == depth &&
           (depth == 0 || memcmp(t->frames + r->frames_offset, pcs, depth * sizeof(uint64_t)) == 0);
}

/* Probes one level. Returns the id found, 0 if absent. */
static uint32_t level_find(mlz_stacktab *t, unsigned lvl, uint64_t h,
                           const uint64_t *pcs, unsigned depth)
{
    _Atomic uint64_t *w = t->index + level_base(lvl);
    uint64_t mask = level_size(lvl) - 1, tag = h >> 32;
    for (uint64_t i = 0, pos = h & mask; i < PROBE_LIMIT && i <= mask; i++, pos = (pos + 1) & mask) {
        /* acquire: the word was CAS'ed in with release after the record was ready. */
        uint64_t v = atomic_load_explicit(&w[pos], memory_order_acquire);
        if (v == 0) return 0;
        if ((v >> 32) != tag) continue;
        if (same_stack(t, (uint32_t)v, h, pcs, depth)) return (uint32_t)v;
        atomic_fetch_add_explicit(&t->collisions, 1, memory_order_relaxed);
    }
    return 0;
}

/* Make level n the newest if level n-1 is the newest now. Relaxed: the new
 * level's memory is zero already; nothing needs publishing with it. */
static void grow(mlz_stacktab *t, unsigned n)
{
    unsigned expect = n;
    if (n < t->max_levels)
        atomic_compare_exchange_strong_explicit(&t->nlevels, &expect, n + 1,
                                                memory_order_relaxed, memory_order_relaxed);
}

/* Index (h -> id) in the newest level. Returns id, or another id for the
 * same stack met on the way (see the file comment on duplicates). */
static uint32_t index_insert(mlz_stacktab *t, uint64_t h, uint32_t id,
                             const uint64_t *pcs, unsigned depth)
{
    const uint64_t word = (h >> 32) << 32 | id, tag = h >> 32;
    for (int attempt = 0; attempt < 2; attempt++) {
        unsigned n = atomic_load_explicit(&t->nlevels, memory_order_relaxed);
        unsigned lvl = n - 1;
        uint64_t size = level_size(lvl), mask = size - 1;
        if (atomic_load_explicit(&t->level_used[lvl], memory_order_relaxed) * 10 >= size * 7) {
            grow(t, n);
            n = atomic_load_explicit(&t->nlevels, memory_order_relaxed);
            lvl = n - 1;
            size = level_size(lvl);
            mask = size - 1;
        }
        _Atomic uint64_t *w = t->index + level_base(lvl);
        for (uint64_t i = 0, pos = h & mask; i < PROBE_LIMIT && i <= mask; i++, pos = (pos + 1) & mask) {
            uint64_t v = atomic_load_explicit(&w[pos], memory_order_acquire);
            if (v == 0) {
                /* release: the record (ready == 1) is visible with the word.
                 * acquire on failure: we may inspect the winner's record. */
                if (atomic_compare_exchange_strong_explicit(&w[pos], &v, word,
                                                            memory_order_acq_rel,
                                                            memory_order_acquire)) {
                    atomic_fetch_add_explicit(&t->level_used[lvl], 1, memory_order_relaxed);
                    return id;
                }
            }
            if ((v >> 32) == tag && same_stack(t, (uint32_t)v, h, pcs, depth))
                return (uint32_t)v;
        }
        /* A probe run this long means the level is effectively full. */
        grow(t, n);
    }
    atomic_fetch_add_explicit(&t->unindexed, 1, memory_order_relaxed);
    return id;
}

static uint32_t truncated(mlz_stacktab *t)
{
    atomic_fetch_add_explicit(&t->truncated, 1, memory_order_relaxed);
    return MLZ_STACK_TRUNCATED;
}

uint32_t mlz_stacktab_intern(mlz_stacktab *t, const uint64_t *pcs, unsigned depth)
{
    if (depth > MLZ_MAX_FRAMES) {
        depth = MLZ_MAX_FRAMES;
        atomic_fetch_add_explicit(&t->clamped, 1, memory_order_relaxed);
    }
    uint64_t h = mlz_stack_hash(pcs, depth);
    unsigned n = atomic_load_explicit(&t->nlevels, memory_order_relaxed);
    for (unsigned lvl = n; lvl-- > 0;) {
        uint32_t id = level_find(t, lvl, h, pcs, depth);
        if (id) return id;
    }

    /* New stack. Check before bumping so a full table does not keep
     * consuming ids or frames. Frames first: if the id then fails, the table
     * is full anyway and the lost frames cannot matter. All relaxed: the
     * counters only hand out disjoint ranges; `ready` orders the contents. */
    if (atomic_load_explicit(&t->next_id, memory_order_relaxed) > t->max_stacks ||
        atomic_load_explicit(&t->arena_used, memory_order_relaxed) + depth > t->arena_cap)
        return truncated(t);
    uint64_t off = atomic_fetch_add_explicit(&t->arena_used, depth, memory_order_relaxed);
    if (off + depth > t->arena_cap) return truncated(t);
    uint32_t id = atomic_fetch_add_explicit(&t->next_id, 1, memory_order_relaxed);
    if (id > t->max_stacks) return truncated(t);

    if (depth) memcpy(t->frames + off, pcs, depth * sizeof(uint64_t));
    mlz_stack_rec *r = &t->recs[id];
    r->depth = depth;
    r->hash = h;
    r->frames_offset = off;
    /* release: depth, hash and frames are visible to whoever acquires ready. */
    atomic_store_explicit(&r->ready, 1, memory_order_release);
    return index_insert(t, h, id, pcs, depth);
}

int mlz_stacktab_get(const mlz_stacktab *t, uint32_t id, const uint64_t **pcs,
                     unsigned *depth)
{
    if (id == 0 || id >= mlz_stacktab_count(t)) return 0;
    const mlz_stack_rec *r = &t->recs[id];
    /* acquire: pairs with the creator's release of ready. */
    if (atomic_load_explicit(&r->ready, memory_order_acquire) != 1) return 0;
    *pcs = t->frames + r->frames_offset;
    *depth = r->depth;
    return 1;
}

uint32_t mlz_stacktab_count(const mlz_stacktab *t)
{
    /* relaxed: a snapshot; get() checks ready for each id it is given. */
    uint32_t n = atomic_load_explicit(&t->next_id, memory_order_relaxed);
    return n > t->max_stacks + 1 ? t->max_stacks + 1 : n;
}

void mlz_stacktab_get_stats(const mlz_stacktab *t, mlz_stacktab_stats *s)
{
    unsigned levels = atomic_load_explicit(&t->nlevels, memory_order_relaxed);
    uint64_t frames = atomic_load_explicit(&t->arena_used, memory_order_relaxed);
    if (frames > t->arena_cap) frames = t->arena_cap;
    s->ids = mlz_stacktab_count(t) - 1;
    s->levels = levels;
    s->collisions = atomic_load_explicit(&t->collisions, memory_order_relaxed);
    s->truncated = atomic_load_explicit(&t->truncated, memory_order_relaxed);
    s->clamped = atomic_load_explicit(&t->clamped, memory_order_relaxed);
    s->unindexed = atomic_load_explicit(&t->unindexed, memory_order_relaxed);
    s->bytes_used = ((uint64_t)s->ids + 1) * sizeof(mlz_stack_rec) +
                    frames * sizeof(uint64_t) + level_base(levels) * sizeof(uint64_t);
    s->bytes_reserved = t->recs_map + t->frames_map + t->index_map;
}
