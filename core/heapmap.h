/*
 * heapmap.h - lock-free open-addressing map of sampled, still-live
 * allocations: pointer -> (size, stack, thread, birth time, sequence).
 *
 * Written from malloc/free hooks of the profiled process (no locks, no
 * malloc), read in-process by mlz_heapmap_foreach() and out-of-process by the
 * reader, which copies the slot array with process_vm_readv and keeps only
 * entries for which mlz_heap_entry_consistent() holds.
 *
 * Workload: one insert per sample (~every 512 KiB allocated), one remove per
 * free that passes the Bloom filter. The state machine is described in
 * heapmap.c above mlz_heapmap_reserve().
 */
#ifndef MLZ_HEAPMAP_H
#define MLZ_HEAPMAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

/* Values of mlz_heap_entry.key other than a published pointer. */
#define MLZ_HEAP_EMPTY     0ull          /* never used: ends every probe chain */
#define MLZ_HEAP_RESERVED  1ull          /* an insert is in progress */
#define MLZ_HEAP_TOMBSTONE UINT64_MAX    /* freed; reusable by a later insert */

/* Value of mlz_heap_entry.pending while the slot's entry is being removed. */
#define MLZ_HEAP_KILLED    UINT64_MAX

/* Longest probe sequence an insert may walk (slots, not bytes). */
#define MLZ_HEAPMAP_MAX_PROBE 128

/*
 * One slot, one cache line. Only `key` and `pending` are read-modify-written
 * concurrently; the other fields are written by the inserting thread while
 * the slot is RESERVED and published by the release CAS of `key`.
 *
 * pending: 0 when the slot is free (key EMPTY or TOMBSTONE), the pointer from
 * the moment an insert claims the slot until its entry dies (through RESERVED
 * and while published), MLZ_HEAP_KILLED while a remover finishes the kill.
 *
 * check: mlz_heap_entry_check() of the other fields; lets a reader that
 * copies the slot without any atomicity reject torn or stale copies.
 */
typedef struct mlz_heap_entry {
    _Alignas(MLZ_CACHELINE) _Atomic uint64_t key;
    _Atomic uint64_t pending;
    uint64_t size;      /* requested bytes, full 64 bits */
    uint32_t stack_id;
    uint32_t tid;
    uint64_t time_ns;   /* CLOCK_MONOTONIC at birth */
    uint64_t seq;       /* birth number in its thread: with tid, one birth */
    uint64_t check;
    /* Not part of the entry: the slot as a home. The longest probe (a
     * count) of any insert whose home is this slot, so every entry of a
     * pointer with this home lies within `reach` probes of it: lookups and
     * the stale scan stop there (heapmap.c). Only grows; readers outside
     * the process ignore it (info.h describes the entry's fields alone). */
    _Atomic uint64_t reach;
} mlz_heap_entry;

_Static_assert(sizeof(mlz_heap_entry) == 64, "mlz_heap_entry must be one cache line");

typedef struct mlz_heapmap {
    mlz_heap_entry *slots;  /* 2^log2_cap entries, mmap'd */
    uint64_t mask;          /* capacity - 1 */
    unsigned log2_cap;
    /* Written only when it grows: on this read-mostly line, not on the
     * statistics' line. */
    _Atomic uint64_t max_probe;           /* longest insert probe of any home (statistics) */
    /* Statistics of rare events, all relaxed: nothing is ordered by them.
     * Inserts and removes are not counted here: a locked add per event cost
     * exact mode 3% (the rings count samples and frees; tests count live
     * entries with mlz_heapmap_foreach). */
    _Alignas(MLZ_CACHELINE) _Atomic uint64_t full_drops;  /* reserve found no free slot */
    _Atomic uint64_t death_during_birth;  /* freed while RESERVED */
    _Atomic uint64_t stale_replaced;      /* same pointer found live at reserve */
} mlz_heapmap;

/* 0 on success, -1 if log2_cap is out of [4, 40] or mmap fails. */
int mlz_heapmap_init(mlz_heapmap *m, unsigned log2_cap);
/* Only when no other thread can touch the map any more. */
void mlz_heapmap_destroy(mlz_heapmap *m);

/* Starts fetching ptr's home slot for writing, so that a reserve made a
 * little later (after the stack walk) finds it in cache. */
void mlz_heapmap_prefetch(const mlz_heapmap *m, uint64_t ptr);

/* Claim a slot for ptr (not 0, 1 or UINT64_MAX). Returns the slot index, or
 * -1 when the probe sequence has no free slot (counted in full_drops). */
int64_t mlz_heapmap_reserve(mlz_heapmap *m, uint64_t ptr);

/* Fill and publish a reserved slot. 1 = published; 0 = ptr was freed while
 * the slot was RESERVED (death during birth): nothing is published and the
 * slot is released. Call exactly once per successful reserve, or cancel. */
int mlz_heapmap_publish(mlz_heapmap *m, int64_t slot, uint64_t ptr, uint64_t size,
                        uint32_t stack_id, uint32_t tid, uint64_t time_ns, uint64_t seq);

/* How many probes from ptr's home an entry for ptr may lie: the longest
 * insert probe of that home so far (0: none yet). */
uint64_t mlz_heapmap_reach(const mlz_heapmap *m, uint64_t ptr);

/* Give up a reservation (instead of publish). */
void mlz_heapmap_cancel(mlz_heapmap *m, int64_t slot);

/* Free path. Removes ptr if published (out_copy gets its fields) or kills
 * its in-progress insert (out_copy gets key=ptr, other fields 0). Returns 1
 * if something was removed. out_copy may be NULL. Only reads until it finds
 * ptr: a pointer that is not in the map (a Bloom false positive) costs no
 * write. */
int mlz_heapmap_remove(mlz_heapmap *m, uint64_t ptr, mlz_heap_entry *out_copy);

/* Calls cb with a private, consistent copy of every published entry; the
 * callback may not touch the map. Returns the number of entries yielded.
 * Entries inserted or removed during the walk may or may not be seen. */
size_t mlz_heapmap_foreach(const mlz_heapmap *m,
                           void (*cb)(const mlz_heap_entry *copy, void *arg), void *arg);

uint64_t mlz_heap_entry_check(uint64_t key, uint64_t size, uint32_t stack_id,
                              uint32_t tid, uint64_t time_ns, uint64_t seq);
/* 1 only if copy holds a published pointer whose check matches its fields. */
int mlz_heap_entry_consistent(const mlz_heap_entry *copy);

#endif
