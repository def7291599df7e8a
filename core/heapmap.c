/*
 * heapmap.c - the live-allocation map: claim, publish, remove, iterate.
 *
 * Open addressing over a fixed array of 64-byte slots, probed triangularly
 * (home + i(i+1)/2, which visits every slot of a power-of-two table once in
 * the first `capacity` steps). Triangular rather than linear probing because
 * a slot is a whole cache line anyway, so linear probing buys no locality,
 * while its primary clustering makes the longest probe at 75% load run past
 * any fixed bound under long churn; with triangular probing the chance that
 * an insert needs more than d probes falls roughly like load^d.
 *
 * Freed entries become TOMBSTONEs, which inserts reuse, so a live entry never
 * sits further from home than the longest insert probe seen so far from
 * that home (its home slot's `reach`). Lookups stop there or at an EMPTY
 * slot, so their cost stays bounded however many tombstones accumulate. A
 * bound per home, not one for the whole map: the map-wide longest probe
 * only grows, and after a while every insert that reused a tombstone went
 * on scanning that far for a stale entry (exact mode on the churn: 1335 ->
 * 1312 instructions per malloc+free). Dense heaps of blocks under 64 bytes
 * still make long chains at their own homes (two or more blocks per
 * 128-byte home): 1970 instructions per malloc+free either way.
 */
#include "heapmap.h"
#include "info.h"

#include <string.h>

/* Plain (non-_Atomic) fields are accessed with the GCC builtins so that
 * in-process readers racing with a slot's next owner are well defined; the
 * orderings come from the key/pending operations around them. */
#define FIELD_LOAD(p)     __atomic_load_n((p), __ATOMIC_RELAXED)
#define FIELD_LOAD_ACQ(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define FIELD_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)

enum { END_LOST, END_BIRTH, END_LIVE, END_CANCELLED };

static int is_pointer(uint64_t k)
{
    return k != MLZ_HEAP_EMPTY && k != MLZ_HEAP_RESERVED && k != MLZ_HEAP_TOMBSTONE;
}

/* The blocks of one 8 KiB stretch of heap share one 4 KiB page of the map
 * (64 slots, one per 128 bytes: address bits 7-12): the map's resident size
 * then follows the heap in use, at half its size, rather than every address
 * ever seen (exact mode made 11 MB of its 64 MB map resident on a churn of
 * a 1 MB heap with a hash of the whole address; 1.9 MB at a slot per 64
 * bytes, on 8 threads). Blocks under 128 bytes share a home and sit in the
 * next probes, on the same map page. */
static uint64_t home_of(const mlz_heapmap *m, uint64_t ptr)
{
    return ((mlz_fmix64(ptr >> 13) << 6) | ((ptr >> 7) & 63)) & m->mask;
}

static uint64_t probe_at(const mlz_heapmap *m, uint64_t home, uint64_t i)
{
    return (home + i * (i + 1) / 2) & m->mask;
}

/* Never more than `capacity` steps: past that the sequence revisits slots. */
static uint64_t probe_limit(const mlz_heapmap *m)
{
    uint64_t cap = m->mask + 1;
    return cap < MLZ_HEAPMAP_MAX_PROBE ? cap : MLZ_HEAPMAP_MAX_PROBE;
}

static void stat_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* The check word is part of the payload's contract with readers outside
 * the process (payload/info.h): one definition for both sides. */
uint64_t mlz_heap_entry_check(uint64_t key, uint64_t size, uint32_t stack_id,
                              uint32_t tid, uint64_t time_ns, uint64_t seq)
{
    return memlyze_check_word(key, size, stack_id, tid, time_ns, seq);
}

int mlz_heap_entry_consistent(const mlz_heap_entry *c)
{
    uint64_t key = atomic_load_explicit(&c->key, memory_order_relaxed);
    return is_pointer(key) &&
           c->check == mlz_heap_entry_check(key, c->size, c->stack_id, c->tid,
                                            c->time_ns, c->seq);
}

int mlz_heapmap_init(mlz_heapmap *m, unsigned log2_cap)
{
    if (log2_cap < 4 || log2_cap > 40) return -1;
    mlz_heap_entry *slots = mlz_map(sizeof(mlz_heap_entry) << log2_cap);
    if (!slots) return -1;
    m->slots = slots;
    m->mask = (1ull << log2_cap) - 1;
    m->log2_cap = log2_cap;
    atomic_init(&m->full_drops, 0);
    atomic_init(&m->death_during_birth, 0);
    atomic_init(&m->stale_replaced, 0);
    atomic_init(&m->max_probe, 0);
    return 0;
}

void mlz_heapmap_destroy(mlz_heapmap *m)
{
    if (!m->slots) return;
    mlz_unmap(m->slots, sizeof(mlz_heap_entry) << m->log2_cap);
    m->slots = NULL;
}

/*
 * The slot state machine.
 *
 * Two words per slot. `key` is what readers look at; `pending` is ownership:
 * a slot belongs to whoever moved pending away from 0, and only an owner or
 * the single thread that took pending to KILLED may change `key`.
 *
 *   (key, pending)               event                       next
 *   (EMPTY|TOMB, 0)       reserve: CAS pending 0->ptr    (EMPTY|TOMB, ptr)
 *   (EMPTY|TOMB, ptr)     reserve: store key RESERVED    (RESERVED, ptr)
 *   (RESERVED, ptr)       publish: CAS key ->ptr         (ptr, ptr)
 *   (RESERVED, ptr)       cancel:  CAS key ->TOMB,
 *                                  CAS pending ptr->0    (TOMB, 0)
 *   (ptr|RESERVED, ptr)   remove:  CAS pending ptr->KILLED, then
 *     key ptr:              store key TOMB, pending 0    (TOMB, 0)
 *     key RESERVED:         CAS key ->TOMB               (TOMB, KILLED)
 *   (TOMB, KILLED)        publish/cancel sees TOMB:
 *                                  store pending 0       (TOMB, 0)
 *   (TOMB, KILLED)        remove finds the owner cancelled
 *                         in between: store pending 0    (TOMB, 0)
 *
 * Invariants that make it work without locks or waiting:
 *  - pending returns to 0 only after key is TOMB, so "pending == 0" means
 *    free, and a reserve's single CAS on pending claims a slot outright.
 *  - After death during birth the slot stays (TOMB, KILLED), unclaimable,
 *    until its owner's publish or cancel acknowledges it. Otherwise another
 *    insert could reclaim it as RESERVED and the stale owner's publish CAS
 *    (RESERVED -> ptr) would land in someone else's slot (an ABA the design
 *    seed's single-word protocol has).
 *  - A remover first takes pending ptr->KILLED, which succeeds for exactly
 *    one party and only while ptr's entry lives in that slot; a new entry
 *    for the same address cannot exist before this free finishes.
 *  - pending is stored before key becomes RESERVED (release), so a remover
 *    that acquires key == RESERVED sees pending == ptr. A free of ptr can
 *    only start after malloc returned ptr, i.e. after reserve returned, so
 *    every such free sees the reservation.
 *  - Slots never return to EMPTY, so a chain that ends at an EMPTY slot
 *    ended there for every earlier insert too. The one subtle case is a slot
 *    claimed (pending set) whose key is still EMPTY: an insert may have gone
 *    past it, so lookups treat it as occupied (chain_ends()).
 */

/* An EMPTY key ends the probe chain only if nobody is claiming the slot. */
static int chain_ends(mlz_heap_entry *e)
{
    /* acquire: if this 0 is a releaser's, the key reload below sees its TOMB. */
    if (atomic_load_explicit(&e->pending, memory_order_acquire) != 0) return 0;
    return atomic_load_explicit(&e->key, memory_order_relaxed) == MLZ_HEAP_EMPTY;
}

static int try_claim(mlz_heap_entry *e, uint64_t ptr, uint64_t *was)
{
    uint64_t expect = 0;
    if (atomic_load_explicit(&e->pending, memory_order_relaxed) != 0) return 0;
    /* seq_cst: a Bloom rebuild stores its pending filter then scans slots;
     * the adder that follows this claim loads that filter. Store-load on both
     * sides needs a single total order (see bloom.c). It also acquires the
     * previous owner's release of pending, ordering its reads before ours. */
    if (!atomic_compare_exchange_strong_explicit(&e->pending, &expect, ptr,
                                                 memory_order_seq_cst, memory_order_relaxed))
        return 0;
    /* pending was 0, so key is EMPTY or TOMB and now only we may change it. */
    *was = atomic_load_explicit(&e->key, memory_order_relaxed);
    /* release: whoever acquires key == RESERVED also sees pending == ptr. */
    atomic_store_explicit(&e->key, MLZ_HEAP_RESERVED, memory_order_release);
    return 1;
}

static void copy_entry(const mlz_heap_entry *e, mlz_heap_entry *out, uint64_t key)
{
    /* acquire on each field so the caller's re-load of key (foreach) cannot
     * be satisfied before them; free on x86, a few ldar on arm64. */
    memset(out, 0, sizeof *out);
    atomic_init(&out->key, key);
    out->size = FIELD_LOAD_ACQ(&e->size);
    out->stack_id = FIELD_LOAD_ACQ(&e->stack_id);
    out->tid = FIELD_LOAD_ACQ(&e->tid);
    out->time_ns = FIELD_LOAD_ACQ(&e->time_ns);
    out->seq = FIELD_LOAD_ACQ(&e->seq);
    out->check = FIELD_LOAD_ACQ(&e->check);
}

/* End ptr's entry in e: the caller saw key == ptr, or key RESERVED with
 * pending == ptr. Returns END_LOST if someone else ended it first. */
static int end_entry(mlz_heap_entry *e, uint64_t ptr, mlz_heap_entry *out)
{
    uint64_t pv = ptr;
    /* relaxed: this only elects the one ender; what we do next is decided by
     * the key operations below, which carry their own ordering. */
    if (!atomic_compare_exchange_strong_explicit(&e->pending, &pv, MLZ_HEAP_KILLED,
                                                 memory_order_relaxed, memory_order_relaxed))
        return END_LOST;
    /* While pending is KILLED only the owner can move key, and only from
     * RESERVED, so this loop runs at most twice. */
    uint64_t k = atomic_load_explicit(&e->key, memory_order_acquire);
    for (;;) {
        if (k == MLZ_HEAP_RESERVED) {
            /* acquire (both outcomes): on failure k is the owner's fresh
             * publish, whose fields we may copy next. The owner's failed
             * publish/cancel needs only the TOMB value from us. */
            if (atomic_compare_exchange_strong_explicit(&e->key, &k, MLZ_HEAP_TOMBSTONE,
                                                        memory_order_acquire,
                                                        memory_order_acquire))
                return END_BIRTH;
            continue;
        }
        if (k == ptr) {
            if (out) copy_entry(e, out, ptr); /* key acquire above made the fields visible */
            atomic_store_explicit(&e->key, MLZ_HEAP_TOMBSTONE, memory_order_relaxed);
            /* release: the next claimer (acquire CAS on pending) sees key TOMB
             * and our field reads completed before it rewrites them. */
            atomic_store_explicit(&e->pending, 0, memory_order_release);
            return END_LIVE;
        }
        /* TOMB: the owner cancelled between our two steps and left the
         * release of the slot to us (its CAS pending ptr->0 failed). */
        atomic_store_explicit(&e->pending, 0, memory_order_release);
        return END_CANCELLED;
    }
}

/* The bound on the probes of the pointers whose home is `home`. relaxed:
 * see note_probe(). */
static uint64_t home_reach(const mlz_heapmap *m, uint64_t home)
{
    return atomic_load_explicit(&m->slots[home].reach, memory_order_relaxed);
}

/* Raise *c to at least d. */
static void raise_to(_Atomic uint64_t *c, uint64_t d)
{
    uint64_t cur = atomic_load_explicit(c, memory_order_relaxed);
    while (d > cur && !atomic_compare_exchange_weak_explicit(c, &cur, d, memory_order_relaxed,
                                                             memory_order_relaxed))
        ;
}

/* An insert from `home` may claim its slot at probe d - 1. relaxed: a free of
 * this pointer starts after reserve returned (the program hands the pointer
 * over), so it reads this value or a larger one; nothing else depends on it. */
static void note_probe(mlz_heapmap *m, uint64_t home, uint64_t d)
{
    if (d <= home_reach(m, home)) return;
    raise_to(&m->slots[home].reach, d);
    raise_to(&m->max_probe, d);
}

uint64_t mlz_heapmap_reach(const mlz_heapmap *m, uint64_t ptr)
{
    return home_reach(m, home_of(m, ptr));
}

void mlz_heapmap_prefetch(const mlz_heapmap *m, uint64_t ptr)
{
    __builtin_prefetch(&m->slots[home_of(m, ptr)], 1);
}

int64_t mlz_heapmap_reserve(mlz_heapmap *m, uint64_t ptr)
{
    if (!is_pointer(ptr)) return -1;
    uint64_t home = home_of(m, ptr), limit = probe_limit(m);
    /* Entries live within `reach` probes of home; after claiming we keep
     * scanning that far for a stale entry of the same address. Read from
     * the home slot after probe 0's write (below). */
    uint64_t reach = 0;
    int64_t claimed = -1;

    for (uint64_t i = 0; i < limit; i++) {
        if (claimed >= 0 && i >= reach) break;
        uint64_t idx = probe_at(m, home, i);
        if ((int64_t)idx == claimed) continue;
        mlz_heap_entry *e = &m->slots[idx];
        /* The first touch of a slot is a write (an RMW that changes
         * nothing): a read would map the zero page, and the claim's write
         * then fault again to copy it (and flush other CPUs' TLBs). An
         * add, not an or: GCC makes a fetch_or whose result is used a load
         * and a cmpxchg loop, whose load is that read; an add is one
         * lock xadd. */
        uint64_t k;
        if (i == 0) {   /* e is the home slot */
            k = atomic_fetch_add_explicit(&e->key, 0, memory_order_acquire);
            reach = home_reach(m, home);
        } else {
            k = atomic_load_explicit(&e->key, memory_order_acquire);
        }

        if (k == ptr || (k == MLZ_HEAP_RESERVED &&
                         atomic_load_explicit(&e->pending, memory_order_acquire) == ptr)) {
            /* malloc just returned ptr, so this entry's free went through a
             * path we did not see (e.g. before the GOT patch): it is stale. */
            int r = end_entry(e, ptr, NULL);
            if (r != END_LOST) stat_add(&m->stale_replaced, 1);
            k = atomic_load_explicit(&e->key, memory_order_acquire);
        }
        if (k != MLZ_HEAP_EMPTY && k != MLZ_HEAP_TOMBSTONE) continue;

        uint64_t was;
        /* The bound covers the slot before it is claimed: a claim that is
         * never finished (a thread killed in between) still lies inside. */
        if (claimed < 0 && i >= reach) note_probe(m, home, reach = i + 1);
        if (claimed < 0 && try_claim(e, ptr, &was)) {
            claimed = (int64_t)idx;
            if (was != MLZ_HEAP_TOMBSTONE) break; /* claimed an EMPTY slot: the chain ended here */
        } else if (k == MLZ_HEAP_EMPTY && chain_ends(e)) {
            if (claimed >= 0) break;
        }
    }
    if (claimed < 0) stat_add(&m->full_drops, 1);
    return claimed;
}

int mlz_heapmap_publish(mlz_heapmap *m, int64_t slot, uint64_t ptr, uint64_t size,
                        uint32_t stack_id, uint32_t tid, uint64_t time_ns, uint64_t seq)
{
    mlz_heap_entry *e = &m->slots[slot];
    FIELD_STORE(&e->size, size);
    FIELD_STORE(&e->stack_id, stack_id);
    FIELD_STORE(&e->tid, tid);
    FIELD_STORE(&e->time_ns, time_ns);
    FIELD_STORE(&e->seq, seq);
    FIELD_STORE(&e->check, mlz_heap_entry_check(ptr, size, stack_id, tid, time_ns, seq));

    uint64_t k = MLZ_HEAP_RESERVED;
    /* release: publishes the fields above to every thread that acquires key == ptr. */
    if (atomic_compare_exchange_strong_explicit(&e->key, &k, ptr, memory_order_release,
                                                memory_order_relaxed))
        return 1;
    /* key is TOMB: a remover killed the birth and left the slot to us. */
    /* release: key TOMB is visible to the next claimer before pending 0. */
    atomic_store_explicit(&e->pending, 0, memory_order_release);
    return 0;
}

void mlz_heapmap_cancel(mlz_heapmap *m, int64_t slot)
{
    mlz_heap_entry *e = &m->slots[slot];
    uint64_t k = MLZ_HEAP_RESERVED;
    /* relaxed: nothing was written that a reader may look at. */
    if (atomic_compare_exchange_strong_explicit(&e->key, &k, MLZ_HEAP_TOMBSTONE,
                                                memory_order_relaxed, memory_order_relaxed)) {
        uint64_t pv = atomic_load_explicit(&e->pending, memory_order_relaxed);
        /* release: key TOMB before pending 0. If a remover took pending to
         * KILLED meanwhile, the CAS fails and that remover releases the slot. */
        if (pv != MLZ_HEAP_KILLED)
            atomic_compare_exchange_strong_explicit(&e->pending, &pv, 0, memory_order_release,
                                                    memory_order_relaxed);
        return;
    }
    /* A remover already killed this birth; acknowledging it is ours. */
    atomic_store_explicit(&e->pending, 0, memory_order_release);
}

/* remove's probe walk, which only reads: from probe *i on, the
 * next slot holding ptr (published, or RESERVED for it), or NULL when the
 * chain ends. Acquire loads pair with publish (fields) and reserve (pending).
 * On a hit *i is that probe's number, so a caller can go on from *i + 1. */
static mlz_heap_entry *find_from(const mlz_heapmap *m, uint64_t ptr, uint64_t *i)
{
    uint64_t home = home_of(m, ptr), limit = probe_limit(m);
    uint64_t reach = home_reach(m, home);
    if (reach < limit) limit = reach;
    for (; *i < limit; (*i)++) {
        mlz_heap_entry *e = &m->slots[probe_at(m, home, *i)];
        uint64_t k = atomic_load_explicit(&e->key, memory_order_acquire);
        if (k == ptr || (k == MLZ_HEAP_RESERVED &&
                         atomic_load_explicit(&e->pending, memory_order_acquire) == ptr))
            return e;
        if (k == MLZ_HEAP_EMPTY && chain_ends(e)) return NULL;
    }
    return NULL;
}

int mlz_heapmap_remove(mlz_heapmap *m, uint64_t ptr, mlz_heap_entry *out_copy)
{
    if (!is_pointer(ptr)) return 0;
    mlz_heap_entry *e;
    for (uint64_t i = 0; (e = find_from(m, ptr, &i)); i++) {
        switch (end_entry(e, ptr, out_copy)) {
        case END_LIVE:
            return 1;
        case END_BIRTH:
            stat_add(&m->death_during_birth, 1);
            if (out_copy) {
                memset(out_copy, 0, sizeof *out_copy);
                atomic_init(&out_copy->key, ptr);
            }
            return 1;
        case END_CANCELLED:
            return 0;
        default:
            continue; /* cancelled under us; ptr lives nowhere else */
        }
    }
    return 0;
}

size_t mlz_heapmap_foreach(const mlz_heapmap *m,
                           void (*cb)(const mlz_heap_entry *copy, void *arg), void *arg)
{
    size_t n = 0;
    for (uint64_t i = 0; i <= m->mask; i++) {
        mlz_heap_entry *e = &m->slots[i];
        mlz_heap_entry copy;
        /* acquire: pairs with publish, so a fresh entry's fields are visible. */
        uint64_t k = atomic_load_explicit(&e->key, memory_order_acquire);
        if (!is_pointer(k)) continue;
        copy_entry(e, &copy, k);
        /* A changed key means the slot was reused under us; check catches the
         * rest (key freed and re-published with the same pointer). */
        if (atomic_load_explicit(&e->key, memory_order_relaxed) != k) continue;
        if (!mlz_heap_entry_consistent(&copy)) continue;
        cb(&copy, arg);
        n++;
    }
    return n;
}
