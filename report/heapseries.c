/*
 * heapseries.c - see heapseries.h.
 */
#include "heapseries.h"
#include "addrmap.h"
#include "ratetab.h"
#include "sampler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void merge_pairs(heapseries *h)
{
    for (size_t i = 0; i < HS_BUCKETS / 2; i++) {
        hs_bucket a = h->b[2 * i], c = h->b[2 * i + 1], n = a;
        if (a.used && c.used) {
            n.min = a.min < c.min ? a.min : c.min;
            n.max = a.max > c.max ? a.max : c.max;
            n.last = c.last;
            n.last_var = c.last_var;
        } else if (c.used) {
            n = c;
        }
        h->b[i] = n;
    }
    memset(&h->b[HS_BUCKETS / 2], 0, sizeof h->b / 2);
    h->width_us *= 2;
}

static void record(heapseries *h, uint64_t t, double v, double var)
{
    uint64_t off = t > h->start_us ? t - h->start_us : 0;
    while (off / h->width_us >= HS_BUCKETS) merge_pairs(h);
    hs_bucket *b = &h->b[off / h->width_us];
    if (!b->used) {
        b->used = 1;
        b->min = b->max = v;
    } else {
        if (v < b->min) b->min = v;
        if (v > b->max) b->max = v;
    }
    b->last = v;
    b->last_var = var;
    if (v > h->peak) { h->peak = v; h->peak_var = var; h->peak_us = t; }
}

static int fail(mlz_error *err, const char *msg)
{
    snprintf(err->msg, sizeof err->msg, "%s", msg);
    err->rule = MLZ_RULE_IO;
    return -1;
}

int hs_build(heapseries *h, mlz_reader *r, mlz_error *err)
{
    const mlz_meta *m = mlz_reader_meta(r);
    memset(h, 0, sizeof *h);
    if (m->kind && !strcmp(m->kind, "spool"))
        return fail(err, "this is a raw spool; turn it into a profile with memlyze finalize");
    h->rate = m->rate ? m->rate : 1;
    h->start_us = h->end_us = mlz_reader_header(r)->start_us;
    h->width_us = 1;
    addrmap live;
    if (addrmap_init(&live)) return fail(err, "out of memory");
    ratetab rates;
    ratetab_init(&rates, h->rate);

    double v = 0, var = 0;
    mlz_event ev;
    int rc;
    while ((rc = mlz_reader_next(r, &ev, err)) == 1) {
        h->events++;
        h->end_us = ev.time_us;
        if (ev.type == MLZ_EV_ALLOC) {
            addr_obj o = { ev.addr, ev.size, ev.time_us, 0, ev.thread, (uint8_t)rates.cur }, old;
            int had = addrmap_put(&live, &o, &old);
            if (had < 0) { rc = fail(err, "out of memory"); break; }
            if (had) {   /* allocated again without a FREE we saw: the old one is gone */
                v -= mlz_weight_bytes(old.size, rates.v[old.rate_idx]);
                var -= mlz_var_bytes(old.size, rates.v[old.rate_idx]);
            }
            v += mlz_weight_bytes(ev.size, rates.v[rates.cur]);
            var += mlz_var_bytes(ev.size, rates.v[rates.cur]);
            h->allocs++;
        } else if (ev.type == MLZ_EV_FREE) {
            addr_obj o;
            if (!addrmap_take(&live, ev.addr, &o)) { h->unmatched_frees++; continue; }
            v -= mlz_weight_bytes(o.size, rates.v[o.rate_idx]);
            var -= mlz_var_bytes(o.size, rates.v[o.rate_idx]);
            h->frees++;
        } else if (ev.type == MLZ_EV_MARKER) {
            ratetab_marker(&rates, m, ev.name_id);
            if (h->nmarkers == h->capmarkers) {
                size_t cap = h->capmarkers ? h->capmarkers * 2 : 16;
                hs_marker *nm = realloc(h->markers, cap * sizeof *nm);
                if (!nm) { rc = fail(err, "out of memory"); break; }
                h->markers = nm;
                h->capmarkers = cap;
            }
            const char *name = mlz_meta_function(m, ev.name_id);
            h->markers[h->nmarkers++] = (hs_marker){ ev.time_us, name ? name : "marker" };
            continue;
        } else {
            continue;
        }
        /* Exact zero when nothing is live: no floating-point residue. */
        if (live.count == 0) v = var = 0;
        if (var < 0) var = 0;
        record(h, ev.time_us, v, var);
    }
    addrmap_free(&live);
    h->end_value = v;
    h->end_var = var;
    if (rc < 0) {
        hs_free(h);
        return -1;
    }
    return 0;
}

void hs_free(heapseries *h)
{
    free(h->markers);
    h->markers = NULL;
    h->nmarkers = h->capmarkers = 0;
}
