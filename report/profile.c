/*
 * profile.c - see profile.h.
 */
#include "profile.h"
#include "sampler.h"
#include "varint.h"

#include <jansson.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double est_ci95(const est *e)
{
    return e->var > 0 ? 1.96 * sqrt(e->var) : 0;
}

static void sub_var(est *e, double var)
{
    e->var -= var;
    if (e->var < 0) e->var = 0;
}

static int kind_of(int type)
{
    return type <= MLZ_EV_MARKER ? type : 4;
}

int prof_replay(prof *p, mlz_reader *r, uint64_t until_us, mlz_error *err)
{
    prof_opts o = { 0, until_us, 0, UINT64_MAX };
    return prof_replay_opts(p, r, &o, err);
}

/* An object's Horvitz-Thompson weights and their variances (exact: none). */
typedef struct weights { double wb, wc, vb, vc; int exact; } weights;

/* Exact traces weigh every object 1. Sampled ones repeat a few sizes: the
 * last weights of each size (direct-mapped by size) spare the exp() calls. */
static inline weights weights_of(uint64_t size, uint64_t rate)
{
    if (rate <= 1) return (weights){ (double)size, 1, 0, 0, 1 };
    static __thread struct { uint64_t size, rate; weights w; } cache[1024];
    __typeof__(cache[0]) *c = &cache[(size ^ (size >> 10)) & 1023];
    if (c->size != size || c->rate != rate) {
        c->w = (weights){ mlz_weight_bytes(size, rate), mlz_weight_count(size, rate), mlz_var_bytes(size, rate),
                          mlz_var_count(size, rate), 0 };
        c->size = size;
        c->rate = rate;
    }
    return c->w;
}

/* weights_of for the replay loops, where exact is a constant in each copy
 * (every rate so far is 1): the literal lets the compiler drop every
 * variance step that follows. */
static inline weights weights_at(uint64_t size, uint64_t rate, const int exact)
{
    return exact ? (weights){ (double)size, 1, 0, 0, 1 } : weights_of(size, rate);
}

/* One object more in the sums b (bytes) and c (count). Exact weights have
 * no variance: the variances are left alone (adding 0 changes nothing). */
static inline void add_w(est *b, est *c, const weights *w)
{
    b->value += w->wb;
    c->value += w->wc;
    if (w->exact) return;
    b->var += w->vb;
    c->var += w->vc;
}

/* Objects still live at the end that are older than age_us. */
typedef struct { prof *p; uint64_t before; } old_ctx;
static void count_old(const addr_obj *o, void *arg)
{
    old_ctx *c = arg;
    if (o->time_us > c->before) return;
    prof_site *s = &c->p->sites[o->site];
    weights w = weights_of(o->size, c->p->rates.v[o->rate_idx]);
    add_w(&s->old_bytes, &s->old_count, &w);
}

/* One object more (sign 1) or less (-1) in the live heap of s and of p.
 * Exact weights have no variance: the variances are left alone (adding or
 * taking 0 would change nothing; they are never negative). */
static inline void live_move(prof *p, prof_site *s, const weights *w, int sign)
{
    double b = sign * w->wb, c = sign * w->wc;
    s->live_bytes.value += b;
    s->live_count.value += c;
    p->live_bytes.value += b;
    p->live_count.value += c;
    if (w->exact) return;
    if (sign > 0) {
        s->live_bytes.var += w->vb;
        s->live_count.var += w->vc;
        p->live_bytes.var += w->vb;
        p->live_count.var += w->vc;
    } else {
        sub_var(&s->live_bytes, w->vb);
        sub_var(&s->live_count, w->vc);
        sub_var(&p->live_bytes, w->vb);
        sub_var(&p->live_count, w->vc);
    }
}

static int oom(mlz_error *err)
{
    snprintf(err->msg, sizeof err->msg, "out of memory");
    err->rule = MLZ_RULE_IO;
    return -1;
}

/* Stacks with the same symbolized frames are one site for people (an
 * unrolled loop calls malloc from several addresses of one line): site_of
 * maps each stack to the first stack of its site. */
static int merge_sites(prof *p)
{
    json_t *seen = json_object();
    if (!seen) return -1;
    for (size_t i = 0; i < p->nsites; i++) {
        const mlz_stack *st = &p->meta->stacks[i];
        p->sites[i].stack = st;
        char key[4096];
        size_t n = 0;
        for (uint32_t j = 0; j < st->depth && n < sizeof key - 40; j++)
            n += (size_t)snprintf(key + n, sizeof key - n, "%u,%u,%u;", st->frames[j].func_id,
                                  st->frames[j].file_id, st->frames[j].line);
        key[n] = 0;
        json_t *v = json_object_get(seen, key);
        p->site_of[i] = v ? (uint32_t)json_integer_value(v) : (uint32_t)i;
        if (!v) json_object_set_new(seen, key, json_integer((json_int_t)i));
    }
    json_decref(seen);
    return 0;
}

static int prof_init(prof *p, mlz_reader *r, mlz_error *err)
{
    memset(p, 0, sizeof *p);
    p->meta = mlz_reader_meta(r);
    if (p->meta->kind && !strcmp(p->meta->kind, "spool")) {
        snprintf(err->msg, sizeof err->msg, "this is a raw spool; turn it into a profile with memlyze finalize");
        err->rule = MLZ_RULE_IO;
        return -1;
    }
    p->rate = p->meta->rate ? p->meta->rate : 1;
    ratetab_init(&p->rates, p->rate);
    p->nsites = p->meta->nstacks;
    p->sites = calloc(p->nsites ? p->nsites : 1, sizeof *p->sites);
    p->site_of = calloc(p->nsites ? p->nsites : 1, sizeof *p->site_of);
    if (!p->sites || !p->site_of || addrmap_init(&p->live) || merge_sites(p)) return oom(err);
    p->first_us = p->last_us = mlz_reader_header(r)->start_us;
    return 0;
}

/* An ALLOC: live at its site from now on; counted as allocated inside the
 * window. An address allocated again without a FREE we saw ends the old
 * object first. (on_alloc and on_free are inlined into both replay loops:
 * as calls they cost 35-40 instructions per event, a tenth of `stats`.) */
static inline __attribute__((always_inline)) int
on_alloc(prof *p, uint64_t addr, uint64_t size, uint64_t stack_id, uint16_t thread, uint64_t t_us, int in_window,
         const int exact)
{
    /* Runs of ALLOCs from one stack are common: the last one's site. */
    if (!p->last_stack_ok || stack_id != p->last_stack) {
        const mlz_stack *st = mlz_meta_stack(p->meta, stack_id);
        p->last_site = p->site_of[st - p->meta->stacks];
        p->last_stack = stack_id;
        p->last_stack_ok = 1;
    }
    uint32_t si = p->last_site;
    prof_site *s = &p->sites[si];
    weights w = weights_at(size, p->rates.v[p->rates.cur], exact);
    int had;
    addr_obj *o = addrmap_slot(&p->live, addr, &had);
    if (!o) return -1;
    if (had) {
        weights ow = weights_of(o->size, p->rates.v[o->rate_idx]);
        live_move(p, &p->sites[o->site], &ow, -1);
        p->sites[o->site].live_samples--;
        p->live_samples--;
        p->replaced_allocs++;
    }
    *o = (addr_obj){ addr, size, t_us, si, thread, (uint8_t)p->rates.cur };
    s->live_samples++;
    p->live_samples++;
    if (in_window) {
        s->samples++;
        add_w(&s->alloc_bytes, &s->alloc_count, &w);
    }
    live_move(p, s, &w, 1);
    if (s->live_bytes.value > s->peak_bytes) { s->peak_bytes = s->live_bytes.value; s->peak_us = t_us; }
    if (p->live_bytes.value > p->peak_bytes) { p->peak_bytes = p->live_bytes.value; p->peak_us = t_us; }
    return 0;
}

/* A FREE of a recorded object: it leaves the live heap, and counts as
 * temporary when it lived at most temp_us inside the window. */
static inline __attribute__((always_inline)) void
on_free(prof *p, uint64_t addr, uint64_t t_us, int in_window, uint64_t temp_us, const int exact)
{
    addr_obj *o = addrmap_find(&p->live, addr);
    if (!o) {
        p->unmatched_frees++;   /* allocated before recording, or not sampled */
        return;
    }
    prof_site *s = &p->sites[o->site];
    uint64_t rate = p->rates.v[o->rate_idx], size = o->size, born = o->time_us;
    addrmap_remove_at(&p->live, o);
    weights w = weights_at(size, rate, exact);
    if (in_window && t_us - born <= temp_us) add_w(&s->temp_bytes, &s->temp_count, &w);
    live_move(p, s, &w, -1);
    /* Exact zero when nothing is left: no floating-point residue. */
    if (--s->live_samples == 0) s->live_bytes = s->live_count = (est){ 0, 0 };
    if (--p->live_samples == 0) p->live_bytes = p->live_count = (est){ 0, 0 };
}

static inline void count_event(prof *p, int type, size_t len, uint64_t t_us)
{
    int k = kind_of(type);
    p->count[k]++;
    p->enc_bytes[k] += len;
    p->events++;
    p->last_us = t_us;
}

/* Event by event (v1 and LZ4 files). 1 at the end of the window, 0 at the
 * end of the trace, -1 on error. */
static int replay_events(prof *p, mlz_reader *r, const prof_opts *opt, mlz_error *err)
{
    mlz_event ev;
    int rc;
    while ((rc = mlz_reader_next(r, &ev, err)) == 1) {
        if (ev.time_us > opt->until_us) return 1;
        /* Before the window: only the live set is built (what was allocated
         * earlier and is freed inside the window must still be matched). */
        int in_window = ev.time_us >= opt->from_us;
        count_event(p, ev.type, ev.enc_len, ev.time_us);
        if (ev.type == MLZ_EV_ALLOC) {
            if (on_alloc(p, ev.addr, ev.size, ev.stack_id, ev.thread, ev.time_us, in_window, 0)) return oom(err);
        } else if (ev.type == MLZ_EV_FREE) {
            on_free(p, ev.addr, ev.time_us, in_window, opt->temp_us, 0);
        } else if (ev.type == MLZ_EV_MARKER) {
            ratetab_marker(&p->rates, p->meta, ev.name_id);
        }
    }
    return rc;
}

/* One block of columns: the same steps as replay_events without building
 * an event (the v1 length of an ALLOC or FREE follows from its fields).
 * 1 at the end of the window, -1 out of memory, else 0.
 * fast (a constant in each copy): a block of ALLOCs and FREEs alone,
 * replayed with no end to the window while the only rate seen is 1 (an
 * exact trace). Its weights are the sizes themselves (weights_at), and it
 * is counted whole after its loop, with the byte totals the decoder gives,
 * not event by event. Its sums are the same, in the same order. */
static inline __attribute__((always_inline)) int
replay_block(prof *p, const mlz_block_view *b, const prof_opts *opt, const int fast)
{
    /* In locals: the stores into p would otherwise make the compiler load
     * the columns' pointers (and the window) again at every event. */
    const uint8_t *restrict kind = b->kind;
    const uint64_t *restrict delta = b->delta, *restrict a_addr = b->a_addr, *restrict a_size = b->a_size,
                   *restrict a_stack = b->a_stack, *restrict f_addr = b->f_addr;
    const uint16_t *restrict a_thread = b->a_thread;
    const uint64_t from_us = opt->from_us, until_us = opt->until_us, temp_us = opt->temp_us;
    const uint32_t n = b->n;
    uint64_t t = b->base_us;
    uint32_t a = 0, f = 0, o = 0;
    for (uint32_t i = 0; i < n; i++) {
        t += delta[i];
        if (!fast && t > until_us) return 1;
        int in_window = t >= from_us;
        int type = kind[i];
        size_t len = 0;
        if (type == MLZ_EV_ALLOC) {
            if (!fast) len = mlz_v1_alloc_len(delta[i], a_size[a], a_stack[a]);
            if (on_alloc(p, a_addr[a], a_size[a], a_stack[a], a_thread[a], t, in_window, fast)) return -1;
            a++;
        } else if (fast || type == MLZ_EV_FREE) {
            if (!fast) len = mlz_v1_free_len(delta[i]);
            on_free(p, f_addr[f++], t, in_window, temp_us, fast);
        } else {
            if (type == MLZ_EV_MARKER) ratetab_marker(&p->rates, p->meta, b->o_name[o]);
            len = b->o_len[o++];
        }
        if (!fast) count_event(p, type, len, t);
    }
    if (fast && b->n) {
        p->count[MLZ_EV_ALLOC] += b->nalloc;
        p->count[MLZ_EV_FREE] += b->nfree;
        p->enc_bytes[MLZ_EV_ALLOC] += b->alloc_v1_bytes;
        p->enc_bytes[MLZ_EV_FREE] += b->free_v1_bytes;
        p->events += b->n;
        p->last_us = t;
    }
    return 0;
}

static __attribute__((noinline)) int replay_block_fast(prof *p, const mlz_block_view *b, const prof_opts *opt)
{
    return replay_block(p, b, opt, 1);
}

static __attribute__((noinline)) int replay_block_any(prof *p, const mlz_block_view *b, const prof_opts *opt)
{
    return replay_block(p, b, opt, 0);
}

/* Split-stream files, a block of columns at a time. */
static int replay_blocks(prof *p, mlz_reader *r, const prof_opts *opt, mlz_error *err)
{
    mlz_block_view b;
    int rc;
    while ((rc = mlz_reader_next_block(r, &b, err)) == 1) {
        int fast = p->rates.n == 1 && p->rates.v[0] <= 1 && b.n == b.nalloc + b.nfree && opt->until_us == UINT64_MAX;
        int end = fast ? replay_block_fast(p, &b, opt) : replay_block_any(p, &b, opt);
        if (end < 0) return oom(err);
        if (end) return 1;
    }
    return rc;
}

int prof_replay_opts(prof *p, mlz_reader *r, const prof_opts *opt, mlz_error *err)
{
    if (prof_init(p, r, err)) return -1;
    int rc = mlz_reader_header(r)->flags & MLZ_FLAG_SPLIT ? replay_blocks(p, r, opt, err)
                                                          : replay_events(p, r, opt, err);
    if (rc < 0) return -1;
    if (opt->age_us != UINT64_MAX && p->last_us > opt->age_us) {
        old_ctx c = { p, p->last_us - opt->age_us };
        addrmap_each(&p->live, count_old, &c);
    }
    return 0;
}

void prof_frame_label(const mlz_meta *m, const mlz_frame *f, char *buf, size_t len)
{
    const char *fn = mlz_meta_function(m, f->func_id), *file = mlz_meta_file(m, f->file_id);
    const char *base = file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : file;
    if (!fn || !*fn) fn = "??";
    if (base && *base && f->line) snprintf(buf, len, "%s (%s:%u)", fn, base, f->line);
    else snprintf(buf, len, "%s", fn);
}

void prof_frame_name(const mlz_meta *m, const mlz_frame *f, char *buf, size_t len)
{
    prof_frame_label(m, f, buf, len);
    size_t n = strlen(buf);
    if (f->inlined && n < len) snprintf(buf + n, len - n, " [inlined]");
}

size_t prof_site_key(const mlz_meta *m, const mlz_stack *st, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = 0;
    for (uint32_t j = 0; j < st->depth && n + 1 < len; j++) {
        const char *fn = mlz_meta_function(m, st->frames[j].func_id);
        const char *file = mlz_meta_file(m, st->frames[j].file_id);
        int k = snprintf(buf + n, len - n, "%s|%s|%u;", fn ? fn : "", file ? file : "", st->frames[j].line);
        if (k < 0 || (size_t)k >= len - n) break;
        n += (size_t)k;
    }
    return n;
}

void prof_free(prof *p)
{
    free(p->sites);
    free(p->site_of);
    addrmap_free(&p->live);
    memset(p, 0, sizeof *p);
}
