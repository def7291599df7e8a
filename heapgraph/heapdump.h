/*
 * heapdump.h - every live object of a process profiled in exact mode, with
 * its bytes and its roots, as a .arc stream plus the .mlyze snapshot that
 * says what each object is (docs/FORMAT.md "Heap dumps").
 */
#ifndef MLZ_HEAPDUMP_H
#define MLZ_HEAPDUMP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct hd_stats {
    size_t objects;           /* heap objects dumped */
    uint64_t bytes;           /* their bytes */
    size_t roots;             /* root pieces: globals, stacks, registers, TLS */
    size_t threads;
    size_t skipped;           /* heap map entries caught mid-update (not dumped) */
    size_t unreadable;        /* objects whose bytes could not be read (zeros) */
    uint64_t pause_us;        /* how long every thread was stopped */
    uint64_t id;              /* the dump id both files carry */
} hd_stats;

/* Stop the threads only while the roots (registers, stacks, globals) are
 * read; the heap map and the objects are then read while the program runs. */
#define HD_SHORT_PAUSE 1

/* Writes arc_path and mlyze_path (neither may exist yet); on failure
 * neither is left behind. 0, or -1 with a one-line reason in err. */
int hd_dump(pid_t pid, const char *arc_path, const char *mlyze_path, int flags, hd_stats *st, char *err,
            size_t errlen);

/* X.arc -> X.mlyze (the snapshot beside a dump); 0, or -1 if the name is
 * too long. */
int hd_mlyze_name(const char *arc_path, char *out, size_t len);

#endif
