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

/* The series being built: the live objects, the running estimate, and the
 * bucket of the last event (b_idx, starting b_lo microseconds in). */
typedef struct hs_state {
    heapseries *h;
    const mlz_meta *m;
    addrmap live;
    ratetab rates;
    double v, var;
    uint64_t b_idx, b_lo;
} hs_state;

static void record(hs_state *s, uint64_t t, double v, double var)
{
    heapseries *h = s->h;
    uint64_t off = t > h->start_us ? t - h->start_us : 0;
    /* Most events fall in the last one's bucket, and skip the two 64-bit
     * divisions. (Unsigned: off before b_lo wraps and recomputes; buckets
     * only change here.) */
    if (off - s->b_lo >= h->width_us) {
        while (off / h->width_us >= HS_BUCKETS) merge_pairs(h);
        s->b_idx = off / h->width_us;
        s->b_lo = s->b_idx * h->width_us;
    }
    hs_bucket *b = &h->b[s->b_idx];
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

/* One event at time t (its fields as the reader gives them); -1 when out
 * of memory. Inlined into both loops: as a call it was a fifth of the
 * replay. */
static inline __attribute__((always_inline)) int apply(hs_state *s, int type, uint64_t t, uint64_t addr, uint64_t size, uint16_t thread,
                 uint64_t name_id)
{
    heapseries *h = s->h;
    h->events++;
    h->end_us = t;
    if (type == MLZ_EV_ALLOC) {
        int had;
        addr_obj *o = addrmap_slot(&s->live, addr, &had);
        if (!o) return -1;
        if (had) {   /* allocated again without a FREE we saw: the old one is gone */
            s->v -= mlz_weight_bytes(o->size, s->rates.v[o->rate_idx]);
            s->var -= mlz_var_bytes(o->size, s->rates.v[o->rate_idx]);
        }
        *o = (addr_obj){ addr, size, t, 0, thread, (uint8_t)s->rates.cur };
        s->v += mlz_weight_bytes(size, s->rates.v[s->rates.cur]);
        s->var += mlz_var_bytes(size, s->rates.v[s->rates.cur]);
        h->allocs++;
    } else if (type == MLZ_EV_FREE) {
        addr_obj *o = addrmap_find(&s->live, addr);
        if (!o) { h->unmatched_frees++; return 0; }
        s->v -= mlz_weight_bytes(o->size, s->rates.v[o->rate_idx]);
        s->var -= mlz_var_bytes(o->size, s->rates.v[o->rate_idx]);
        addrmap_remove_at(&s->live, o);
        h->frees++;
    } else {
        if (type != MLZ_EV_MARKER) return 0;
        ratetab_marker(&s->rates, s->m, name_id);
        if (h->nmarkers == h->capmarkers) {
            size_t cap = h->capmarkers ? h->capmarkers * 2 : 16;
            hs_marker *nm = realloc(h->markers, cap * sizeof *nm);
            if (!nm) return -1;
            h->markers = nm;
            h->capmarkers = cap;
        }
        const char *name = mlz_meta_function(s->m, name_id);
        h->markers[h->nmarkers++] = (hs_marker){ t, name ? name : "marker" };
        return 0;
    }
    /* Exact zero when nothing is live: no floating-point residue. */
    if (s->live.count == 0) s->v = s->var = 0;
    if (s->var < 0) s->var = 0;
    record(s, t, s->v, s->var);
    return 0;
}

/* Split-stream files a block of columns at a time (no event built), the
 * others event by event: 0 at the end, -1 on error. */
static int replay(hs_state *s, mlz_reader *r, mlz_error *err)
{
    int rc;
    if (!(mlz_reader_header(r)->flags & MLZ_FLAG_SPLIT)) {
        mlz_event ev;
        while ((rc = mlz_reader_next(r, &ev, err)) == 1)
            if (apply(s, ev.type, ev.time_us, ev.addr, ev.size, ev.thread, ev.name_id))
                return fail(err, "out of memory");
        return rc;
    }
    mlz_block_view b;
    while ((rc = mlz_reader_next_block(r, &b, err)) == 1) {
        uint64_t t = b.base_us;
        uint32_t a = 0, f = 0, o = 0;
        for (uint32_t i = 0; i < b.n; i++) {
            t += b.delta[i];
            int k = b.kind[i], bad;
            if (k == MLZ_EV_ALLOC) bad = apply(s, k, t, b.a_addr[a], b.a_size[a], b.a_thread[a], 0), a++;
            else if (k == MLZ_EV_FREE) bad = apply(s, k, t, b.f_addr[f++], 0, 0, 0);
            else bad = apply(s, k, t, 0, 0, 0, b.o_name[o++]);
            if (bad) return fail(err, "out of memory");
        }
    }
    return rc;
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
    hs_state s = { .h = h, .m = m };
    if (addrmap_init(&s.live)) return fail(err, "out of memory");
    ratetab_init(&s.rates, h->rate);
    int rc = replay(&s, r, err);
    addrmap_free(&s.live);
    h->end_value = s.v;
    h->end_var = s.var;
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
