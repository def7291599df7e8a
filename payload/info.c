/*
 * info.c - the exported memlyze_info (the contract in info.h), filled at compile time
 * from the real structures so it cannot drift from them.
 */
#include "info.h"
#include "payload.h"

#include <stddef.h>

extern _Atomic int mlz__attached;

static const char *const counter_names[] = {
    "samples", "frees_tracked", "ring_drops", "no_ring", "reentrant", "handler_allocs",
    "events_written", "spool_errors", "in_flight", "frees_lost", "disk_low_stops", "ring_waits", "rate_shift",
};
_Static_assert(sizeof counter_names / sizeof *counter_names == sizeof(mlz_counters) / sizeof(uint64_t),
               "every counter has a name");

#define A(x) ((uint64_t)(uintptr_t)&(x))

/* The sampler's thread-local state as an offset from the thread pointer:
 * initial-exec TLS, so the same in every thread; noted when the payload is
 * loaded, in whichever thread loads it. */
static int64_t sampler_tpoff;
__attribute__((constructor)) static void note_sampler_tpoff(void)
{
    sampler_tpoff = (int64_t)((uintptr_t)&mlz__tls.s - mlz_thread_pointer());
}

/* The descriptor's table of its own fields, for readers that cannot include
 * info.h. Every field after the fixed head is listed: test_proc checks that
 * the entries tile the struct exactly, so a field added to the struct but
 * not here fails the build's tests. */
#define FIELD(f) { #f, offsetof(struct memlyze_info, f), sizeof(((struct memlyze_info *)0)->f) }
static const struct memlyze_field info_fields[] = {
    FIELD(ready_addr), FIELD(attached_addr), FIELD(rate_addr), FIELD(pid_addr), FIELD(mono_to_real_addr),
    FIELD(session_addr), FIELD(map_slots_addr), FIELD(map_mask_addr), FIELD(stack_recs_addr),
    FIELD(stack_frames_addr), FIELD(stack_next_id_addr), FIELD(counters_addr), FIELD(counter_names_addr),
    FIELD(entry_size), FIELD(entry_key), FIELD(entry_size_field), FIELD(entry_stack_id), FIELD(entry_tid_shift),
    FIELD(entry_time_ns), FIELD(entry_seq), FIELD(entry_check), FIELD(check_algorithm),
    FIELD(rec_size), FIELD(rec_ready), FIELD(rec_depth), FIELD(rec_frames_offset), FIELD(max_frames),
    FIELD(ncounters), FIELD(map_log2_min), FIELD(map_log2_max), FIELD(entry_size_min), FIELD(record_size_max),
    FIELD(counters_max), FIELD(sampler_tpoff_addr), FIELD(sampler_countdown), FIELD(sampler_initialized),
    FIELD(sampler_rate_shift), FIELD(sampler_pad), FIELD(map_full_drops_addr),
};
_Static_assert(sizeof info_fields / sizeof *info_fields <= MEMLYZE_FIELDS_MAX, "field table within its bound");

MLZ_EXPORT const struct memlyze_info memlyze_info = {
    .magic = MEMLYZE_INFO_MAGIC,
    .version = MEMLYZE_INFO_VERSION,
    .size = sizeof(struct memlyze_info),
    .fields_addr = (uint64_t)(uintptr_t)info_fields,
    .nfields = sizeof info_fields / sizeof *info_fields,
    .field_size = sizeof(struct memlyze_field),
    .ready_addr = A(mlz__g.ready),
    .attached_addr = A(mlz__attached),
    .rate_addr = A(mlz__g.rate),
    .pid_addr = A(mlz__g.pid),
    .mono_to_real_addr = A(mlz__g.mono_to_real_ns),
    .map_slots_addr = A(mlz__g.map.slots),
    .map_mask_addr = A(mlz__g.map.mask),
    .map_full_drops_addr = A(mlz__g.map.full_drops),
    .entry_size = sizeof(mlz_heap_entry),
    .entry_key = offsetof(mlz_heap_entry, key),
    .entry_size_field = offsetof(mlz_heap_entry, size),
    .entry_stack_id = offsetof(mlz_heap_entry, stack_id),
    .entry_tid_shift = offsetof(mlz_heap_entry, tid),
    .entry_time_ns = offsetof(mlz_heap_entry, time_ns),
    .entry_seq = offsetof(mlz_heap_entry, seq),
    .entry_check = offsetof(mlz_heap_entry, check),
    .check_algorithm = MEMLYZE_CHECK_ALGORITHM,
    .stack_recs_addr = A(mlz__g.stacks.recs),
    .stack_frames_addr = A(mlz__g.stacks.frames),
    .stack_next_id_addr = A(mlz__g.stacks.next_id),
    .rec_size = sizeof(mlz_stack_rec),
    .rec_ready = offsetof(mlz_stack_rec, ready),
    .rec_depth = offsetof(mlz_stack_rec, depth),
    .rec_frames_offset = offsetof(mlz_stack_rec, frames_offset),
    .max_frames = MLZ_MAX_FRAMES,
    .counters_addr = A(mlz__g.c),
    .counter_names_addr = (uint64_t)(uintptr_t)counter_names,
    .ncounters = sizeof counter_names / sizeof *counter_names,
    .session_addr = A(mlz__g.session),
    .map_log2_min = MEMLYZE_MAP_LOG2_MIN,
    .map_log2_max = MEMLYZE_MAP_LOG2_MAX,
    .entry_size_min = MEMLYZE_ENTRY_SIZE_MIN,
    .record_size_max = MEMLYZE_RECORD_SIZE_MAX,
    .counters_max = MEMLYZE_COUNTERS_MAX,
    .sampler_tpoff_addr = A(sampler_tpoff),
    .sampler_countdown = offsetof(mlz_sampler_tls, countdown),
    .sampler_initialized = offsetof(mlz_sampler_tls, initialized),
    .sampler_rate_shift = offsetof(mlz_sampler_tls, rate_shift),
};
