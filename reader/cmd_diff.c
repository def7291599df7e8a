/*
 * cmd_diff.c - memlyze diff A B: what grew between two snapshots or traces
 * of the same program, per site; the leak-hunting view. Sites are matched
 * by their symbolized frames (function, file, line), never by address, so
 * two runs with different load addresses still line up.
 */
#include "cli.h"
#include "diff.h"
#include "profile.h"
#include "report.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct dsite {
    double a, va, b, vb;      /* live bytes and variances in A and B */
    double ca, cb;            /* live objects */
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

/* Adds profile p's live sites to side 0 (A) or 1 (B). */
static int collect(dtab *t, const prof *p, int side)
{
    char key[8192];
    for (size_t i = 0; i < p->nsites; i++) {
        const prof_site *s = &p->sites[i];
        if (p->site_of[i] != i || !s->live_samples) continue;
        prof_site_key(p->meta, s->stack, key, sizeof key);
        dsite *d = site_for(t, key);
        if (!d) return -1;
        if (side == 0) { d->a += s->live_bytes.value; d->va += s->live_bytes.var; d->ca += s->live_count.value; }
        else { d->b += s->live_bytes.value; d->vb += s->live_bytes.var; d->cb += s->live_count.value; }
        if (!d->nframes)
            for (uint32_t j = 0; j < s->stack->depth && j < 4; j++)
                prof_frame_name(p->meta, &s->stack->frames[j], d->frames[d->nframes++], sizeof d->frames[0]);
    }
    return 0;
}

/* The live sites of path at time `at` (NULL: its end) go to one side. */
static int load(const char *path, const rep_at *at, dtab *t, int side)
{
    mlz_reader *r;
    prof p;
    if (rep_load("diff", path, at, &r, &p)) return -1;
    int rc = collect(t, &p, side);
    rep_unload(r, &p);
    return rc;
}

static int cmp_growth(const void *x, const void *y)
{
    const dsite *a = x, *b = y;
    double ga = a->b - a->a, gb = b->b - b->a;
    return ga < gb ? 1 : ga > gb ? -1 : 0;
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
    int rc = load(a, &from, &t, 0);
    if (!rc) rc = load(b, &to, &t, 1);
    if (rc) { json_decref(t.index); free(t.v); return 1; }
    qsort(t.v, t.n, sizeof *t.v, cmp_growth);

    double ta = 0, tb = 0, tva = 0, tvb = 0;
    for (size_t i = 0; i < t.n; i++) { ta += t.v[i].a; tb += t.v[i].b; tva += t.v[i].va; tvb += t.v[i].vb; }
    char b1[32], b2[32], b3[32], b4[32];
    if (as_json) {
        json_t *root = json_object(), *arr = json_array();
        json_object_set_new(root, "a", json_string(from.s ? from.s : a));
        json_object_set_new(root, "b", json_string(to.s ? to.s : b));
        json_object_set_new(root, "growth_bytes", json_real(tb - ta));
        json_object_set_new(root, "growth_bytes_ci95", json_real(1.96 * sqrt(tva + tvb)));
        for (size_t i = 0; i < t.n && i < (size_t)n; i++) {
            dsite *d = &t.v[i];
            json_t *o = json_object(), *fa = json_array();
            json_object_set_new(o, "growth_bytes", json_real(d->b - d->a));
            json_object_set_new(o, "growth_bytes_ci95", json_real(1.96 * sqrt(d->va + d->vb)));
            json_object_set_new(o, "a_bytes", json_real(d->a));
            json_object_set_new(o, "b_bytes", json_real(d->b));
            json_object_set_new(o, "growth_count", json_real(d->cb - d->ca));
            for (unsigned j = 0; j < d->nframes; j++) json_array_append_new(fa, json_string(d->frames[j]));
            json_object_set_new(o, "frames", fa);
            json_array_append_new(arr, o);
        }
        json_object_set_new(root, "sites", arr);
        json_dumpf(root, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
        putchar('\n');
        json_decref(root);
    } else {
        printf("live heap %s -> %s (%+.1f%%); growth %s \xc2\xb1 %s (95%%)\n", cli_bytes(ta, b1, sizeof b1),
               cli_bytes(tb, b2, sizeof b2), ta > 0 ? 100 * (tb - ta) / ta : 0.0, cli_bytes(tb - ta, b3, sizeof b3),
               cli_bytes(1.96 * sqrt(tva + tvb), b4, sizeof b4));
        printf("%4s  %-26s %11s %11s  %s\n", "rank", "growth (95% interval)", "A", "B", "site");
        for (size_t i = 0; i < t.n && i < (size_t)n; i++) {
            dsite *d = &t.v[i];
            char cell[64];
            snprintf(cell, sizeof cell, "%s \xc2\xb1 %s", cli_bytes(d->b - d->a, b1, sizeof b1),
                     cli_bytes(1.96 * sqrt(d->va + d->vb), b2, sizeof b2));
            printf("%4zu  %-27s %11s %11s  %s\n", i + 1, cell, cli_bytes(d->a, b3, sizeof b3),
                   cli_bytes(d->b, b4, sizeof b4), d->nframes ? d->frames[0] : "(no frames)");
            for (unsigned j = 1; j < d->nframes; j++) printf("%4s  %-26s %11s %11s    <- %s\n", "", "", "", "", d->frames[j]);
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
    "address. Each growth has its 95% interval.\n"
    "  -n N      sites shown (default 10)\n"
    "  --json    the same as a JSON document\n",
};

/* diff.h: the same table for two profiles already loaded (memlyze serve). */
int diff_profiles(const prof *pa, const prof *pb, diff_result *out)
{
    dtab t = { json_object(), NULL, 0, 0 };
    memset(out, 0, sizeof *out);
    int rc = t.index && !collect(&t, pa, 0) && !collect(&t, pb, 1) ? 0 : -1;
    if (!rc && t.n) {
        qsort(t.v, t.n, sizeof *t.v, cmp_growth);
        out->rows = calloc(t.n, sizeof *out->rows);
        if (!out->rows) rc = -1;
    }
    double tva = 0, tvb = 0;
    for (size_t i = 0; !rc && i < t.n; i++) {
        const dsite *d = &t.v[i];
        diff_row *r = &out->rows[out->n++];
        *r = (diff_row){ d->a, d->b, d->b - d->a, 1.96 * sqrt(d->va + d->vb), d->cb - d->ca, { { 0 } }, d->nframes };
        memcpy(r->frames, d->frames, sizeof r->frames);
        out->a += d->a;
        out->b += d->b;
        tva += d->va;
        tvb += d->vb;
    }
    out->growth_ci95 = 1.96 * sqrt(tva + tvb);
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
