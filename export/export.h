/*
 * export.h - what one `memlyze export` format is given: the profile replayed
 * from the input (most formats write estimates per site) and the input's
 * path (formats that write the event stream itself read it again).
 * A format is one writer file plus one row in cmd_export.c's table.
 */
#ifndef MLZ_EXPORT_H
#define MLZ_EXPORT_H

#include "report.h"

#include <stdio.h>

/* How dumpalloc export writes frames (--frames). */
enum export_frames {
    EXPORT_FRAMES_SYMBOLS,    /* PCAL (function, file, line) where symbolized, else NTVE */
    EXPORT_FRAMES_NATIVE,     /* NTVE addresses only */
};

typedef struct export_job {
    FILE *f;                  /* the output, opened by the command */
    const char *path;         /* the input file */
    const prof *p;            /* the input replayed (up to --at) */
    uint64_t start_us;        /* the recording's start */
    uint64_t moment_us;       /* the moment described: --at, else the last event */
    uint64_t until_us;        /* --at, or UINT64_MAX */
    enum rep_metric metric;   /* --metric */
    enum export_frames frames;/* --frames */
    char *err;                /* one line on failure */
    size_t errlen;
} export_job;

/* Every writer: 0, or -1 with j->err set. */
typedef int (*export_fn)(const export_job *j);

/* For the formats that write every event (dumpalloc, heaptrack): the input
 * opened again, or NULL with j->err; a sampled trace is refused, as such
 * files hold every allocation. */
mlz_reader *export_open_events(const export_job *j, const char *format);

int dumpalloc_export(const export_job *j);
int heaptrack_export(const export_job *j);

#endif
