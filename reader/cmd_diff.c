/*
 * cmd_diff.c - memlyze diff A B: what grew between two snapshots or traces
 * of the same program, per site; the leak-hunting view. Sites are matched
 * by their symbolized frames (function, file, line), never by address, so
 * two runs with different load addresses still line up.
 *
 * Two snapshots of one sampling session (or two moments of one trace) are
 * paired: growth and its interval come from the samples born or died in
 * between only (pairdiff.h). Otherwise the two sides are independent
 * estimates and the header says so.
 */
#include "cli.h"
#include "pairdiff.h"
#include "diff.h"
#include "profile.h"
#include "sitejson.h"
#include "report.h"
#include "sampler.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct dsite {
    double a, va, b, vb;      /* live bytes and variances in A and B */
    double ca, cb;            /* live objects */
    pd_growth pg;             /* paired: born and died bytes */
    double gc;                /* paired: growth in objects */
    est g;                    /* growth in bytes, as reported... */
    double lo, hi;            /* ...with its 95% interval */
    char frames[4][256];
    unsigned nframes;
} dsite;

typedef struct dtab {
    json_t *index;            /* site key -> position */
    dsite *v;
    size_t n, cap;
} dtab;

static dsite *site_for(dtab *t, const char *key)
{
    json_t *i = json_object_get(t->index, key);
    if (i) return &t->v[json_integer_value(i)];
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        dsite *nv = realloc(t->v, t->cap * sizeof *nv);
        if (!nv) return NULL;
        t->v = nv;
    }
    memset(&t->v[t->n], 0, sizeof *t->v);
    json_object_set_new(t->index, key, json_integer((json_int_t)t->n));
    return &t->v[t->n++];
}

/* Adds profile p's live sites to side 0 (A) or 1 (B); ids[site] gets the
 * site's position in t (for pairing samples across the files). */
static int collect(dtab *t, const prof *p, int side, uint32_t *ids)
{
    char key[8192];
    for (size_t i = 0; i < p->nsites; i++) {
        const prof_site *s = &p->sites[i];
        ids[i] = UINT32_MAX;
        if (p->site_of[i] != i || !s->live_samples) continue;
        prof_site_key(p->meta, s->stack, key, sizeof key);
        dsite *d = site_for(t, key);
        if (!d) return -1;
        ids[i] = (uint32_t)(d - t->v);
        if (side == 0) { d->a += s->live_bytes.value; d->va += s->live_bytes.var; d->ca += s->live_count.value; }
        else { d->b += s->live_bytes.value; d->vb += s->live_bytes.var; d->cb += s->live_count.value; }
        if (!d->nframes)
            for (uint32_t j = 0; j < s->stack->depth && j < 4; j++)
                prof_frame_name(p->meta, &s->stack->frames[j], d->frames[d->nframes++], sizeof d->frames[0]);
    }
    return 0;
}

/* One side: path replayed up to `at` (NULL: its end), its sites in t. */
typedef struct side {
    mlz_reader *r;
    prof p;
    uint32_t *ids;            /* site -> position in t */
} side;

static int load(const char *path, const rep_at *at, dtab *t, int which, side *s)
{
    if (cli_load("diff", path, at, &s->r, &s->p)) return -1;
    s->ids = malloc((s->p.nsites ? s->p.nsites : 1) * sizeof *s->ids);
    if (!s->ids || collect(t, &s->p, which, s->ids)) {
        free(s->ids);
        cli_unload(s->r, &s->p);
        cli_error("diff", "out of memory");
        return -1;
    }
    return 0;
}

static void unload(side *s)
{
    free(s->ids);
    cli_unload(s->r, &s->p);
}

/* Paired growth: every born sample adds, every died one subtracts, and
 * both add their variance terms, per site and in total. */
typedef struct pairing {
    dtab *t;
    const uint32_t *ids[2];   /* A's and B's site -> position in t */
    const prof *pa;
    pd_growth total;
    uint64_t born, died;
} pairing;

static void on_change(void *arg, const prof *p, const addr_obj *o, int sign)
{
    pairing *pg = arg;
    dsite *d = &pg->t->v[pg->ids[p == pg->pa ? 0 : 1][o->site]];
    uint64_t rate = p->rates.v[o->rate_idx];
    double wb = mlz_weight_bytes(o->size, rate), vb = mlz_var_bytes(o->size, rate);
    pd_add(&d->pg, wb, vb, sign);
    pd_add(&pg->total, wb, vb, sign);
    d->gc += sign * mlz_weight_count(o->size, rate);
    if (sign > 0) pg->born++;
    else pg->died++;
}

/* What is reported: the growth, its 95% interval, and the normal
 * half-width (1.96 sd) of the JSON's growth_bytes_ci95. */
static void growth_paired(dsite *d, const pd_growth *g, double count)
{
    d->g = (est){ pd_value(g), g->born.var + g->died.var };
    pd_interval95(g, &d->lo, &d->hi);
    d->gc = count;
}

static void growth_independent(dsite *d, double growth, double var, double count)
{
    d->g = (est){ growth, var };
    d->lo = growth - est_ci95(&d->g);
    d->hi = growth + est_ci95(&d->g);
    d->gc = count;
}

/* "4.00 MiB ± 1.2 MiB", or "4.00 MiB (1.9 MiB .. 7.1 MiB)" when the
 * interval is not symmetric (paired growth from few samples). */
static const char *growth_cell(const dsite *d, char *buf, size_t len)
{
    char g[32], x[32], y[32];
    double h = (d->hi - d->lo) / 2;
    cli_bytes(d->g.value, g, sizeof g);
    if (fabs(d->g.value - d->lo - h) <= 1e-6 * (h + 1))
        snprintf(buf, len, "%s \xc2\xb1 %s", g, cli_bytes(h, x, sizeof x));
    else snprintf(buf, len, "%s (%s .. %s)", g, cli_bytes(d->lo, x, sizeof x), cli_bytes(d->hi, y, sizeof y));
    return buf;
}

static int cmp_growth(const void *x, const void *y)
{
    const dsite *a = x, *b = y;
    return a->g.value < b->g.value ? 1 : a->g.value > b->g.value ? -1 : 0;
}

static int run(int argc, char **argv)
{
    long n = 10;
    int c, as_json = 0;
    rep_at from = { NULL }, to = { NULL };
    static const struct option opts[] = {
        { "from", required_argument, 0, 'F' }, { "to", required_argument, 0, 'T' },
        { "json", no_argument, 0, 'j' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        char *end;
        if (c == 'n') {
            n = strtol(optarg, &end, 10);
            if (*end || n <= 0) return cli_usage_error(&cmd_diff, "-n needs a positive number");
        } else if (c == 'F' || c == 'T') {
            if (rep_parse_at(optarg, c == 'F' ? &from : &to))
                return cli_usage_error(&cmd_diff, "'%s' is not a time (seconds since the start, or microseconds)", optarg);
        }
        else if (c == 'j') as_json = 1;
        else return cli_usage_error(&cmd_diff, "bad option");
    }
    int nfiles = argc - optind;
    if ((from.s || to.s) ? nfiles != 1 : nfiles != 2)
        return cli_usage_error(&cmd_diff, (from.s || to.s) ? "--from/--to take exactly one FILE" : "need two files, A and B");
    const char *a = argv[optind], *b = nfiles == 2 ? argv[optind + 1] : argv[optind];

    dtab t = { json_object(), NULL, 0, 0 };
    side sa, sb;
    if (load(a, &from, &t, 0, &sa)) { json_decref(t.index); free(t.v); return 1; }
    if (load(b, &to, &t, 1, &sb)) { unload(&sa); json_decref(t.index); free(t.v); return 1; }

    /* Two moments of one file are always one session. */
    const char *why = NULL;
    int paired = nfiles == 1 || pd_same_session(sa.p.meta, sb.p.meta, &why);
    const char *xa = sa.p.meta->exe, *xb = sb.p.meta->exe;
    if (xa && xb && *xa && *xb && strcmp(xa, xb))
        fprintf(stderr, "memlyze diff: warning: different programs: %s is %s, %s is %s\n", a, xa, b, xb);
    pairing pg = { &t, { sa.ids, sb.ids }, &sa.p, { { 0, 0 }, { 0, 0 } }, 0, 0 };
    double ta = 0, tb = 0, tva = 0, tvb = 0;
    if (paired) pd_changes(&sa.p, &sb.p, on_change, &pg);
    for (size_t i = 0; i < t.n; i++) {
        dsite *d = &t.v[i];
        ta += d->a; tb += d->b; tva += d->va; tvb += d->vb;
        if (paired) growth_paired(d, &d->pg, d->gc);
        else growth_independent(d, d->b - d->a, d->va + d->vb, d->cb - d->ca);
    }
    dsite total;
    if (paired) growth_paired(&total, &pg.total, 0);
    else growth_independent(&total, tb - ta, tva + tvb, 0);
    unload(&sa);
    unload(&sb);
    qsort(t.v, t.n, sizeof *t.v, cmp_growth);

    char b1[32], b2[32], b3[32], b4[32], how[128];
    if (paired)
        snprintf(how, sizeof how, "paired: %llu samples born, %llu died", (unsigned long long)pg.born,
                 (unsigned long long)pg.died);
    else snprintf(how, sizeof how, "independent estimates: %s", why);
    if (as_json) {
        json_t *root = json_object(), *arr = json_array();
        json_object_set_new(root, "a", json_string(from.s ? from.s : a));
        json_object_set_new(root, "b", json_string(to.s ? to.s : b));
        sitejson_est(root, "growth_bytes", &total.g);
        json_object_set_new(root, "growth_bytes_low", json_real(total.lo));
        json_object_set_new(root, "growth_bytes_high", json_real(total.hi));
        json_object_set_new(root, "estimate", json_string(paired ? "paired" : "independent"));
        if (paired) {
            json_object_set_new(root, "samples_born", json_integer((json_int_t)pg.born));
            json_object_set_new(root, "samples_died", json_integer((json_int_t)pg.died));
        } else json_object_set_new(root, "independent_because", json_string(why));
        for (size_t i = 0; i < t.n && i < (size_t)n; i++) {
            dsite *d = &t.v[i];
            json_t *o = json_object(), *fa = json_array();
            sitejson_est(o, "growth_bytes", &d->g);
            json_object_set_new(o, "growth_bytes_low", json_real(d->lo));
            json_object_set_new(o, "growth_bytes_high", json_real(d->hi));
            json_object_set_new(o, "a_bytes", json_real(d->a));
            json_object_set_new(o, "b_bytes", json_real(d->b));
            json_object_set_new(o, "growth_count", json_real(d->gc));
            for (unsigned j = 0; j < d->nframes; j++) json_array_append_new(fa, json_string(d->frames[j]));
            json_object_set_new(o, "frames", fa);
            json_array_append_new(arr, o);
        }
        sitejson_dump(root, arr, stdout);
    } else {
        char cell[96], pct[32];
        /* No percentage of nothing: a heap that starts empty only grows. */
        if (ta > 0) snprintf(pct, sizeof pct, "%+.1f%%", 100 * (tb - ta) / ta);
        else snprintf(pct, sizeof pct, "%s", tb > 0 ? "from nothing" : "unchanged");
        printf("live heap %s -> %s (%s); growth %s (%s)\n", cli_bytes(ta, b1, sizeof b1), cli_bytes(tb, b2, sizeof b2),
               pct, growth_cell(&total, cell, sizeof cell), how);
        printf("%4s  %-36s %11s %11s  %s\n", "rank", "growth (95% interval)", "A", "B", "site");
        for (size_t i = 0; i < t.n && i < (size_t)n; i++) {
            dsite *d = &t.v[i];
            growth_cell(d, cell, sizeof cell);
            int w = 36 + (strstr(cell, "\xc2\xb1") != NULL);   /* ± is two bytes, one column */
            printf("%4zu  %-*s %11s %11s  %s\n", i + 1, w, cell, cli_bytes(d->a, b3, sizeof b3),
                   cli_bytes(d->b, b4, sizeof b4), d->nframes ? cli_text(d->frames[0]) : "(no frames)");
            for (unsigned j = 1; j < d->nframes; j++)
                printf("%4s  %-36s %11s %11s    <- %s\n", "", "", "", "", cli_text(d->frames[j]));
        }
        if (!t.n) printf("(no allocation sites)\n");
    }
    json_decref(t.index);
    free(t.v);
    return 0;
}

const mlz_command cmd_diff = {
    "diff", run, "growth per site between two files or two moments",
    "usage: memlyze diff [-n N] [--json] A B\n"
    "       memlyze diff [-n N] [--json] --from T1 --to T2 FILE\n"
    "\n"
    "Compares the estimated live heap of A and B (two snapshots or traces of the\n"
    "same program), or of FILE at times T1 and T2 (seconds since its start, or\n"
    "microseconds since the epoch), site by site, sorted by growth: the sites\n"
    "that leak come first. Sites are matched by function, file and line, not by\n"
    "address. Each growth has its 95% interval (value \xc2\xb1 half-width, or\n"
    "low .. high when it is not symmetric). Two snapshots of one attach\n"
    "session, or two moments of one file, share their samples: growth and\n"
    "interval then come from the samples born or freed in between only\n"
    "(\"paired\" in the first line); otherwise the two sides are independent\n"
    "estimates, and a warning names the programs if they differ.\n"
    "  -n N      sites shown (default 10)\n"
    "  --json    the same as a JSON document: growth_bytes with its interval\n"
    "            growth_bytes_low .. growth_bytes_high (growth_bytes_ci95: the\n"
    "            normal half-width), \"estimate\": \"paired\" or \"independent\"\n",
};

/* diff.h: the same table for two profiles already loaded (memlyze serve). */
int diff_profiles(const prof *pa, const prof *pb, int same_file, diff_result *out)
{
    dtab t = { json_object(), NULL, 0, 0 };
    memset(out, 0, sizeof *out);
    uint32_t *ia = calloc(pa->nsites + 1, sizeof *ia), *ib = calloc(pb->nsites + 1, sizeof *ib);
    int rc = t.index && ia && ib && !collect(&t, pa, 0, ia) && !collect(&t, pb, 1, ib) ? 0 : -1;
    const char *why;
    int paired = !rc && (same_file || pd_same_session(pa->meta, pb->meta, &why));
    pairing pg = { &t, { ia, ib }, pa, { { 0, 0 }, { 0, 0 } }, 0, 0 };
    if (paired) pd_changes(pa, pb, on_change, &pg);
    free(ia);
    free(ib);
    double ta = 0, tb = 0, tva = 0, tvb = 0;
    for (size_t i = 0; !rc && i < t.n; i++) {
        dsite *d = &t.v[i];
        ta += d->a; tb += d->b; tva += d->va; tvb += d->vb;
        if (paired) growth_paired(d, &d->pg, d->gc);
        else growth_independent(d, d->b - d->a, d->va + d->vb, d->cb - d->ca);
    }
    if (!rc && t.n) {
        qsort(t.v, t.n, sizeof *t.v, cmp_growth);
        out->rows = calloc(t.n, sizeof *out->rows);
        if (!out->rows) rc = -1;
    }
    for (size_t i = 0; !rc && i < t.n; i++) {
        const dsite *d = &t.v[i];
        diff_row *r = &out->rows[out->n++];
        *r = (diff_row){ d->a, d->b, d->g.value, d->lo, d->hi, d->gc, { { 0 } }, d->nframes };
        memcpy(r->frames, d->frames, sizeof r->frames);
    }
    dsite total;
    if (paired) growth_paired(&total, &pg.total, 0);
    else growth_independent(&total, tb - ta, tva + tvb, 0);
    out->a = ta;
    out->b = tb;
    out->growth = total.g.value;
    out->lo = total.lo;
    out->hi = total.hi;
    out->paired = paired;
    out->born = pg.born;
    out->died = pg.died;
    json_decref(t.index);
    free(t.v);
    if (rc) diff_result_free(out);
    return rc;
}

void diff_result_free(diff_result *r)
{
    free(r->rows);
    memset(r, 0, sizeof *r);
}
