/*
 * bloom.c - see bloom.h. Counters change with CAS loops that stop at 0 and
 * at 255, so a race can never wrap a cell: a lost decrement leaves a
 * false positive behind, never a false negative.
 */
#include "bloom.h"

#include <sys/mman.h>

int mlz_bloom_init(mlz_bloom *b, unsigned log2_cells)
{
    if (log2_cells == 0) log2_cells = MLZ_BLOOM_DEFAULT_LOG2_CELLS;
    if (log2_cells < 9 || log2_cells > 32) return -1;
    uint8_t *c = mlz_map((size_t)1 << log2_cells);
    if (!c) return -1;
    b->mask = ((uint64_t)1 << log2_cells) - 1;
    b->log2_cells = log2_cells;
    b->shift = 64 - log2_cells;
    atomic_init(&b->nonzero, 0);
    atomic_init(&b->stuck, 0);
    atomic_store_explicit(&b->cells, c, memory_order_release);
    return 0;
}

void mlz_bloom_destroy(mlz_bloom *b)
{
    uint8_t *c = atomic_exchange(&b->cells, NULL);
    if (c) mlz_unmap(c, (size_t)b->mask + 1);
}

void mlz_bloom_add(mlz_bloom *b, uint64_t ptr)
{
    uint8_t *c = atomic_load_explicit(&b->cells, memory_order_acquire);
    uint64_t h = mlz__bloom_mix(ptr);
    for (unsigned i = 0; i < MLZ_BLOOM_K; i++) {
        uint8_t *cell = &c[mlz__bloom_cell(h, i, b->shift)];
        uint8_t v = __atomic_load_n(cell, __ATOMIC_RELAXED);
        /* relaxed is enough: the map's publish (release) orders these
         * increments before any free that could take them out again. */
        while (v != MLZ_BLOOM_STUCK &&
               !__atomic_compare_exchange_n(cell, &v, (uint8_t)(v + 1), 1, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {}
        if (v == 0) atomic_fetch_add_explicit(&b->nonzero, 1, memory_order_relaxed);
        if (v == MLZ_BLOOM_STUCK - 1) atomic_fetch_add_explicit(&b->stuck, 1, memory_order_relaxed);
    }
}

void mlz_bloom_remove(mlz_bloom *b, uint64_t ptr)
{
    uint8_t *c = atomic_load_explicit(&b->cells, memory_order_acquire);
    uint64_t h = mlz__bloom_mix(ptr);
    for (unsigned i = 0; i < MLZ_BLOOM_K; i++) {
        uint8_t *cell = &c[mlz__bloom_cell(h, i, b->shift)];
        uint8_t v = __atomic_load_n(cell, __ATOMIC_RELAXED);
        while (v != 0 && v != MLZ_BLOOM_STUCK &&
               !__atomic_compare_exchange_n(cell, &v, (uint8_t)(v - 1), 1, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED)) {}
        if (v == 1) atomic_fetch_sub_explicit(&b->nonzero, 1, memory_order_relaxed);
    }
}

double mlz_bloom_saturation(const mlz_bloom *b)
{
    return (double)atomic_load_explicit(&b->nonzero, memory_order_relaxed) / (double)(b->mask + 1);
}
