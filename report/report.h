/*
 * report.h - what the report writers share (export, flamegraph, timeline):
 * the metric a report is sized by, the --at moment, frame names and
 * addresses, and output files that appear only once complete.
 */
#ifndef MLZ_REPORT_H
#define MLZ_REPORT_H

#include "profile.h"

#include <stdio.h>

enum rep_metric {
    REP_LIVE,        /* estimated live bytes at the end (or at --at) */
    REP_ALLOCATED,   /* estimated bytes allocated over the recording */
    REP_COUNT,       /* estimated number of allocations */
};

/* 0 and *m for "live", "allocated" or "count"; -1 otherwise. */
int  rep_parse_metric(const char *s, enum rep_metric *m);
const char *rep_metric_name(enum rep_metric m);      /* "live bytes", ... */
const est  *rep_site_est(const prof_site *s, enum rep_metric m);
/* Formats an estimate of metric m: "97.7 KiB" or "100 allocations". */
const char *rep_fmt_value(enum rep_metric m, double v, char *buf, size_t len);

/* --at TIME, read by cli_parse_time: seconds since the start of the
 * recording ("2.5") or an absolute timestamp in µs since the epoch. The
 * syntax is checked with the options (a usage error), the moment resolved
 * once the file's start is known. */
typedef struct rep_at {
    const char *s;            /* NULL: not given */
} rep_at;
int      rep_parse_at(const char *s, rep_at *at);   /* 0, or -1 on bad syntax */
uint64_t rep_at_until(const rep_at *at, uint64_t start_us);   /* UINT64_MAX when unset */

/* The function's name, "??" when unknown. */
const char *rep_func(const mlz_meta *m, const mlz_frame *f);
/* The frame's runtime address: the module's load bias + its module-relative
 * address (finalize stores pc - bias); 0 when unknown. */
uint64_t rep_frame_pc(const mlz_meta *m, const mlz_frame *f);
uint64_t rep_module_bias(const mlz_meta *m, size_t module);

#endif
