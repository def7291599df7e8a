/*
 * profile.h - replays a .mlyze event stream into per-site estimates.
 *
 * A site is one symbolized call chain: stacks that differ only in return
 * addresses that resolve to the same function, file and line are merged. Each sampled allocation carries a
 * Horvitz-Thompson weight from the file's sampling rate (core/sampler.h):
 * estimated bytes s/p and count 1/p with p = 1 - exp(-(s+1)/rate), and the
 * matching variances give the 95% intervals. With rate 1 (exact mode) or no
 * rate at all (a plain v1 file) every weight is 1 and the interval is zero.
 */
#ifndef MLZ_PROFILE_H
#define MLZ_PROFILE_H

#include "addrmap.h"
#include "mlz_format.h"
#include "ratetab.h"

typedef struct est {
    double value, var;        /* estimate and its variance */
} est;

typedef struct prof_site {
    const mlz_stack *stack;
    uint64_t samples;         /* ALLOC events at this site */
    uint64_t live_samples;
    est alloc_bytes, alloc_count, live_bytes, live_count;
    double peak_bytes;        /* the site's own highest live estimate */
    uint64_t peak_us;
    est temp_bytes, temp_count;   /* freed within opts.temp_us of their birth */
    est old_bytes, old_count;     /* live at the end and older than opts.age_us */
} prof_site;

typedef struct prof_opts {
    uint64_t from_us;         /* events before this only build the live set */
    uint64_t until_us;        /* stop after this time (UINT64_MAX: the end) */
    uint64_t temp_us;         /* lifetime up to which a block is "temporary" */
    uint64_t age_us;          /* age from which a live block counts as old */
} prof_opts;

typedef struct prof {
    const mlz_meta *meta;
    uint64_t rate;            /* 1 = exact; the metadata's, where the trace starts */
    ratetab rates;            /* the rates ALLOCs were sampled at (ratetab.h) */
    prof_site *sites;         /* parallel to meta->stacks; only canonical ones are used */
    uint32_t *site_of;        /* stack index -> canonical site (same symbolized frames) */
    uint64_t last_stack;      /* the last ALLOC's stack id and its site, when last_stack_ok */
    uint32_t last_site;
    int last_stack_ok;
    size_t nsites;
    uint64_t count[5];        /* ALLOC, FREE, GC, MARKER, extensions */
    uint64_t enc_bytes[5];    /* encoded bytes per kind */
    uint64_t unmatched_frees, replaced_allocs;
    uint64_t first_us, last_us, events;
    est live_bytes, live_count;
    uint64_t live_samples;
    double peak_bytes;
    uint64_t peak_us;
    addrmap live;
} prof;

/* Replays r's events up to and including time until_us (UINT64_MAX: all).
 * 0 on success, -1 with *err (a format error or out of memory). */
int  prof_replay(prof *p, mlz_reader *r, uint64_t until_us, mlz_error *err);
int  prof_replay_opts(prof *p, mlz_reader *r, const prof_opts *o, mlz_error *err);
/* "func|file|line;..." of a site's frames: the identity of a site across
 * files (diff), independent of ids and addresses. Returns the length. */
size_t prof_site_key(const mlz_meta *m, const mlz_stack *st, char *buf, size_t len);
/* "func (file:line)" of one frame; prof_frame_name adds " [inlined]" for
 * a frame inlined into the next one. */
void prof_frame_label(const mlz_meta *m, const mlz_frame *f, char *buf, size_t len);
void prof_frame_name(const mlz_meta *m, const mlz_frame *f, char *buf, size_t len);
void prof_free(prof *p);
double est_ci95(const est *e);   /* half-width of the 95% interval */

#endif
