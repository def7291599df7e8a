/*
 * heapseries.h - the estimated live heap of a trace over time, in one pass
 * and bounded memory, for `memlyze timeline`.
 *
 * Events are replayed as in profile.c (each sampled allocation weighs its
 * Horvitz-Thompson estimate, frees subtract it) into at most HS_BUCKETS
 * time buckets, each keeping the lowest, highest and last value seen in it,
 * so downsampling never hides a spike. Buckets start 1 µs wide; when an
 * event falls past the last one, neighbours are merged pairwise and the
 * width doubles, so a trace of any length ends with 512..1024 buckets.
 * MARKER events are kept as (time, name).
 */
#ifndef MLZ_HEAPSERIES_H
#define MLZ_HEAPSERIES_H

#include "mlz_format.h"

#define HS_BUCKETS 1024

typedef struct hs_bucket {
    int used;                 /* an event fell in it */
    double min, max, last;    /* live bytes */
    double last_var;          /* variance of `last` */
} hs_bucket;

typedef struct hs_marker {
    uint64_t t_us;
    const char *name;         /* from the metadata's functions; owned by the reader */
} hs_marker;

typedef struct heapseries {
    uint64_t start_us, end_us;  /* header start; last event */
    uint64_t width_us;          /* of one bucket */
    hs_bucket b[HS_BUCKETS];
    hs_marker *markers;
    size_t nmarkers, capmarkers;
    double peak, peak_var;
    uint64_t peak_us;
    double end_value, end_var;
    uint64_t events, allocs, frees, unmatched_frees;
    uint64_t rate;
} heapseries;

/* Replays all of r; 0, or -1 with *err (format error or out of memory). */
int  hs_build(heapseries *h, mlz_reader *r, mlz_error *err);
void hs_free(heapseries *h);

#endif
