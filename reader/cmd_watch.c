/*
 * cmd_watch.c - memlyze watch PID: the live heap of an attached process,
 * refreshed every few seconds, in the terminal (ncurses) or as plain lines.
 *
 * Every refresh reads the payload's tables from outside (mlz_live_read, as
 * memlyze snapshot does): no code runs in the target and none of its
 * threads is paused. Each live sample weighs its Horvitz-Thompson estimate
 * (core/sampler.h, as profile.c replays them); a site is one symbolized
 * call chain (prof_site_key), symbolized once when its stack first appears.
 * Growth is measured from a baseline: the first refresh, or the last reset.
 */
#include "cli.h"
#include "keymap.h"
#include "profile.h"
#include "report.h"
#include "sampler.h"
#include "snapshot.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <ncurses.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define W_HISTORY 256          /* totals kept for the sparkline */
#define W_NONE    UINT32_MAX   /* stack key of samples whose stack is unknown */

enum w_sort { SORT_LIVE, SORT_GROWTH, SORT_COUNT };
static const char *const sort_names[] = { "live", "growth", "count" };

typedef struct w_site {
    char label[2][256];       /* the innermost two frames */
    unsigned nlabel;
    est live, count;          /* now */
    est growth;               /* since the baseline, paired (set_baseline) */
    int at_base;              /* had live samples at the baseline */
} w_site;

/* The baseline's samples. Every refresh reads the same sampling session, so
 * a sample alive at the baseline and now is the same object in both and
 * cancels: the growth is what was born since minus what died, with the
 * variance of those samples alone, as memlyze diff pairs (pairdiff.h). */
typedef struct w_base {
    keymap *ix;               /* address, birth, size -> sample */
    uint32_t *site;
    double *w, *v;            /* weight in bytes and its variance term */
    uint8_t *seen;
    size_t n;
} w_base;

typedef struct watch {
    pid_t pid;
    keymap *site_ix;          /* prof_site_key -> site */
    w_site *sites;
    size_t nsites, cap;
    keymap *stack_ix;         /* the payload's stack id -> position in stack_site */
    uint32_t *stack_site;
    size_t nstack_site, cap_stack;
    mlz_live_heap heap;       /* the last read (the snapshot key writes it) */
    int have_heap;
    est total, growth;
    w_base base;
    double history[W_HISTORY];
    size_t nhistory;
    time_t base_time;
    enum w_sort sort;
    uint32_t *order;
} watch;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { (void)sig; g_stop = 1; }

static w_site *site_at(watch *w, const char *key, size_t len, uint32_t *ix)
{
    int added = 0;
    uint32_t i = keymap_intern(w->site_ix, key, len, &added);
    if (i == UINT32_MAX) return NULL;
    if (added) {
        if (w->nsites == w->cap) {
            size_t nc = w->cap ? 2 * w->cap : 64;
            w_site *nv = realloc(w->sites, nc * sizeof *nv);
            if (!nv) return NULL;
            w->sites = nv;
            uint32_t *no = realloc(w->order, nc * sizeof *no);
            if (!no) return NULL;
            w->order = no;
            w->cap = nc;
        }
        memset(&w->sites[i], 0, sizeof w->sites[i]);
        w->nsites = i + 1;
    }
    *ix = i;
    return &w->sites[i];
}

static int remember_stack(watch *w, uint32_t stack_key, uint32_t site)
{
    int added = 0;
    uint32_t i = keymap_intern(w->stack_ix, &stack_key, sizeof stack_key, &added);
    if (i == UINT32_MAX) return -1;
    if (i >= w->cap_stack) {
        size_t nc = w->cap_stack ? 2 * w->cap_stack : 256;
        uint32_t *nv = realloc(w->stack_site, nc * sizeof *nv);
        if (!nv) return -1;
        w->stack_site = nv;
        w->cap_stack = nc;
    }
    w->stack_site[i] = site;
    if (i >= w->nstack_site) w->nstack_site = i + 1;
    return 0;
}

static uint32_t stack_key(const mlz_live_heap *h, uint32_t id) { return id == h->empty_id ? W_NONE : id; }

/* Symbolizes the stacks of h not seen before and maps each to its site. */
static int learn_stacks(watch *w, mlz_live_heap *h, char *err, size_t errlen)
{
    mlz_raw_stack *fresh = malloc((h->nstacks ? h->nstacks : 1) * sizeof *fresh);
    size_t n = 0;
    if (!fresh) return snprintf(err, errlen, "out of memory"), -1;
    for (size_t i = 0; i < h->nstacks; i++) {
        uint32_t k = stack_key(h, (uint32_t)h->stacks[i].id);
        if (keymap_find(w->stack_ix, &k, sizeof k) == UINT32_MAX) fresh[n++] = h->stacks[i];
    }
    int rc = 0;
    if (n) {
        char *json = NULL;
        size_t len = 0;
        mlz_meta m;
        mlz_error e = { 0 };
        if (mlz_live_meta(h, fresh, n, &json, &len, err, errlen)) { free(fresh); return -1; }
        if (mlz_meta_parse(&m, json, len, &e)) {
            snprintf(err, errlen, "symbolizing: %s", e.msg);
            free(json);
            free(fresh);
            return -1;
        }
        char key[8192];
        for (size_t i = 0; i < n && !rc; i++) {
            const mlz_stack *st = mlz_meta_stack(&m, fresh[i].id);
            uint32_t k = stack_key(h, (uint32_t)fresh[i].id), ix;
            size_t kl = st && st->depth ? prof_site_key(&m, st, key, sizeof key) : 0;
            if (!kl) kl = (size_t)snprintf(key, sizeof key, "(no stack)");
            w_site *s = site_at(w, key, kl, &ix);
            if (!s) { rc = -1; break; }
            if (!s->nlabel) {
                for (uint32_t j = 0; st && j < st->depth && j < 2; j++)
                    prof_frame_name(&m, &st->frames[j], s->label[s->nlabel++], sizeof s->label[0]);
                if (!s->nlabel) snprintf(s->label[s->nlabel++], sizeof s->label[0], "(no stack)");
            }
            if (remember_stack(w, k, ix)) rc = -1;
        }
        if (rc) snprintf(err, errlen, "out of memory");
        mlz_meta_free(&m);
        free(json);
    }
    free(fresh);
    return rc;
}

static void add_est(est *e, double v, double var) { e->value += v; e->var += var; }

static void base_free(w_base *b)
{
    keymap_free(b->ix);
    free(b->site);
    free(b->w);
    free(b->v);
    free(b->seen);
    memset(b, 0, sizeof *b);
}

/* The sample's key: its address, birth and size (an address reused by
 * another object between two reads is a death and a birth). */
static void obj_key(const mlz_live_obj *o, uint64_t k[3])
{
    k[0] = o->addr;
    k[1] = o->time_ns;
    k[2] = o->size;
}

static uint32_t site_of_obj(const watch *w, const mlz_live_heap *h, const mlz_live_obj *o)
{
    uint32_t k = stack_key(h, o->stack_id);
    uint32_t at = keymap_find(w->stack_ix, &k, sizeof k);
    return at == UINT32_MAX ? UINT32_MAX : w->stack_site[at];
}

/* The heap just read becomes the baseline: 0, or -1 out of memory. */
static int set_baseline(watch *w)
{
    const mlz_live_heap *h = &w->heap;
    w_base b = { keymap_new(), malloc((h->nobj + 1) * sizeof *b.site), malloc((h->nobj + 1) * sizeof *b.w),
                 malloc((h->nobj + 1) * sizeof *b.v), calloc(h->nobj + 1, 1), 0 };
    if (!b.ix || !b.site || !b.w || !b.v || !b.seen) { base_free(&b); return -1; }
    uint64_t rate = h->rate ? h->rate : 1;
    for (size_t i = 0; i < w->nsites; i++) {
        w->sites[i].growth = (est){ 0, 0 };
        w->sites[i].at_base = 0;
    }
    for (size_t i = 0; i < h->nobj; i++) {
        const mlz_live_obj *o = &h->obj[i];
        uint64_t k[3];
        int added = 0;
        obj_key(o, k);
        uint32_t at = keymap_intern(b.ix, k, sizeof k, &added);
        if (at == UINT32_MAX) { base_free(&b); return -1; }
        if (!added) continue;          /* the same sample twice: not from one read */
        uint64_t r = rate << o->rate_shift;
        b.site[at] = site_of_obj(w, h, o);
        b.w[at] = mlz_weight_bytes(o->size, r);
        b.v[at] = mlz_var_bytes(o->size, r);
        if (b.site[at] != UINT32_MAX) w->sites[b.site[at]].at_base = 1;
        b.n = at + 1;
    }
    base_free(&w->base);
    w->base = b;
    w->growth = (est){ 0, 0 };
    w->base_time = time(NULL);
    return 0;
}

/* Growth since the baseline, per site and in all, from the samples born
 * since (in h only) and died since (at the baseline only). */
static void pair_growth(watch *w, const mlz_live_heap *h)
{
    w_base *b = &w->base;
    uint64_t rate = h->rate ? h->rate : 1;
    for (size_t i = 0; i < w->nsites; i++) w->sites[i].growth = (est){ 0, 0 };
    w->growth = (est){ 0, 0 };
    memset(b->seen, 0, b->n);
    for (size_t i = 0; i < h->nobj; i++) {
        const mlz_live_obj *o = &h->obj[i];
        uint64_t k[3];
        obj_key(o, k);
        uint32_t at = keymap_find(b->ix, k, sizeof k);
        if (at != UINT32_MAX) { b->seen[at] = 1; continue; }
        uint32_t site = site_of_obj(w, h, o);
        uint64_t r = rate << o->rate_shift;
        double wb = mlz_weight_bytes(o->size, r), vb = mlz_var_bytes(o->size, r);
        if (site != UINT32_MAX) add_est(&w->sites[site].growth, wb, vb);
        add_est(&w->growth, wb, vb);
    }
    for (size_t i = 0; i < b->n; i++) {
        if (b->seen[i]) continue;
        if (b->site[i] != UINT32_MAX) add_est(&w->sites[b->site[i]].growth, -b->w[i], b->v[i]);
        add_est(&w->growth, -b->w[i], b->v[i]);
    }
}

/* One refresh: 0; -2 when the target is gone or detached; -1 on error. */
static int refresh_once(watch *w, char *err, size_t errlen)
{
    mlz_live_heap h;
    int rc = mlz_live_read(w->pid, &h, 0, err, errlen);
    if (rc) return rc;
    /* Another session: memlyze was detached (and attached again) since the
     * last refresh. Its stack ids and samples are not the ones learnt. */
    if (w->have_heap && h.session != w->heap.session) {
        mlz_live_free(&h);
        snprintf(err, errlen, "memlyze was detached from process %d (and attached again)", (int)w->pid);
        return -2;
    }
    if (learn_stacks(w, &h, err, errlen)) { mlz_live_free(&h); return -1; }
    uint64_t base = h.rate ? h.rate : 1;
    /* Sites appear only through learn_stacks; the baseline of a site born
     * after it is zero (memset in site_at). */
    for (size_t i = 0; i < w->nsites; i++) w->sites[i].live = w->sites[i].count = (est){ 0, 0 };
    w->total = (est){ 0, 0 };
    for (size_t i = 0; i < h.nobj; i++) {
        uint32_t k = stack_key(&h, h.obj[i].stack_id);
        uint32_t at = keymap_find(w->stack_ix, &k, sizeof k);
        if (at == UINT32_MAX) continue;   /* cannot happen: learn_stacks saw every stack */
        w_site *s = &w->sites[w->stack_site[at]];
        uint64_t size = h.obj[i].size;
        uint64_t rate = base << h.obj[i].rate_shift;   /* raised under overload (payload/events.c) */
        add_est(&s->live, mlz_weight_bytes(size, rate), mlz_var_bytes(size, rate));
        add_est(&s->count, mlz_weight_count(size, rate), mlz_var_count(size, rate));
        add_est(&w->total, mlz_weight_bytes(size, rate), mlz_var_bytes(size, rate));
    }
    int first = !w->have_heap;
    if (w->have_heap) mlz_live_free(&w->heap);
    w->heap = h;
    w->have_heap = 1;
    if (first && set_baseline(w)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (!first) pair_growth(w, &w->heap);
    if (w->nhistory == W_HISTORY) {
        memmove(w->history, w->history + 1, (W_HISTORY - 1) * sizeof w->history[0]);
        w->nhistory--;
    }
    w->history[w->nhistory++] = w->total.value;
    return 0;
}

static est growth_of(const w_site *s)
{
    return s->growth;
}

static watch *g_sorting;
static double sort_key(const w_site *s, enum w_sort by)
{
    if (by == SORT_GROWTH) return growth_of(s).value;
    if (by == SORT_COUNT) return s->count.value;
    return s->live.value;
}

static int cmp_order(const void *a, const void *b)
{
    const w_site *x = &g_sorting->sites[*(const uint32_t *)a], *y = &g_sorting->sites[*(const uint32_t *)b];
    double kx = sort_key(x, g_sorting->sort), ky = sort_key(y, g_sorting->sort);
    if (kx != ky) return kx < ky ? 1 : -1;
    return strcmp(x->label[0], y->label[0]);
}

/* Sites with something live now or at the baseline, in the chosen order. */
static size_t sorted(watch *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->nsites; i++)
        if (w->sites[i].live.value > 0 || w->sites[i].at_base) w->order[n++] = (uint32_t)i;
    g_sorting = w;
    qsort(w->order, n, sizeof *w->order, cmp_order);
    return n;
}

/* "1.5 MiB ± 20 KiB" or "+1.5 MiB ± 20 KiB"; no interval when exact. */
static const char *fmt_est(const est *e, int sign, int sampled, char *buf, size_t len)
{
    char v[32], ci[32];
    cli_bytes(fabs(e->value), v, sizeof v);
    const char *sg = sign ? (e->value < 0 ? "-" : "+") : "";
    if (sampled) snprintf(buf, len, "%s%s \xc2\xb1 %s", sg, v, cli_bytes(est_ci95(e), ci, sizeof ci));
    else snprintf(buf, len, "%s%s", sg, v);
    return buf;
}

static int sampled(const watch *w) { return w->heap.rate > 1; }

/* s padded with spaces to `cols` characters on screen (UTF-8 aware: "±"
 * is two bytes, one column). */
static const char *pad(const char *s, int cols, char *buf, size_t len)
{
    int w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) w += (*p & 0xc0) != 0x80;
    snprintf(buf, len, "%s%*s", s, w < cols ? cols - w : 0, "");
    return buf;
}

/* ------------------------------------------------------------ plain lines */

static void print_text(watch *w, long rows)
{
    char a[64], b[64], c[96], d[96];
    est g = w->growth;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char when[16];
    strftime(when, sizeof when, "%H:%M:%S", &tm);
    printf("%s pid %d: live heap %s (95%%), growth %s in %lds, %zu samples\n", when, (int)w->pid,
           fmt_est(&w->total, 0, sampled(w), a, sizeof a), fmt_est(&g, 1, sampled(w), b, sizeof b),
           (long)(now - w->base_time), w->heap.nobj);
    size_t n = sorted(w);
    for (size_t i = 0; i < n && (long)i < rows; i++) {
        w_site *s = &w->sites[w->order[i]];
        est gr = growth_of(s);
        char label[sizeof s->label[0]];
        snprintf(label, sizeof label, "%s", s->label[0]);
        printf("  %s %s %9.0f  %s\n", pad(fmt_est(&s->live, 0, sampled(w), a, sizeof a), 20, c, sizeof c),
               pad(fmt_est(&gr, 1, sampled(w), b, sizeof b), 21, d, sizeof d), s->count.value, cli_text(label));
    }
    fflush(stdout);
}

static void print_json(watch *w, long rows)
{
    json_t *o = json_object(), *arr = json_array();
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    json_object_set_new(o, "time_us", json_integer((json_int_t)now.tv_sec * 1000000 + now.tv_nsec / 1000));
    json_object_set_new(o, "pid", json_integer(w->pid));
    json_object_set_new(o, "rate", json_integer((json_int_t)w->heap.rate));
    json_object_set_new(o, "samples", json_integer((json_int_t)w->heap.nobj));
    json_object_set_new(o, "live_bytes", json_real(w->total.value));
    json_object_set_new(o, "live_bytes_ci95", json_real(est_ci95(&w->total)));
    est g = w->growth;
    json_object_set_new(o, "growth_bytes", json_real(g.value));
    json_object_set_new(o, "growth_bytes_ci95", json_real(est_ci95(&g)));
    json_object_set_new(o, "since_s", json_integer((json_int_t)(time(NULL) - w->base_time)));
    size_t n = sorted(w);
    for (size_t i = 0; i < n && (long)i < rows; i++) {
        w_site *s = &w->sites[w->order[i]];
        est gr = growth_of(s);
        json_t *x = json_object(), *fr = json_array();
        for (unsigned j = 0; j < s->nlabel; j++) json_array_append_new(fr, json_string(s->label[j]));
        json_object_set_new(x, "frames", fr);
        json_object_set_new(x, "live_bytes", json_real(s->live.value));
        json_object_set_new(x, "live_bytes_ci95", json_real(est_ci95(&s->live)));
        json_object_set_new(x, "growth_bytes", json_real(gr.value));
        json_object_set_new(x, "growth_bytes_ci95", json_real(est_ci95(&gr)));
        json_object_set_new(x, "count", json_real(s->count.value));
        json_object_set_new(x, "count_ci95", json_real(est_ci95(&s->count)));
        json_array_append_new(arr, x);
    }
    json_object_set_new(o, "sites", arr);
    json_dumpf(o, stdout, JSON_COMPACT | JSON_REAL_PRECISION(10));
    putchar('\n');
    fflush(stdout);
    json_decref(o);
}

/* ------------------------------------------------------------- the screen */

static void sparkline(const watch *w, int y, int x, int width, int utf8)
{
    static const char *const blocks[] = { "\xe2\x96\x81", "\xe2\x96\x82", "\xe2\x96\x83", "\xe2\x96\x84",
                                          "\xe2\x96\x85", "\xe2\x96\x86", "\xe2\x96\x87", "\xe2\x96\x88" };
    static const char ascii[] = "_.-=+*#@";
    size_t n = w->nhistory < (size_t)width ? w->nhistory : (size_t)width;
    const double *v = w->history + w->nhistory - n;
    double lo = v[0], hi = v[0];
    for (size_t i = 1; i < n; i++) { if (v[i] < lo) lo = v[i]; if (v[i] > hi) hi = v[i]; }
    move(y, x);
    for (size_t i = 0; i < n; i++) {
        int level = hi > lo ? (int)lround((v[i] - lo) / (hi - lo) * 7) : 0;
        if (utf8) addstr(blocks[level]);
        else addch((chtype)ascii[level]);
    }
}

static void draw(watch *w, const char *msg, int utf8)
{
    int H, W;
    getmaxyx(stdscr, H, W);
    erase();
    char a[64], b[64], line[1024];
    est g = w->growth;
    /* Every line is cut at the width: a wrapped one would be drawn over by
     * the next (a narrow terminal). */
    int n0 = snprintf(line, sizeof line, "memlyze watch %d", (int)w->pid);
    attron(A_BOLD);
    mvaddnstr(0, 0, line, W);
    attroff(A_BOLD);
    if (sampled(w)) snprintf(line, sizeof line, "  sampled every %s  %zu samples", cli_bytes((double)w->heap.rate, a, sizeof a),
                             w->heap.nobj);
    else snprintf(line, sizeof line, "  exact  %zu samples", w->heap.nobj);
    if (W > n0) mvaddnstr(0, n0, line, W - n0);
    snprintf(line, sizeof line, "live %s   growth %s in %lds", fmt_est(&w->total, 0, sampled(w), a, sizeof a),
             fmt_est(&g, 1, sampled(w), b, sizeof b), (long)(time(NULL) - w->base_time));
    mvaddnstr(1, 0, line, W);
    int sw = W - 2 > W_HISTORY ? W_HISTORY : W - 2;
    if (sw > 0) sparkline(w, 2, 0, sw, utf8);
    attron(A_REVERSE);
    mvprintw(3, 0, "%-*s", W, "");
    snprintf(line, sizeof line, " %-19s %-20s %7s  site (sorted by %s)", "live (95%)", "growth (95%)", "count",
             sort_names[w->sort]);
    mvaddnstr(3, 0, line, W);
    attroff(A_REVERSE);
    size_t n = sorted(w);
    int rows = H - 6;
    for (int i = 0; i < rows && (size_t)i < n; i++) {
        w_site *s = &w->sites[w->order[i]];
        est gr = growth_of(s);
        char pa[96], pb[96];
        snprintf(line, sizeof line, " %s %s %7.0f  %s%s%s", pad(fmt_est(&s->live, 0, sampled(w), a, sizeof a), 19, pa, sizeof pa),
                 pad(fmt_est(&gr, 1, sampled(w), b, sizeof b), 20, pb, sizeof pb), s->count.value, s->label[0],
                 s->nlabel > 1 ? " <- " : "", s->nlabel > 1 ? s->label[1] : "");
        mvaddnstr(4 + i, 0, line, W);
    }
    if (msg && *msg) mvaddnstr(H - 2, 0, msg, W);
    attron(A_REVERSE);
    mvprintw(H - 1, 0, "%-*s", W, "");
    mvaddnstr(H - 1, 0, " sort: l live  g growth  c count | s snapshot | r reset | q quit", W);
    attroff(A_REVERSE);
    refresh();
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Gone, or a zombie its parent has not reaped yet. */
static int exited(pid_t pid)
{
    if (kill(pid, 0) && errno == ESRCH) return 1;
    char p[64], buf[256];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *st = strrchr(buf, ')');
    return !st || st[1] != ' ' || st[2] == 'Z' || st[2] == 'X';
}

/* On stderr: with --json, stdout holds JSON objects only. */
static int gone_message(watch *w, const char *err)
{
    fflush(stdout);
    if (exited(w->pid)) fprintf(stderr, "memlyze watch: process %d exited\n", (int)w->pid);
    else fprintf(stderr, "memlyze watch: %s; stopped watching\n", err);
    return 0;
}

static int run_screen(watch *w, double interval)
{
    char err[512], msg[600] = "";
    int utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    timeout(100);
    int rc = 0, gone = 0;
    double next = now_s() + interval;
    draw(w, msg, utf8);
    while (!g_stop) {
        int ch = getch();
        int redraw = 1;
        switch (ch) {
        case 'q': case 'Q': g_stop = 1; redraw = 0; break;
        case 'l': w->sort = SORT_LIVE; break;
        case 'g': w->sort = SORT_GROWTH; break;
        case 'c': w->sort = SORT_COUNT; break;
        case '\t': w->sort = (enum w_sort)((w->sort + 1) % 3); break;
        case 'r':
            snprintf(msg, sizeof msg, "%s", set_baseline(w) ? "out of memory: baseline kept" : "baseline reset");
            break;
        case 's': {
            char name[64];
            if (mlz_live_write_new(&w->heap, 0, name, sizeof name, err, sizeof err))
                snprintf(msg, sizeof msg, "snapshot failed: %s", err);
            else snprintf(msg, sizeof msg, "wrote %s (%zu samples)", name, w->heap.nobj);
            break;
        }
        case KEY_RESIZE: break;
        default: redraw = 0;
        }
        if (g_stop) break;
        if (now_s() >= next) {
            int k = refresh_once(w, err, sizeof err);
            next = now_s() + interval;
            if (k == -2) { gone = 1; break; }
            if (k) { rc = -1; break; }
            redraw = 1;
        }
        if (redraw) draw(w, msg, utf8);
    }
    endwin();
    if (gone) return gone_message(w, err);
    if (rc) return cli_error("watch", "%s", err);
    return 0;
}

static int run(int argc, char **argv)
{
    double interval = 1;
    long rows = 20;
    int once = 0, as_json = 0, c;
    enum w_sort by = SORT_LIVE;
    static const struct option opts[] = {
        { "interval", required_argument, 0, 'i' }, { "once", no_argument, 0, '1' },
        { "json", no_argument, 0, 'j' }, { "sort", required_argument, 0, 'S' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "i:n:", opts, NULL)) != -1) {
        char *end;
        if (c == 'i') {
            interval = strtod(optarg, &end);
            if (*end || !(interval >= 0.1 && interval <= 3600))
                return cli_usage_error(&cmd_watch, "-i takes 0.1 to 3600 seconds");
        } else if (c == 'n') {
            rows = strtol(optarg, &end, 10);
            if (*end || rows <= 0) return cli_usage_error(&cmd_watch, "-n needs a positive number");
        } else if (c == '1') once = 1;
        else if (c == 'j') as_json = 1;
        else if (c == 'S') {
            if (!strcmp(optarg, "live")) by = SORT_LIVE;
            else if (!strcmp(optarg, "growth")) by = SORT_GROWTH;
            else if (!strcmp(optarg, "count")) by = SORT_COUNT;
            else return cli_usage_error(&cmd_watch, "--sort takes live, growth or count");
        } else return cli_usage_error(&cmd_watch, "bad option");
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_watch, "need exactly one PID");
    long pid = cli_parse_pid(argv[optind]);
    if (!pid) return cli_usage_error(&cmd_watch, "'%s' is not a process id", argv[optind]);

    setlocale(LC_ALL, "");
    watch w = { .pid = (pid_t)pid, .sort = by };
    w.site_ix = keymap_new();
    w.stack_ix = keymap_new();
    char err[512];
    int rc = 0;
    if (!w.site_ix || !w.stack_ix) { rc = cli_error("watch", "out of memory"); goto out; }
    /* The first read says whether there is anything to watch at all. */
    if (refresh_once(&w, err, sizeof err)) { rc = cli_error("watch", "%s", err); goto out; }

    struct sigaction sa = { 0 };
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (!once && !as_json && isatty(STDOUT_FILENO) && isatty(STDIN_FILENO)) {
        rc = run_screen(&w, interval);
        goto out;
    }
    /* Plain lines: one block (or one JSON line) per refresh. */
    for (;;) {
        if (as_json) print_json(&w, rows);
        else print_text(&w, rows);
        if (once || g_stop || ferror(stdout)) break;
        double until = now_s() + interval;
        while (!g_stop && now_s() < until) {
            struct timespec ts = { 0, 50 * 1000 * 1000 };
            nanosleep(&ts, NULL);
        }
        if (g_stop) break;
        int k = refresh_once(&w, err, sizeof err);
        if (k == -2) { rc = gone_message(&w, err); break; }
        if (k) { rc = cli_error("watch", "%s", err); break; }
    }
out:
    if (w.have_heap) mlz_live_free(&w.heap);
    keymap_free(w.site_ix);
    keymap_free(w.stack_ix);
    base_free(&w.base);
    free(w.sites);
    free(w.order);
    free(w.stack_site);
    return rc;
}

const mlz_command cmd_watch = {
    "watch", run, "watch the live heap of an attached process (terminal)",
    "usage: memlyze watch [-i SECONDS] [-n N] [--sort live|growth|count] [--once] [--json] PID\n"
    "\n"
    "Shows the estimated live heap of process PID, which memlyze is attached to,\n"
    "refreshed every SECONDS: the total with its 95% interval and a sparkline of\n"
    "its history, and the top sites by live bytes with their growth since the\n"
    "view started (or since the last reset), each with its 95% interval. It reads\n"
    "the process from outside like memlyze snapshot: nothing runs in it and none\n"
    "of its threads is paused. Keys: l, g, c sort by live bytes, growth or count\n"
    "(Tab cycles); s writes a snapshot file memlyze.PID.N.mlyze (the first N not\n"
    "taken); r resets the growth baseline; q quits. When standard output is not\n"
    "a terminal it prints plain lines instead. It exits when the process exits\n"
    "or memlyze is detached from it.\n"
    "  -i SECONDS     refresh interval (default 1; 0.1 to 3600)\n"
    "  -n N           sites in plain and JSON output (default 20)\n"
    "  --sort KEY     live (default), growth or count\n"
    "  --once         print one refresh as plain lines and exit\n"
    "  --json         one JSON object per refresh, one per line\n",
};
