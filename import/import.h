/*
 * import.h - what one `memlyze import` format provides: a function that
 * turns the input file's bytes into an imported trace. A format is one
 * reader file plus one row in cmd_import.c's table.
 */
#ifndef MLZ_IMPORT_H
#define MLZ_IMPORT_H

#include "import_trace.h"

typedef struct import_job {
    const char *path;         /* the input, for messages */
    const uint8_t *data;      /* its bytes */
    size_t len;
    imp_trace *t;             /* filled by the importer */
    imp_info info;            /* pid, exe, source, extra metadata */
    char *owned[4];           /* strings info points to, freed by the command */
    char notes[1024];         /* counted warnings, one per line */
    char err[320];            /* one line on failure */
} import_job;

/* Every importer: 0, or -1 with job->err set. */
typedef int (*import_fn)(import_job *job);

int dumpalloc_import(import_job *job);
int heaptrack_import(import_job *job);


/* Appends one line to job->notes (printf style). */
void import_note(import_job *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
