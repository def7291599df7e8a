/*
 * info.h - the payload's contract with the outside, in one versioned
 * header: everything a tool outside the process relies on to find, load,
 * call and read the payload.
 *
 *  - how it is recognised: the memfd name the injector loads it from, the
 *    file name prefix, the name of its drain thread;
 *  - its entry points (payload/attach.c), called by the injector;
 *  - the description of its data, struct memlyze_info, exported as the
 *    data symbol `memlyze_info`: where its heap map and stack table are and
 *    how they are laid out, so that readers (memlyze snapshot/watch/serve
 *    with process_vm_readv, the gdb and lldb scripts through their memory
 *    APIs) never hard-code an offset;
 *  - the bounds a reader may trust and the check word that tells it a
 *    heap-map entry was copied whole (memlyze_check_word).
 *
 * A change to any of it bumps MEMLYZE_INFO_VERSION (or moves an offset in
 * the descriptor), and the readers follow or refuse. The Python scripts
 * cannot include this file: they read the descriptor's own table of its
 * fields (struct memlyze_field), take the bounds from it too, and implement
 * check algorithm MEMLYZE_CHECK_ALGORITHM, the one thing they must know.
 *
 * All addresses are in the profiled process. Fields are fixed-width so the
 * layout is the same for every reader.
 */
#ifndef MLZ_INFO_H
#define MLZ_INFO_H

#include <stdint.h>

#define MEMLYZE_INFO_MAGIC   "MLZINFO"  /* 8 bytes with the NUL */
#define MEMLYZE_INFO_VERSION 7   /* 2: session_addr; 3: map_log2_max; 4: the field table;
                                    5: entry_tid_shift (was entry_tid); 6: check algorithm 2;
                                    7: the sampler's thread-local state;
                                    8: map_full_drops_addr */
#define MEMLYZE_INFO_SYMBOL  "memlyze_info"

/* How the payload appears in a process: /proc/PID/maps shows the memfd
 * as "/memfd:memlyze-payload (deleted)", a file as libmemlyze*.so. */
#define MEMLYZE_MEMFD_NAME     "memlyze-payload"
#define MEMLYZE_PAYLOAD_PREFIX "libmemlyze"
/* Its drain thread's name (prctl PR_SET_NAME, at most 15 characters): the
 * injector may borrow that thread while it idles. */
#define MEMLYZE_DRAIN_THREAD_NAME "memlyze-drain"

/* Entry points (payload/attach.c): int memlyze_attach(const char *config),
 * int memlyze_detach(void), const char *memlyze_strerror(int code),
 * int memlyze_attach_stats(int *modules, int *slots). */
#define MEMLYZE_ENTRY_ATTACH       "memlyze_attach"
#define MEMLYZE_ENTRY_DETACH       "memlyze_detach"
#define MEMLYZE_ENTRY_STRERROR     "memlyze_strerror"
#define MEMLYZE_ENTRY_ATTACH_STATS "memlyze_attach_stats"
#define MEMLYZE_ENTRY_INLINE_SITES "memlyze_inline_sites"   /* inline_sites.h */

/* Named allocators (--hook): memlyze_attach's "hook=KIND:SYMBOL:ADDR:SIZE"
 * (hex; "exe+VALUE" for an address in the executable; ADDR and SIZE may be
 * left out to look SYMBOL up among exported functions), $MEMLYZE_HOOKS the
 * same, comma-separated. A KIND names the arguments the function takes. */
#define MEMLYZE_HOOK_KIND_NAMES "malloc", "free", "calloc", "realloc", "memalign", "aligned_alloc", "posix_memalign"
#define MEMLYZE_HOOK_KINDS { MEMLYZE_HOOK_KIND_NAMES }
#define MEMLYZE_HOOK_KINDS_TEXT "malloc, free, calloc, realloc, memalign, aligned_alloc, posix_memalign"
#define MEMLYZE_NAMED_HOOKS_MAX 16
#define MEMLYZE_HOOK_NAME_MAX 256     /* a --hook symbol's bytes, its NUL included (C++ names are long) */

/* A heap-map entry's entry_tid_shift word: the thread id in its low 24
 * bits (Linux keeps tids below 2^22), and in the top 8 the shift of the
 * rate the sample was taken at: rate_addr's rate << shift. The payload
 * raises the shift under overload, never past MEMLYZE_RATE_SHIFT_MAX. */
#define MEMLYZE_TID_MASK        0xffffffu
#define MEMLYZE_TID_SHIFT_POS   24
#define MEMLYZE_RATE_SHIFT_MAX  20

/* The heap map has 2^log2 slots, log2 in [MIN, MAX] ($MEMLYZE_MAP_LOG2). */
#define MEMLYZE_MAP_LOG2_MIN 8
#define MEMLYZE_MAP_LOG2_MAX 28

/* The map size (log2) for up to n live samples (--max-live of memlyze-attach
 * and memlyze run): twice n, since blocks close in memory share homes and a
 * dense heap of small blocks fills the map from 60% on (docs/DESIGN.md); 0 if
 * n is beyond the largest map. */
static inline unsigned memlyze_map_log2_for(unsigned long long n)
{
    for (unsigned l = MEMLYZE_MAP_LOG2_MIN; l <= MEMLYZE_MAP_LOG2_MAX; l++)
        if (n <= (1ull << l) / 2) return l;
    return 0;
}
/* Bounds a reader checks before it trusts the descriptor's sizes. */
#define MEMLYZE_ENTRY_SIZE_MIN 56
#define MEMLYZE_RECORD_SIZE_MAX 4096
#define MEMLYZE_COUNTERS_MAX 256

/* The check word of a heap-map entry, algorithm 2: the fields weighted by
 * odd constants and summed (mod 2^64), through one 64-bit finalizer
 * (MurmurHash3's fmix64). A reader that copies an entry while it is being
 * written sees a check that does not match: a change in one field always
 * changes the sum (an odd weight times a nonzero difference is nonzero mod
 * 2^64), and the finalizer is a bijection. The products are independent, so
 * the word costs one finalizer's latency; algorithm 1 chained five
 * finalizers, about 70 cycles on every sampled allocation. The finalizer is
 * spelled out here rather than taken from core/platform.h (mlz_fmix64, the
 * hash tables' mixer) on purpose: the contract stands alone, and retuning
 * the tables' hash must not change algorithm 2. */
#define MEMLYZE_CHECK_ALGORITHM 2
static inline uint64_t memlyze_check_fmix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h;
}
static inline uint64_t memlyze_check_word(uint64_t key, uint64_t size, uint32_t stack_id, uint32_t tid,
                                          uint64_t time_ns, uint64_t seq)
{
    uint64_t h = 0x6D6C7A6865617032ull; /* "mlzheap2" */
    h += key * 0xE3635A7FA9A7B469ull;
    h += size * 0xDFDF6B53FB88D607ull;
    h += (((uint64_t)stack_id << 32) | tid) * 0xFDAA349F5741EBF1ull;
    h += time_ns * 0xB1E4C0BB51AFCE77ull;
    h += seq * 0xC8624383FEA3DD59ull;
    return memlyze_check_fmix(h);
}

/* One entry of the descriptor's table of its own fields (version 4). */
struct memlyze_field {
    char     name[24];             /* NUL-terminated, e.g. "map_slots_addr" */
    uint32_t offset;               /* in struct memlyze_info */
    uint32_t width;                /* 4 or 8: a little-endian unsigned value */
};
#define MEMLYZE_FIELDS_MAX 128

/*
 * The descriptor describes itself. Its first 32 bytes (magic, version, size,
 * fields_addr, nfields, field_size) stay where they are in every later
 * version; fields_addr points at nfields memlyze_field entries (field_size
 * bytes apart) naming each other field with its offset and width. C readers
 * include this header; the Python scripts, which cannot, read the head and
 * then every value by name, so they carry no copy of this layout. A field
 * whose meaning changes gets a new name.
 */
struct memlyze_info {
    char     magic[8];
    uint32_t version;
    uint32_t size;                 /* sizeof(struct memlyze_info) */
    uint64_t fields_addr;          /* const struct memlyze_field[nfields] */
    uint32_t nfields;
    uint32_t field_size;           /* sizeof(struct memlyze_field) */

    /* Whether there is anything to read, and how to interpret it. */
    uint64_t ready_addr;           /* int: data structures exist */
    uint64_t attached_addr;        /* int: sampling (GOT mode) or 0 */
    uint64_t rate_addr;            /* uint64_t sampling rate in bytes */
    uint64_t pid_addr;             /* int32 */
    uint64_t mono_to_real_addr;    /* uint64_t: realtime ns = monotonic ns + this */
    /* uint64_t, different for every sampling session (attach, or the
     * child of a followed fork): snapshots of one session share samples. */
    uint64_t session_addr;

    /* Live-heap map: slots is a pointer to capacity entries of entry_size. */
    uint64_t map_slots_addr;       /* address of the pointer to the slots */
    uint64_t map_mask_addr;        /* address of the uint64_t capacity - 1 */

    /* Stack table: recs[id] of rec_size, frames[] of uint64_t PCs. */
    uint64_t stack_recs_addr;      /* address of the pointer to the records */
    uint64_t stack_frames_addr;    /* address of the pointer to the frame arena */
    uint64_t stack_next_id_addr;   /* address of the uint32_t next id */

    /* Statistics: ncounters consecutive uint64_t; names[i] is a C string. */
    uint64_t counters_addr;
    uint64_t counter_names_addr;   /* array of ncounters string addresses */

    /* Heap-map entry layout. */
    uint32_t entry_size;
    uint32_t entry_key, entry_size_field, entry_stack_id, entry_tid_shift;
    uint32_t entry_time_ns, entry_seq, entry_check;
    uint32_t check_algorithm;      /* MEMLYZE_CHECK_ALGORITHM: memlyze_check_word */

    /* Stack record layout. */
    uint32_t rec_size, rec_ready, rec_depth, rec_frames_offset;
    uint32_t max_frames;
    uint32_t ncounters;

    /* The bounds above, for readers that cannot include this header. */
    uint32_t map_log2_min, map_log2_max;
    uint32_t entry_size_min, record_size_max, counters_max;

    /* Every thread's sampler state (static TLS: the same offset from each
     * thread's pointer, x86_64's fs base): a re-attach resets it in every
     * thread it holds stopped, so that no thread goes on with a countdown
     * drawn at the last session's rate (injector/resample.c). */
    uint64_t sampler_tpoff_addr;   /* int64: the state's address - thread pointer */
    uint32_t sampler_countdown;    /* int64 countdown, in the state */
    uint32_t sampler_initialized;  /* uint32: 0 = draw afresh at the next allocation */
    uint32_t sampler_rate_shift;   /* uint32: the thread's overload shift */
    uint32_t sampler_pad;

    /* Samples the heap map had no slot for (uint64): live ones are missing
     * from a snapshot, whose estimates are then low. */
    uint64_t map_full_drops_addr;
};


/* 1 if a descriptor copied from a process is one this header describes,
 * with every field a reader uses inside its record. */
static inline int memlyze_info_readable(const struct memlyze_info *in)
{
    int ok = in->version == MEMLYZE_INFO_VERSION && in->size == sizeof *in && in->nfields <= MEMLYZE_FIELDS_MAX &&
             in->check_algorithm == MEMLYZE_CHECK_ALGORITHM && in->entry_size >= MEMLYZE_ENTRY_SIZE_MIN &&
             in->entry_size <= MEMLYZE_RECORD_SIZE_MAX && in->rec_size > 0 && in->rec_size <= MEMLYZE_RECORD_SIZE_MAX &&
             in->ncounters <= MEMLYZE_COUNTERS_MAX && in->map_log2_max <= MEMLYZE_MAP_LOG2_MAX;
    ok = ok && in->entry_key + 8 <= in->entry_size && in->entry_size_field + 8 <= in->entry_size &&
         in->entry_stack_id + 4 <= in->entry_size && in->entry_tid_shift + 4 <= in->entry_size &&
         in->entry_time_ns + 8 <= in->entry_size && in->entry_seq + 8 <= in->entry_size &&
         in->entry_check + 8 <= in->entry_size;
    return ok && in->rec_ready + 4 <= in->rec_size && in->rec_depth + 4 <= in->rec_size &&
           in->rec_frames_offset + 8 <= in->rec_size;
}

#endif
