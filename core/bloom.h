/*
 * bloom.h - Bloom filter over the sampled pointers, in front of the heap map.
 *
 * Every free() asks mlz_bloom_maybe() first; only about 1 in 10^4 frees is of
 * a sampled block, so almost all of them stop here after a hash and four
 * loads instead of probing the map. A "maybe" costs one map lookup; a wrong
 * "no" would leave a freed block in the map forever (a phantom leak), so the
 * filter must never answer "no" for a live sampled pointer, including while
 * a rebuild replaces it (bloom.c argues why it does not).
 *
 * Frees never clear bits, so the filter fills up with dead addresses;
 * mlz_bloom_rebuild() replaces it with one built from the live map.
 */
#ifndef MLZ_BLOOM_H
#define MLZ_BLOOM_H

#include <stdatomic.h>
#include <stdint.h>

#include "heapmap.h"
#include "platform.h"

#define MLZ_BLOOM_DEFAULT_LOG2_BITS 20 /* 2^20 bits = 128 KiB: stays in L2 */
#define MLZ_BLOOM_K 4                  /* hash functions: optimal near 2-10% fill */

typedef struct mlz_bloom {
    _Atomic(uint64_t *) bits;    /* current filter (mmap'd words) */
    _Atomic(uint64_t *) pending; /* filter a rebuild is filling, else NULL */
    uint64_t mask;               /* bits per filter - 1 */
    unsigned log2_bits;
    unsigned k;                  /* == MLZ_BLOOM_K */
    _Atomic uint64_t ones;       /* bits set in the current filter (approximate) */
    _Atomic uint64_t rebuilds;
    _Atomic uint32_t rebuilding; /* one rebuild at a time */
    /* Replaced filters: readers may still hold them, so they are unmapped
     * only by mlz_bloom_destroy(). Linked through a header before the words. */
    _Atomic(uint64_t *) retired;
} mlz_bloom;

/* Internal: 64-bit mix of the pointer; low and high halves drive double
 * hashing (Kirsch & Mitzenmacher: two hashes give k without losing FP rate). */
static inline uint64_t mlz__bloom_mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

/*
 * 0 = ptr was never added to the filter now current (so it is not a live
 * sample); 1 = maybe. The pointer load is acquire: a rebuilt filter's bits
 * were written before it was installed with a release store. The word loads
 * are relaxed: bits are only ever set, and the add of a live pointer happened
 * before this free (malloc returned after adding, and the program passed the
 * pointer on to whoever frees it), so coherence guarantees the loads see it.
 */
static inline int mlz_bloom_maybe(const mlz_bloom *b, uint64_t ptr)
{
    const uint64_t *w = atomic_load_explicit(&b->bits, memory_order_acquire);
    uint64_t h = mlz__bloom_mix(ptr), lo = (uint32_t)h, hi = (h >> 32) | 1;
    for (unsigned i = 0; i < MLZ_BLOOM_K; i++) {
        uint64_t bit = (lo + i * hi) & b->mask;
        if (!(__atomic_load_n(&w[bit >> 6], __ATOMIC_RELAXED) & (1ull << (bit & 63))))
            return 0;
    }
    return 1;
}

/* log2_bits 0 = default; valid range [9, 36]. 0 on success, -1 on failure. */
int mlz_bloom_init(mlz_bloom *b, unsigned log2_bits);
/* Unmaps the current and all retired filters: only when quiescent. */
void mlz_bloom_destroy(mlz_bloom *b);

/* Must be called after mlz_heapmap_reserve(ptr) succeeded and before the
 * allocation is returned to the program. */
void mlz_bloom_add(mlz_bloom *b, uint64_t ptr);

/* Fraction of bits set in the current filter (approximate). */
double mlz_bloom_saturation(const mlz_bloom *b);

/* Rebuild from the live map. 0 = rebuilt, 1 = another rebuild is running
 * (returns at once), -1 = out of memory (the old filter stays). */
int mlz_bloom_rebuild(mlz_bloom *b, const mlz_heapmap *m);

#endif
