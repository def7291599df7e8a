/*
 * finalize.h - spool (raw PCs, written inside the target) to symbolized
 * .mlyze trace (written here, outside it).
 */
#ifndef MLZ_FINALIZE_H
#define MLZ_FINALIZE_H

#include "symbolize.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A stack as raw return addresses, and a module as it was mapped. */
typedef struct mlz_raw_stack {
    uint64_t id;
    uint32_t depth;
    uint64_t *pcs;            /* leaf first */
    uint32_t seg;             /* which image (exec segment) it belongs to */
    uint64_t t_us;            /* when an allocation had it (picks the module
                               * map of that time, if a library was unloaded) */
    uint32_t view;            /* finalize's own: the module map it is read in */
} mlz_raw_stack;

typedef struct mlz_raw_module {
    uint64_t start, size, bias;
    uint8_t build_id[64];
    size_t blen;
    char *path;
    uint64_t gone_us;         /* when it was seen unloaded; 0: never */
    int superseded;           /* another module was loaded over its addresses */
} mlz_raw_module;

/* Encodings of the event stream a trace is written in (--format, -z). */
enum { MLZ_ENC_V1 = 0, MLZ_ENC_LZ4 = 1, MLZ_ENC_SPLIT = 2 };
/* "v1", "lz4" (v1 in LZ4 blocks) or "split"; -1 for anything else. */
int mlz_encoding_parse(const char *name);
/* The writer's header flags for an encoding. */
unsigned mlz_encoding_flags(int encoding);

/* 0, or -1 with a one-line reason in err. Never leaves a partial OUT.
 * kind: "trace" (a recording) or "snapshot" (the live heap at one moment).
 * encoding: MLZ_ENC_*. */
int mlz_finalize(const char *spool, const char *out, const char *kind, int encoding, int replace,
                 char *err, size_t errlen);

/* What a finalized trace holds, in numbers (memlyze run's one-line summary). */
typedef struct mlz_fin_summary {
    uint64_t allocs, alloc_bytes;   /* ALLOC events and their bytes, all images */
    uint64_t live, live_bytes;      /* still allocated at the end of the trace */
    size_t images;                  /* segments stitched: 1 + execs followed */
    int unprofiled_exec;            /* the last exec went to an image without the payload */
} mlz_fin_summary;

/* The segments of one process, in exec order (the payload's PATH, PATH.exec1,
 * ...; FORMAT.md, "Spools"), stitched into one trace: each exec becomes a
 * MARKER naming the new command line, and the allocations the old image still
 * held end (FREE) at that moment. Stack ids and module tables stay apart per
 * image. pid: the process's number here if it may still run (0: the
 * spools' own): while it does, module paths name files in its mount
 * namespace (a container) and are looked up there first. sum may be NULL. */
int mlz_finalize_segments(const char *const *spools, size_t n, const char *out, const char *kind,
                          int encoding, int replace, pid_t pid, mlz_fin_summary *sum, char *err, size_t errlen);

/* A symbolizer for the modules of one image (sym_free it), or NULL.
 * proc_root: the live target's "/proc/PID/root" (its paths name files in
 * its own mount namespace), or NULL. */
symbolizer *mlz_symbolizer_for(const mlz_raw_module *mods, size_t nmods, const char *proc_root);

/* The metadata for stacks and modules already in memory (memlyze
 * snapshot): symbolized like mlz_finalize does; root supplies the copied
 * keys (rate, pid, exe, cmdline, clock, memlyze, counters) and "functions" (marker
 * names, kept under their ids). sym: a symbolizer for mods made by
 * mlz_symbolizer_for (and still the caller's), or NULL for a new one (with
 * proc_root, as mlz_symbolizer_for's).
 * *meta is malloc'd. 0 or -1 with err. */
int mlz_symbolized_meta(mlz_raw_stack *stacks, size_t nstacks, mlz_raw_module *mods, size_t nmods,
                        symbolizer *sym, const char *proc_root, json_t *root, const char *kind, char **meta,
                        size_t *len, char *err, size_t errlen);

#endif
