/*
 * replay_ops.c - see replay_ops.h.
 */
#include "replay_ops.h"
#include "addrmap.h"
#include "errbuf.h"
#include "growbuf.h"
#include "ratetab.h"
#include "sampler.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The builder's state: ops go out through a buffer; slots are reused from
 * a free list; each live trace address maps to its first slot and copy
 * count (addr_obj.size holds the block size, .site the first slot,
 * .thread the copies of a weighted sample, .time_us unused). */
typedef struct builder {
    replay_plan *p;
    FILE *out;
    addrmap live;
    uint32_t *free_slots;
    size_t nfree, capfree;
    uint16_t workers[65536];  /* recorded thread + 1 -> worker + 1 */
    uint64_t first_us;
    int have_first;
    uint64_t live_bytes;
    ratetab rates;            /* the rate each ALLOC was sampled at */
} builder;

static int put(builder *b, const replay_op *op)
{
    if (fwrite(op, sizeof *op, 1, b->out) != 1) return -1;
    b->p->nops++;
    return 0;
}

static int64_t slot_take(builder *b)
{
    if (b->nfree) return b->free_slots[--b->nfree];
    if (b->p->nslots >= UINT32_MAX) return -1;
    return (int64_t)b->p->nslots++;
}

static int slot_give(builder *b, uint32_t s)
{
    if (grow_to((void **)&b->free_slots, &b->capfree, b->nfree + 1, sizeof *b->free_slots)) return -1;
    b->free_slots[b->nfree++] = s;
    return 0;
}

static void note_live(builder *b, int64_t delta)
{
    b->live_bytes += (uint64_t)delta;
    if (b->live_bytes > b->p->peak_live) {
        b->p->peak_live = b->live_bytes;
        b->p->peak_op = b->p->nops - 1;
    }
}

static uint16_t worker_of(builder *b, uint16_t thread)
{
    if (!b->workers[thread]) b->workers[thread] = (uint16_t)++b->p->nworkers;
    return (uint16_t)(b->workers[thread] - 1);
}

/* Frees every copy of the block o (taken from the live map at addr). */
static int free_copies(builder *b, const addr_obj *o, uint64_t addr, uint16_t worker, uint64_t t)
{
    uint32_t copies = o->thread ? o->thread : 1;
    for (uint32_t i = 0; i < copies; i++) {
        addr_obj c = *o;
        if (i > 0 && !addrmap_take(&b->live, addr ^ ((uint64_t)i << 48), &c)) continue;
        replay_op op = { .kind = RP_FREE, .worker = worker, .slot = c.site, .time_us = t };
        if (put(b, &op) || slot_give(b, c.site)) return -1;
        note_live(b, -(int64_t)c.size);
    }
    return 0;
}

/* One recorded allocation: `copies` blocks (1 unless weighted). */
static int on_alloc(builder *b, const mlz_event *ev, uint16_t worker, uint64_t t)
{
    /* The address came back without a recorded free: the old block was
     * freed (the trace missed it), so the replay frees it too, every copy,
     * before the new one's copies take their keys and its bytes count. */
    addr_obj old;
    if (addrmap_take(&b->live, ev->addr, &old) && free_copies(b, &old, ev->addr, worker, t)) return -1;
    uint32_t copies = 1;
    if (b->p->weighted) {
        double w = mlz_weight_count(ev->size, b->rates.v[b->rates.cur]);
        copies = w < 1 ? 1 : w > 65535 ? 65535 : (uint32_t)lround(w);
    }
    int64_t first = -1;
    for (uint32_t i = 0; i < copies; i++) {
        int64_t s = slot_take(b);
        if (s < 0) return -1;
        if (first < 0) first = s;
        replay_op op = { .kind = RP_MALLOC, .worker = worker, .slot = (uint32_t)s, .size = ev->size, .time_us = t };
        if (put(b, &op)) return -1;
        note_live(b, (int64_t)ev->size);
        /* Each further copy's slot is kept under a key derived from the
         * address, so the free finds them all. */
        if (i > 0) {
            addr_obj c = { .addr = ev->addr ^ ((uint64_t)i << 48), .size = ev->size, .site = (uint32_t)s };
            if (addrmap_put(&b->live, &c, NULL) < 0) return -1;
        }
    }
    addr_obj o = { .addr = ev->addr, .size = ev->size, .site = (uint32_t)first, .thread = (uint16_t)copies };
    if (addrmap_put(&b->live, &o, NULL) < 0) return -1;
    b->p->allocs++;
    return 0;
}

static int on_free(builder *b, uint64_t addr, uint16_t worker, uint64_t t, addr_obj *o)
{
    if (!addrmap_take(&b->live, addr, o)) {
        b->p->unknown_frees++;
        return 1;
    }
    b->p->frees++;
    return free_copies(b, o, addr, worker, t);
}

int replay_plan_build(const char *path, int weighted, replay_plan *plan, char *err, size_t errlen)
{
    memset(plan, 0, sizeof *plan);
    plan->fd = -1;
    mlz_error e = { 0 };
    mlz_reader *r = mlz_reader_open(path, 0, &e);
    if (!r) return errbuf_set(err, errlen, "%s", e.msg);
    const mlz_meta *m = mlz_reader_meta(r);
    plan->rate = m->rate ? m->rate : 1;
    if (m->kind && strcmp(m->kind, "trace")) {
        /* m is the reader's: said before it is closed */
        errbuf_set(err, errlen, "a %s, not a trace: only a trace has the stream to replay", m->kind);
        mlz_reader_close(r);
        return -1;
    }
    if (plan->rate > 1 && !weighted)
        return mlz_reader_close(r),
               errbuf_set(err, errlen, "a sampled trace (rate %llu) holds one allocation in many: its replay would not be "
                    "the program's; --force replays each sample weight times, as an estimate",
                    (unsigned long long)plan->rate);
    plan->weighted = plan->rate > 1;

    builder *b = calloc(1, sizeof *b);
    int rc = -1;
    if (!b || addrmap_init(&b->live)) {
        free(b);
        mlz_reader_close(r);
        return errbuf_set(err, errlen, "out of memory");
    }
    b->p = plan;
    ratetab_init(&b->rates, plan->rate);
    plan->fd = memfd_create("memlyze-replay", MFD_CLOEXEC);
    if (plan->fd < 0 || !(b->out = fdopen(dup(plan->fd), "w"))) {
        errbuf_set(err, errlen, "memfd: %s", strerror(errno));
        goto out;
    }
    mlz_event ev;
    int k;
    uint16_t cur = 0;
    while ((k = mlz_reader_next(r, &ev, &e)) > 0) {
        if (ev.type == MLZ_EV_MARKER) ratetab_marker(&b->rates, m, ev.name_id);
        /* Address 0: a failed allocation, or free(NULL): nothing to replay. */
        if ((ev.type != MLZ_EV_ALLOC && ev.type != MLZ_EV_FREE) || ev.addr == 0) continue;
        if (!b->have_first) b->first_us = ev.time_us, b->have_first = 1;
        uint64_t t = ev.time_us - b->first_us;
        addr_obj o;
        if (ev.type == MLZ_EV_ALLOC) {
            cur = worker_of(b, ev.thread);
            if (on_alloc(b, &ev, cur, t)) goto oom;
        } else if (on_free(b, ev.addr, cur, t, &o) < 0) {
            goto oom;
        }
    }
    if (k < 0) {
        errbuf_set(err, errlen, "%s at byte %llu: %s", mlz_rule_name(e.rule), (unsigned long long)e.offset, e.msg);
        goto out;
    }
    if (fflush(b->out) || ferror(b->out)) {
        errbuf_set(err, errlen, "writing the replay plan: %s", strerror(errno));
        goto out;
    }
    if (plan->nworkers == 0) plan->nworkers = 1;
    plan->live_at_end = b->live_bytes;
    rc = 0;
    goto out;
oom:
    errbuf_set(err, errlen, "out of memory (or memfd space) building the replay");
out:
    if (b->out) fclose(b->out);
    addrmap_free(&b->live);
    free(b->free_slots);
    free(b);
    mlz_reader_close(r);
    if (rc) replay_plan_free(plan);
    return rc;
}

void replay_plan_free(replay_plan *plan)
{
    if (plan->fd >= 0) close(plan->fd);
    plan->fd = -1;
}
