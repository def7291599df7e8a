/*
 * dumpalloc.h - the dumpalloc trace format (docs/FORMAT.md, "dumpalloc"):
 * little-endian records, each a FOURCC and a 32-bit length of what follows,
 * so readers skip what they do not know. PROC (pid, name), OBJE (object
 * path), ALOC (address, timestamp) followed by a chain of FRAM records
 * (NTVE address, PCAL function/file/line, ..., TERM), DALC (address).
 * memlyze adds ASIZ (address, size) before an ALOC: dumpalloc has no sizes.
 */
#ifndef MLZ_DUMPALLOC_H
#define MLZ_DUMPALLOC_H

#include "import_trace.h"

#include <stddef.h>
#include <stdint.h>

/* What an import met that it could read past: counted, reported by the
 * command as warnings. */
typedef struct dumpalloc_counts {
    uint64_t records, allocs, frees, frames;
    uint64_t unknown_records;  /* record types skipped by their length */
    uint64_t unknown_frames;   /* FRAM kinds skipped by their length */
    uint64_t stray_frames;     /* FRAM records outside an ALOC's chain */
    uint64_t chains_without_term;
    uint64_t unknown_frees;    /* DALC of an address not allocated (dropped) */
    uint64_t sized, unsized;   /* allocations with / without an ASIZ record */
    uint64_t bad_nanos;        /* timestamps with nanoseconds >= 10^9 (clamped) */
} dumpalloc_counts;

typedef struct dumpalloc_info {
    int64_t pid;               /* PROC, -1 if absent */
    char *process;             /* PROC's name, NULL if absent (malloc'd) */
    char *objects_json;        /* {"dumpalloc_objects":[...]} from OBJE records (malloc'd) */
    dumpalloc_counts n;
} dumpalloc_info;

/* Parses a whole dumpalloc file into t. 0, or -1 with err (a record running
 * past the end, a malformed known record, out of memory), naming the byte
 * offset. info is filled in both cases; free it with dumpalloc_info_free. */
int  dumpalloc_parse(const uint8_t *buf, size_t len, imp_trace *t, dumpalloc_info *info, char *err, size_t errlen);
void dumpalloc_info_free(dumpalloc_info *info);

#endif
