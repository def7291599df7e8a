/*
 * bloom.h - counting Bloom filter over the live sampled pointers, in front
 * of the heap map.
 *
 * Every free() asks the filter first: a hash and one byte load
 * (mlz_bloom_first_default), then three more bytes of the same cache line
 * when that one is set (mlz_bloom_rest). Only a "maybe" goes on to the map.
 * A wrong "no" would leave a freed block in the map forever (a phantom
 * leak), so the filter never answers "no" for a live sampled pointer.
 *
 * Why counting, not the spec's bit filter: allocators hand the same
 * addresses out again and again (glibc's tcache reuses a freed block at
 * once). Once a sampled block at a hot address was freed, a bit filter
 * kept saying "maybe" for every later free of that address until the next
 * rebuild: measured here, that made a malloc/free loop 13x slower. With a
 * counter per cell, freeing a sampled block takes its counts out again, so
 * the filter holds the live samples only and needs no periodic rebuild. A
 * cell that ever reaches 255 stays there (a count could be lost otherwise);
 * that only costs false positives, and needs 255 live samples sharing it.
 */
#ifndef MLZ_BLOOM_H
#define MLZ_BLOOM_H

#include <stdatomic.h>
#include <stdint.h>

#include "platform.h"

#define MLZ_BLOOM_DEFAULT_LOG2_CELLS 16 /* 2^16 one-byte cells = 64 KiB: stays in L2 */
#define MLZ_BLOOM_K 4                   /* cells per pointer */
#define MLZ_BLOOM_STUCK 255

typedef struct mlz_bloom {
    _Atomic(uint8_t *) cells;    /* mmap'd counters; swappable (see the payload's detach) */
    unsigned shift;              /* 64 - log2_cells, stored: the free hook shifts by it */
    unsigned log2_cells;
    uint64_t mask;               /* cells - 1 */
    /* Written by adds and removes: off the line every free reads. */
    _Alignas(MLZ_CACHELINE) _Atomic uint64_t nonzero;    /* cells above zero */
    _Atomic uint64_t stuck;      /* cells saturated at 255 */
} mlz_bloom;

/* One multiplication (Fibonacci hashing): on the path of every free, a
 * full 64-bit mixer cost more than the rest of the test together. The high
 * half of the product, well mixed from every bit of the pointer, picks the
 * block; the bits below it the cells. */
static inline uint64_t mlz__bloom_mix(uint64_t x)
{
    return x * 0x9E3779B97F4A7C15ull;
}

/* Blocked layout: the hash's top log2_cells bits are the first cell, and
 * so pick one 64-byte block (one cache line); 6-bit fields of bits 14-31
 * pick the other k-1 cells inside that block. A query then touches a
 * single cache line; with the filter out of cache on every free, that is
 * what keeps the free path cheap (measured: four scattered loads made an
 * 8-thread churn 1.8x slower). The multiplication's bits below 14 are left
 * out: they depend only on the pointer's lowest, mostly aligned, bits. */
static inline uint64_t mlz__bloom_first(uint64_t h, unsigned shift)
{
    return h >> shift;
}

static inline uint64_t mlz__bloom_cell(uint64_t h, unsigned i, unsigned shift)
{
    if (i == 0) return mlz__bloom_first(h, shift);
    return (mlz__bloom_first(h, shift) & ~(uint64_t)63) | ((h >> (8 + 6 * i)) & 63);
}

/*
 * The test is split in two so that the free hook inlines only the first
 * half: one multiplication, one shift and one byte load. Most frees stop
 * there (the first cell is zero); the others go on to mlz_bloom_rest on
 * their cold path. The cells pointer is loaded with acquire (a filter is
 * filled before it is installed). The cell loads are relaxed: the add of a
 * live pointer happened before this free (malloc returned after adding,
 * and the program passed the pointer on to whoever frees it), so coherence
 * lets these loads see it; a pointer's own counts are only taken out after
 * its map entry is gone.
 */
static inline const uint8_t *mlz__bloom_first_cell(const mlz_bloom *b, uint64_t ptr, unsigned shift)
{
    const uint8_t *c = atomic_load_explicit(&b->cells, memory_order_acquire);
    return &c[mlz__bloom_first(mlz__bloom_mix(ptr), shift)];
}

/* Only for a filter of 2^MLZ_BLOOM_DEFAULT_LOG2_CELLS cells (the
 * payload's always is): the shift is an immediate, one load fewer on the
 * path of every free. */
static inline int mlz_bloom_first_default(const mlz_bloom *b, uint64_t ptr)
{
    return __atomic_load_n(mlz__bloom_first_cell(b, ptr, 64 - MLZ_BLOOM_DEFAULT_LOG2_CELLS),
                           __ATOMIC_RELAXED) != 0;
}

/* Cells from..k-1 of ptr all set. */
static inline int mlz__bloom_cells_from(const mlz_bloom *b, uint64_t ptr, unsigned from)
{
    const uint8_t *c = atomic_load_explicit(&b->cells, memory_order_acquire);
    uint64_t h = mlz__bloom_mix(ptr);
    for (unsigned i = from; i < MLZ_BLOOM_K; i++)
        if (!__atomic_load_n(&c[mlz__bloom_cell(h, i, b->shift)], __ATOMIC_RELAXED)) return 0;
    return 1;
}

/* The other k-1 cells, after the first cell said 1. */
static inline int mlz_bloom_rest(const mlz_bloom *b, uint64_t ptr)
{
    return mlz__bloom_cells_from(b, ptr, 1);
}

/* 0 = ptr is not a live sample; 1 = maybe (the whole test in one pass). */
static inline int mlz_bloom_maybe(const mlz_bloom *b, uint64_t ptr)
{
    return mlz__bloom_cells_from(b, ptr, 0);
}

/* Starts fetching ptr's cache line of cells for writing (before an add). */
static inline void mlz_bloom_prefetch(const mlz_bloom *b, uint64_t ptr)
{
    __builtin_prefetch(mlz__bloom_first_cell(b, ptr, b->shift), 1);
}

/* log2_cells 0 = default; valid range [9, 32]. 0 on success, -1 on failure. */
int mlz_bloom_init(mlz_bloom *b, unsigned log2_cells);
/* Unmaps the counters: only when no thread can read them any more. */
void mlz_bloom_destroy(mlz_bloom *b);
/* After mlz_heapmap_reserve(ptr) succeeded, before the block is returned. */
void mlz_bloom_add(mlz_bloom *b, uint64_t ptr);
/* After ptr's published entry was removed from the map: exactly once per
 * add (the caller must not remove for an insert that died during birth,
 * whose add may not have happened yet). */
void mlz_bloom_remove(mlz_bloom *b, uint64_t ptr);
/* Fraction of cells above zero (approximate). */
double mlz_bloom_saturation(const mlz_bloom *b);

#endif
