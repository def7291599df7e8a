/*
 * cmd_top.c - memlyze top FILE: allocation sites ranked by estimated bytes.
 */
#include "cli.h"
#include "profile.h"
#include "sitejson.h"
#include "report.h"
#include "loss.h"

#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* The orders of --by, one row each. The usage text and the --by error
 * come from this table. */
static double key_live(const prof_site *s) { return s->live_bytes.value; }
static double key_peak(const prof_site *s) { return s->peak_bytes; }
static double key_allocated(const prof_site *s) { return s->alloc_bytes.value; }
static double key_count(const prof_site *s) { return s->alloc_count.value; }
static const est *est_live(const prof_site *s) { return &s->live_bytes; }
static const est *est_allocated(const prof_site *s) { return &s->alloc_bytes; }
static const est *est_count(const prof_site *s) { return &s->alloc_count; }
static double objects_live(const prof_site *s) { return s->live_count.value; }
static double objects_allocated(const prof_site *s) { return s->alloc_count.value; }
static double bytes_allocated(const prof_site *s) { return s->alloc_bytes.value; }

/* X(name, key, estimate with interval (NULL: none), unit, column header,
 *   second column header, its value, help) */
#define TOP_ORDERS(X)                                                                              \
    X("live", key_live, est_live, TOP_BYTES, "live bytes", "objects", objects_live,               \
      "estimated live bytes at the end (default)")                                                \
    X("peak", key_peak, NULL, TOP_BYTES, "peak bytes", "objects", objects_live,                   \
      "the site's own peak of live bytes")                                                        \
    X("allocated", key_allocated, est_allocated, TOP_BYTES, "allocated bytes", "objects",         \
      objects_allocated, "bytes allocated over the whole recording")                              \
    X("count", key_count, est_count, TOP_COUNT, "allocations", "bytes", bytes_allocated,          \
      "number of allocations")

enum top_unit { TOP_BYTES, TOP_COUNT };
typedef struct top_order {
    const char *name;
    double (*key)(const prof_site *s);
    const est *(*estimate)(const prof_site *s);
    enum top_unit unit;
    const char *what;         /* the value column's header */
    const char *other;        /* the second column's header */
    double (*other_value)(const prof_site *s);   /* in the unit the first one is not */
} top_order;

#define ROW(name, key, e, unit, what, other, ov, help) { name, key, e, unit, what, other, ov },
static const top_order orders[] = { TOP_ORDERS(ROW) };
#undef ROW
#define NORDERS (sizeof orders / sizeof orders[0])
#define NAME(name, key, e, unit, what, other, ov, help) ", " name
static const char order_names[] = TOP_ORDERS(NAME);   /* ", live, ..." */
#undef NAME
#define HELP(name, key, e, unit, what, other, ov, help) "                  " name ": " help "\n"

static const top_order *g_by;
static double key_of(const prof_site *s)
{
    return g_by->key(s);
}

static int cmp_site(const void *a, const void *b)
{
    double x = key_of(*(prof_site *const *)a), y = key_of(*(prof_site *const *)b);
    return x < y ? 1 : x > y ? -1 : 0;
}

/* What to show, from the command line. */
typedef struct top_args {
    long n, frames;
    int as_json;
    rep_at at;
    const char *path;
} top_args;

/* The ranking: sites with samples and a positive key, largest first, and
 * the totals the share column divides by. */
typedef struct top_rank {
    prof_site **order;
    size_t k;
    uint64_t total_samples;
    double total;
} top_rank;

static int parse_args(int argc, char **argv, top_args *a)
{
    int c;
    static const struct option opts[] = {
        { "by", required_argument, 0, 'b' }, { "frames", required_argument, 0, 'f' },
        { "json", no_argument, 0, 'j' }, { "at", required_argument, 0, 'a' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'n':
            a->n = strtol(optarg, &end, 10);
            if (*end || a->n <= 0) return cli_usage_error(&cmd_top, "-n needs a positive number");
            break;
        case 'f':
            a->frames = strtol(optarg, &end, 10);
            if (*end || a->frames <= 0) return cli_usage_error(&cmd_top, "--frames needs a positive number");
            break;
        case 'j':
            a->as_json = 1;
            break;
        case 'a':
            if (rep_parse_at(optarg, &a->at)) return cli_usage_error(&cmd_top, "%s", "--at takes seconds since the start or an absolute time in microseconds");
            break;
        case 'b':
            g_by = NULL;
            for (size_t i = 0; i < NORDERS && !g_by; i++)
                if (!strcmp(optarg, orders[i].name)) g_by = &orders[i];
            if (!g_by)
                return cli_usage_error(&cmd_top, "--by takes one of %s", order_names + 2);
            break;
        default:
            return cli_usage_error(&cmd_top, "bad option");
        }
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_top, "need exactly one FILE");
    a->path = argv[optind];
    return 0;
}

static int rank_sites(const prof *p, top_rank *t)
{
    *t = (top_rank){ malloc((p->nsites ? p->nsites : 1) * sizeof *t->order), 0, 0, 0 };
    if (!t->order) return cli_error("top", "out of memory");
    for (size_t i = 0; i < p->nsites; i++) {
        t->total_samples += p->sites[i].samples;
        t->total += key_of(&p->sites[i]);
        if (p->sites[i].samples && key_of(&p->sites[i]) > 0) t->order[t->k++] = &p->sites[i];
    }
    qsort(t->order, t->k, sizeof *t->order, cmp_site);
    return 0;
}

static void print_json(const top_args *a, const prof *p, const top_rank *t)
{
    json_t *root = json_object(), *arr = json_array();
    json_object_set_new(root, "file", json_string(a->path));
    json_object_set_new(root, "by", json_string(g_by->name));
    json_object_set_new(root, "rate", json_integer((json_int_t)p->rate));
    json_object_set_new(root, "samples", json_integer((json_int_t)t->total_samples));
    json_object_set_new(root, "live_samples", json_integer((json_int_t)p->live_samples));
    sitejson_est(root, "live_bytes", &p->live_bytes);
    json_object_set_new(root, "live_count", json_real(p->live_count.value));
    for (size_t i = 0; i < t->k && i < (size_t)a->n; i++) {
        prof_site *s = t->order[i];
        json_t *o = sitejson_site(s);
        json_object_set_new(o, "share", json_real(t->total > 0 ? key_of(s) / t->total : 0));
        json_object_set_new(o, "frames", sitejson_frame_names(p->meta, s->stack, (uint32_t)a->frames));
        json_array_append_new(arr, o);
    }
    sitejson_dump(root, arr, stdout);
}

/* The header: totals, the sampling rate, and warnings about the data. */
static void print_header(const top_args *a, const prof *p, const top_rank *t)
{
    char b1[32], b2[32], b3[32];
    const char *rate = p->rate <= 1 ? "exact (every allocation)" : cli_bytes((double)p->rate, b1, sizeof b1);
    printf("%s: live %s", a->path, cli_bytes(p->live_bytes.value, b2, sizeof b2));
    if (p->rate > 1) printf(" \xc2\xb1 %s", cli_bytes(est_ci95(&p->live_bytes), b3, sizeof b3));
    printf(" in ~%.0f objects; sampling %s; %llu samples, %llu live\n", p->live_count.value, rate,
           (unsigned long long)t->total_samples, (unsigned long long)p->live_samples);
    char loss[640];
    if (mlz_loss_describe(json_object_get(p->meta->root, "counters"), p->rate, loss, sizeof loss))
        printf("warning: %s\n", loss);
    if (p->rate > 1 && p->live_samples < 100 && g_by == &orders[0])
        printf("warning: only %llu live samples; estimates are rough (use a lower --rate or a longer run)\n",
               (unsigned long long)p->live_samples);
}

/* One ranked site: its value (with interval when sampled), share, second
 * column, samples and leaf frame, then its callers indented. */
static void print_site(const top_args *a, const prof *p, const top_rank *t, size_t rank, const prof_site *s)
{
    const est *e1 = g_by->estimate ? g_by->estimate(s) : NULL;
    char val[64], ci[32] = "", b[24], cell[96], other[32], fr[512];
    if (g_by->unit == TOP_COUNT) snprintf(val, sizeof val, "%.0f", key_of(s));
    else cli_bytes(key_of(s), val, sizeof val);
    if (p->rate > 1 && e1) {
        if (g_by->unit == TOP_COUNT) snprintf(ci, sizeof ci, " \xc2\xb1 %.0f", est_ci95(e1));
        else snprintf(ci, sizeof ci, " \xc2\xb1 %s", cli_bytes(est_ci95(e1), b, sizeof b));
    }
    snprintf(cell, sizeof cell, "%s%s", val, ci);
    if (g_by->unit == TOP_COUNT) cli_bytes(g_by->other_value(s), other, sizeof other);
    else snprintf(other, sizeof other, "%.0f", g_by->other_value(s));
    const mlz_stack *st = s->stack;
    if (st->depth) prof_frame_name(p->meta, &st->frames[0], fr, sizeof fr);
    else snprintf(fr, sizeof fr, "(no frames)");
    cli_text(fr);
    /* The +1 accounts for the 2-byte UTF-8 plus-minus sign in cell. */
    printf("%4zu  %-*s %5.1f%%  %9s  %7llu  %s\n", rank, 28 + (ci[0] ? 1 : 0), cell,
           t->total > 0 ? 100.0 * key_of(s) / t->total : 0.0, other, (unsigned long long)s->samples, fr);
    for (uint32_t j = 1; j < st->depth && j < (uint32_t)a->frames; j++) {
        prof_frame_name(p->meta, &st->frames[j], fr, sizeof fr);
        printf("%4s  %-28s %6s  %9s  %7s    <- %s\n", "", "", "", "", "", cli_text(fr));
    }
}

static int run(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)   /* on a heap dump: cmd_top_retained.c */
        if (!strcmp(argv[i], "--retained")) return top_retained_run(argc, argv);
    top_args a = { .n = 10, .frames = 4 };
    g_by = &orders[0];
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    mlz_reader *r;
    prof p;
    top_rank t;
    if (cli_load("top", a.path, &a.at, &r, &p)) return 1;
    if (rank_sites(&p, &t)) {
        cli_unload(r, &p);
        return 1;
    }
    if (a.as_json) {
        print_json(&a, &p, &t);
    } else {
        print_header(&a, &p, &t);
        printf("%4s  %-28s %6s  %9s  %7s  %s\n", "rank", g_by->what, "share", g_by->other, "samples", "site");
        for (size_t i = 0; i < t.k && i < (size_t)a.n; i++) print_site(&a, &p, &t, i + 1, t.order[i]);
        if (t.k == 0) printf("(no allocation sites)\n");
    }
    free(t.order);
    cli_unload(r, &p);
    return 0;
}

const mlz_command cmd_top = {
    "top", run, "allocation sites ranked by estimated bytes",
    "usage: memlyze top [-n N] [--by KEY] [--frames N] [--at TIME] [--json] FILE\n"
    "\n"
    "Ranks allocation sites (stacks) by estimated live bytes at the end of FILE,\n"
    "or by their own peak of live bytes, by bytes allocated over the whole\n"
    "recording, or by number of allocations. Estimates are scaled from the\n"
    "samples by the sampling rate, with their 95% confidence interval.\n"
    "  -n N          show N sites (default 10)\n"
    "  --by KEY      the order:\n" TOP_ORDERS(HELP)
    "  --frames N    frames shown per site (default 4)\n"
    "  --at TIME     the live heap at TIME: seconds since the start (e.g. 12.5)\n"
    "                or an absolute time in microseconds since the epoch\n"
    "  --json        the same as a JSON document\n"
    "memlyze top --retained [-n N] FILE.arc|PID ranks sites and globals of a heap\n"
    "dump (memlyze heapdump) by the bytes that would be freed if they let go\n"
    "(dominator tree); a site counts each object below another of its own once.\n",
};
