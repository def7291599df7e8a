/*
 * info.h - the description of the payload's data that tools read from
 * OUTSIDE the process (memlyze-snapshot with process_vm_readv, the gdb and
 * lldb scripts through their memory APIs), so that they never hard-code an
 * offset: a payload change bumps MEMLYZE_INFO_VERSION or moves an offset
 * here, and the readers follow or refuse.
 *
 * All addresses are in the profiled process. Fields are fixed-width so the
 * layout is the same for every reader. Exported as the data symbol
 * `memlyze_info`.
 */
#ifndef MLZ_INFO_H
#define MLZ_INFO_H

#include <stdint.h>

#define MEMLYZE_INFO_MAGIC   "MLZINFO"  /* 8 bytes with the NUL */
#define MEMLYZE_INFO_VERSION 2   /* 2: session_addr */

struct memlyze_info {
    char     magic[8];
    uint32_t version;
    uint32_t size;                 /* sizeof(struct memlyze_info) */

    /* Whether there is anything to read, and how to interpret it. */
    uint64_t ready_addr;           /* int: data structures exist */
    uint64_t attached_addr;        /* int: sampling (GOT mode) or 0 */
    uint64_t rate_addr;            /* uint64_t sampling rate in bytes */
    uint64_t pid_addr;             /* int32 */
    uint64_t mono_to_real_addr;    /* uint64_t: realtime ns = monotonic ns + this */

    /* Live-heap map: slots is a pointer to capacity entries of entry_size. */
    uint64_t map_slots_addr;       /* address of the pointer to the slots */
    uint64_t map_mask_addr;        /* address of the uint64_t capacity - 1 */
    uint32_t entry_size;
    uint32_t entry_key, entry_size_field, entry_stack_id, entry_tid;
    uint32_t entry_time_ns, entry_seq, entry_check;
    uint32_t check_algorithm;      /* 1: mlz_heap_entry_check of heapmap.c v1 */

    /* Stack table: recs[id] of rec_size, frames[] of uint64_t PCs. */
    uint64_t stack_recs_addr;      /* address of the pointer to the records */
    uint64_t stack_frames_addr;    /* address of the pointer to the frame arena */
    uint64_t stack_next_id_addr;   /* address of the uint32_t next id */
    uint32_t rec_size, rec_ready, rec_depth, rec_frames_offset;
    uint32_t max_frames;

    /* Statistics: ncounters consecutive uint64_t; names[i] is a C string. */
    uint64_t counters_addr;
    uint64_t counter_names_addr;   /* array of ncounters string addresses */
    uint32_t ncounters;
    uint32_t pad;

    /* uint64_t, different for every sampling session (attach, or the
     * child of a followed fork): snapshots of one session share samples. */
    uint64_t session_addr;
};

#endif
