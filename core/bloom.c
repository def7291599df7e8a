/*
 * bloom.c - Bloom filter adds and lock-free rebuilds.
 *
 * Adds happen once per sample; rebuilds are rare background work (when
 * saturation passes a threshold the caller picks) and scan the whole map.
 *
 * Why a rebuild never causes a false negative.
 *
 * The insert path is heapmap_reserve(ptr) -> bloom_add(ptr) -> publish.
 * reserve's claim (CAS slot.pending 0 -> ptr) is seq_cst, and so are the
 * loads and stores of b->pending and b->bits below and the rebuild's loads of
 * slot.pending, so all of them sit in one total order S. A rebuild does
 *
 *   R1 pending = new;  R2 scan slots, add every claimed pointer to new;
 *   R3 bits = new;     R4 pending = NULL;  (old filter retired, never unmapped)
 *
 * and an add does A1 p = pending; A2 w = bits; set ptr in w, and in p if
 * set. The claim comes before A1 in S. Let R be the last rebuild whose R1
 * precedes A1 in S:
 *  - A1 between R1 and R4 of R: A1 reads R's new filter and sets ptr in it,
 *    and that is the filter R3 installs.
 *  - A1 after R4 of R (or no such R): A1 reads NULL and A2, later still,
 *    reads the filter current after R3 (or a later one); ptr is set in it.
 *  - Every rebuild R' that installs a filter after that has R1' after A1,
 *    hence after the claim, so its scan loads of that slot come after the
 *    claim in S and see it (or a later state: published, or already freed),
 *    and R' adds ptr to its filter.
 * So every filter that is current after the add holds ptr while ptr is live.
 * A free of ptr starts after malloc returned, i.e. after the add, so it
 * never loads a filter without ptr. This is the store-buffering litmus
 * (each side stores, then loads the other's location): only seq_cst on both
 * sides forbids both loads seeing the old values.
 *
 * The scan reads slot.pending rather than key: it holds the pointer from the
 * claim through RESERVED and while published, which covers reservations
 * whose key is not yet RESERVED.
 */
#include "bloom.h"

#include <stddef.h>

/* Each filter's mapping starts with this header, one cache line before the
 * words, so retiring a filter never writes into bits a reader may load. */
typedef struct filter_hdr {
    uint64_t *next_retired;
    size_t map_bytes;
} filter_hdr;

#define HDR_BYTES MLZ_CACHELINE

static filter_hdr *hdr_of(uint64_t *words)
{
    return (filter_hdr *)(void *)((char *)words - HDR_BYTES);
}

static uint64_t *filter_new(unsigned log2_bits)
{
    size_t bytes = HDR_BYTES + ((size_t)1 << log2_bits) / 8;
    char *p = mlz_map(bytes);
    if (!p) return NULL;
    ((filter_hdr *)(void *)p)->map_bytes = bytes;
    return (uint64_t *)(void *)(p + HDR_BYTES);
}

static void filter_free(uint64_t *words)
{
    if (words) {
        filter_hdr *h = hdr_of(words);
        mlz_unmap(h, h->map_bytes);
    }
}

/* Sets ptr's bits in w; returns how many were newly set. Relaxed: bits are
 * monotonic and who sees them is ordered by the filter pointer operations. */
static unsigned set_bits(uint64_t *w, uint64_t mask, uint64_t ptr)
{
    uint64_t h = mlz__bloom_mix(ptr), lo = (uint32_t)h, hi = (h >> 32) | 1;
    unsigned fresh = 0;
    for (unsigned i = 0; i < MLZ_BLOOM_K; i++) {
        uint64_t bit = (lo + i * hi) & mask, m = 1ull << (bit & 63);
        if (!(__atomic_fetch_or(&w[bit >> 6], m, __ATOMIC_RELAXED) & m)) fresh++;
    }
    return fresh;
}

int mlz_bloom_init(mlz_bloom *b, unsigned log2_bits)
{
    if (log2_bits == 0) log2_bits = MLZ_BLOOM_DEFAULT_LOG2_BITS;
    if (log2_bits < 9 || log2_bits > 36) return -1;
    uint64_t *w = filter_new(log2_bits);
    if (!w) return -1;
    atomic_init(&b->bits, w);
    atomic_init(&b->pending, NULL);
    b->mask = (1ull << log2_bits) - 1;
    b->log2_bits = log2_bits;
    b->k = MLZ_BLOOM_K;
    atomic_init(&b->ones, 0);
    atomic_init(&b->rebuilds, 0);
    atomic_init(&b->rebuilding, 0);
    atomic_init(&b->retired, NULL);
    return 0;
}

void mlz_bloom_destroy(mlz_bloom *b)
{
    uint64_t *w = atomic_load_explicit(&b->retired, memory_order_acquire);
    while (w) {
        uint64_t *next = hdr_of(w)->next_retired;
        filter_free(w);
        w = next;
    }
    atomic_store_explicit(&b->retired, NULL, memory_order_relaxed);
    filter_free(atomic_load_explicit(&b->pending, memory_order_relaxed));
    atomic_store_explicit(&b->pending, NULL, memory_order_relaxed);
    filter_free(atomic_load_explicit(&b->bits, memory_order_relaxed));
    atomic_store_explicit(&b->bits, NULL, memory_order_relaxed);
}

void mlz_bloom_add(mlz_bloom *b, uint64_t ptr)
{
    /* seq_cst, pending before bits: the order the file comment relies on. */
    uint64_t *p = atomic_load_explicit(&b->pending, memory_order_seq_cst);
    uint64_t *w = atomic_load_explicit(&b->bits, memory_order_seq_cst);
    unsigned fresh = set_bits(w, b->mask, ptr);
    if (fresh) atomic_fetch_add_explicit(&b->ones, fresh, memory_order_relaxed);
    if (p && p != w) set_bits(p, b->mask, ptr);
}

double mlz_bloom_saturation(const mlz_bloom *b)
{
    uint64_t ones = atomic_load_explicit(&b->ones, memory_order_relaxed);
    return (double)ones / (double)(b->mask + 1);
}

int mlz_bloom_rebuild(mlz_bloom *b, const mlz_heapmap *m)
{
    /* acquire: the previous rebuild's retired-list writes happen before ours. */
    if (atomic_exchange_explicit(&b->rebuilding, 1, memory_order_acquire)) return 1;
    uint64_t *nw = filter_new(b->log2_bits);
    if (!nw) {
        atomic_store_explicit(&b->rebuilding, 0, memory_order_release);
        return -1;
    }

    atomic_store_explicit(&b->pending, nw, memory_order_seq_cst); /* R1 */
    for (uint64_t i = 0; i <= m->mask; i++) {                     /* R2 */
        uint64_t pv = atomic_load_explicit(&m->slots[i].pending, memory_order_seq_cst);
        if (pv != 0 && pv != MLZ_HEAP_KILLED) set_bits(nw, b->mask, pv);
    }
    /* Only a rebuilder stores bits, and we hold the flag. */
    uint64_t *old = atomic_load_explicit(&b->bits, memory_order_relaxed);
    atomic_store_explicit(&b->bits, nw, memory_order_seq_cst);    /* R3 */
    atomic_store_explicit(&b->pending, NULL, memory_order_seq_cst); /* R4 */

    /* Saturation of the new filter; adds racing with the count make it
     * approximate, which is all the trigger needs. */
    uint64_t ones = 0;
    for (uint64_t i = 0; i <= b->mask >> 6; i++)
        ones += (uint64_t)__builtin_popcountll(__atomic_load_n(&nw[i], __ATOMIC_RELAXED));
    atomic_store_explicit(&b->ones, ones, memory_order_relaxed);

    hdr_of(old)->next_retired = atomic_load_explicit(&b->retired, memory_order_relaxed);
    /* release: destroy() (after quiescence) follows the links we wrote. */
    atomic_store_explicit(&b->retired, old, memory_order_release);
    atomic_fetch_add_explicit(&b->rebuilds, 1, memory_order_relaxed);
    /* release: the next rebuilder sees our retired list and bits pointer. */
    atomic_store_explicit(&b->rebuilding, 0, memory_order_release);
    return 0;
}
