/*
 * snapshot.h - the live sampled heap of an attached process, as a .mlyze
 * file of kind "snapshot", read from outside without stopping it.
 */
#ifndef MLZ_SNAPSHOT_H
#define MLZ_SNAPSHOT_H

#include <stddef.h>
#include <sys/types.h>

typedef struct snapshot_stats {
    size_t live;              /* consistent entries copied */
    size_t retried;           /* entries read again because they were changing */
    size_t skipped;           /* entries still inconsistent after the retries */
    size_t no_stack;          /* entries whose stack could not be read */
} snapshot_stats;

/* 0, or -1 with a one-line reason. Never replaces an existing OUT. */
int mlz_snapshot(pid_t pid, const char *out, int compress, snapshot_stats *st, char *err, size_t errlen);

/* The same, with the keys of the jansson object `extra` added to the
 * file's metadata (a heap dump's link to its .arc); extra may be NULL. */
int mlz_snapshot_meta(pid_t pid, const char *out, int compress, void *extra, snapshot_stats *st, char *err,
                      size_t errlen);

#endif
