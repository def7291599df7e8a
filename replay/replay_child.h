/*
 * replay_child.h - the replaying process: runs a plan's ops with whatever
 * malloc the process was started with (LD_PRELOAD) and measures it.
 */
#ifndef MLZ_REPLAY_CHILD_H
#define MLZ_REPLAY_CHILD_H

#include <stdint.h>
#include <stdio.h>

typedef struct replay_result {
    uint64_t time_ns;         /* the replay loop, wall clock */
    uint64_t baseline_kib;    /* RSS before the first op (the replayer itself) */
    uint64_t hwm_kib;         /* peak RSS of the process (VmHWM) */
    uint64_t rss_peak_kib;    /* RSS right after the op where live bytes peak */
    uint64_t rss_end_kib;     /* RSS after the last op (blocks still live) */
    uint64_t minflt, majflt;  /* page faults during the loop */
    char library[256];        /* the object malloc resolved to */
} replay_result;

/* The child's entry: argv = { fd, nops, nslots, nworkers, peak_op, timing }.
 * Prints the result as one line on stdout; 0, or 1 after one line on stderr. */
int  replay_child_main(int argc, char **argv);
/* Parses the child's line; 0, or -1. */
int  replay_result_parse(const char *line, replay_result *r);

#endif
