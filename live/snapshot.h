/*
 * snapshot.h - the live sampled heap of an attached process, as a .mlyze
 * file of kind "snapshot", read from outside without stopping it.
 */
#ifndef MLZ_SNAPSHOT_H
#define MLZ_SNAPSHOT_H

#include "finalize.h"

#include <stddef.h>
#include <sys/types.h>

typedef struct snapshot_stats {
    size_t live;              /* consistent entries copied */
    size_t retried;           /* entries read again because they were changing */
    size_t skipped;           /* entries still inconsistent after the retries */
    size_t no_stack;          /* entries whose stack could not be read */
} snapshot_stats;

/* One consistent live sample: where, how big, born when (the target's
 * monotonic clock), from which of the payload's stacks, on which thread,
 * sampled at which rate (the heap's rate << rate_shift: the payload raises
 * it under overload). */
typedef struct mlz_live_obj {
    uint64_t addr, size, time_ns;
    uint32_t stack_id;
    unsigned tid : 24, rate_shift : 8;
} mlz_live_obj;

/* The live samples of a process, read into memory (memlyze watch reads one
 * every refresh; memlyze snapshot writes one to a file). */
typedef struct mlz_live_heap {
    pid_t pid;
    pid_t via;                 /* the thread read through (mlz_proc_live_tid) */
    uint64_t rate;            /* the payload's mean sampling interval (1: exact) */
    uint64_t mono2real;       /* add to a time_ns for the real-time clock */
    uint64_t session;         /* the sampling session (memlyze_info v2): pairs snapshots in diff */
    uint64_t map_capacity;    /* the payload's heap map: slots */
    uint64_t map_full_drops;  /* samples it had no slot for (missing here if live) */
    /* The map is read while the program runs: how long that took, and how
     * many of the samples read were born meanwhile (as many freed meanwhile
     * may have been read before they were: the reports say so). */
    uint64_t read_us, born_while_read;
    mlz_live_obj *obj;        /* in birth order */
    size_t nobj;
    mlz_raw_stack *stacks;    /* each stack the objects name, once; ids are the payload's */
    size_t nstacks;
    uint32_t empty_id;        /* the stack of objects whose stack is unknown (changes per read) */
    mlz_raw_module *mods;     /* the process's modules */
    size_t nmods;
    struct mlz_proc_module *pm;   /* owns the modules' paths */
    void *extra;              /* a jansson object whose keys join the metadata, or NULL */
    snapshot_stats st;
    struct live_warm *warm;   /* the thread loading symbols meanwhile, or NULL */
} mlz_live_heap;

/* Reads the live samples without stopping the process. 0; -2 when the
 * process is gone or memlyze is not (or no longer) attached; -1 for any
 * other failure; both with a one-line reason. symbolize: h will be
 * written (mlz_live_write), so with two CPUs a second thread loads the
 * modules' symbols while the heap map is read. */
int  mlz_live_read(pid_t pid, mlz_live_heap *h, int symbolize, char *err, size_t errlen);
/* The .mlyze metadata (symbolized like finalize does) of some of h's
 * stacks, malloc'd in *meta. 0 or -1 with a reason. */
int  mlz_live_meta(mlz_live_heap *h, mlz_raw_stack *stacks, size_t nstacks, char **meta, size_t *len,
                   char *err, size_t errlen);
/* Writes h as a .mlyze of kind "snapshot"; never replaces an existing OUT. */
int  mlz_live_write(mlz_live_heap *h, const char *out, int compress, char *err, size_t errlen);
/* The same under memlyze.PID.N.mlyze in the current directory, the first
 * N not taken; the name is left in name. */
int  mlz_live_write_new(mlz_live_heap *h, int compress, char *name, size_t namelen, char *err, size_t errlen);
void mlz_live_free(mlz_live_heap *h);

/* Puts v[0..n) in birth order, by the microseconds the file will hold,
 * (time_ns + mono2real) / 1000; entries born in one microsecond keep their
 * order. *v is replaced by a new array. 0, or -1 out of memory. */
int mlz_live_sort_by_birth(mlz_live_obj **v, size_t n, uint64_t mono2real);

/* Read and write in one: 0, or -1 with a one-line reason. Never replaces an existing OUT. */
int mlz_snapshot(pid_t pid, const char *out, int compress, snapshot_stats *st, char *err, size_t errlen);

/* What heap dumps (heapdump.c) see of each entry. */
typedef mlz_live_obj snap_obj;
/* Called once the heap map and the stacks are copied, before symbolizing
 * and writing, with the entries in the order of the file's ALLOC events;
 * non-zero (with a reason in err) abandons the snapshot. */
typedef int (*snapshot_seen_fn)(const snap_obj *v, size_t n, void *arg, char *err, size_t errlen);
/* mlz_snapshot, with the keys of the jansson object `extra` added to the
 * file's metadata and `seen` told what was read (a heap dump); extra and
 * seen may be NULL. */
int mlz_snapshot_meta(pid_t pid, const char *out, int compress, void *extra, snapshot_seen_fn seen, void *seen_arg,
                      snapshot_stats *st, char *err, size_t errlen);

#endif
