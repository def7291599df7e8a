/*
 * snapshot.h - the live sampled heap of an attached process, as a .mlyze
 * file of kind "snapshot", read from outside without stopping it.
 */
#ifndef MLZ_SNAPSHOT_H
#define MLZ_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct snapshot_stats {
    size_t live;              /* consistent entries copied */
    size_t retried;           /* entries read again because they were changing */
    size_t skipped;           /* entries still inconsistent after the retries */
    size_t no_stack;          /* entries whose stack could not be read */
} snapshot_stats;

/* 0, or -1 with a one-line reason. Never replaces an existing OUT. */
int mlz_snapshot(pid_t pid, const char *out, int compress, snapshot_stats *st, char *err, size_t errlen);

/* What a snapshot keeps of each consistent entry. */
typedef struct snap_obj {
    uint64_t addr, size, time_ns;
    uint32_t stack_id, tid;
} snap_obj;
/* Called once the heap map and the stacks are copied, before symbolizing
 * and writing, with the entries in the order of the file's ALLOC events;
 * non-zero (with a reason in err) abandons the snapshot. */
typedef int (*snapshot_seen_fn)(const snap_obj *v, size_t n, void *arg, char *err, size_t errlen);

/* The same, with the keys of the jansson object `extra` added to the
 * file's metadata and `seen` told what was read (a heap dump: heapdump.c);
 * extra and seen may be NULL. */
int mlz_snapshot_meta(pid_t pid, const char *out, int compress, void *extra, snapshot_seen_fn seen, void *seen_arg,
                      snapshot_stats *st, char *err, size_t errlen);

#endif
