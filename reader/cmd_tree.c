/*
 * cmd_tree.c - memlyze tree FILE: the call tree of the estimated heap, each
 * node with inclusive (itself and below) and self bytes; --inverted starts
 * from the allocation sites and walks towards main.
 */
#include "cli.h"
#include "profile.h"
#include "report.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

typedef struct node {
    char *name;
    double incl, self;
    int first_child, next;    /* indexes, -1 = none */
} node;

typedef struct tree {
    node *v;
    int n, cap;
} tree;

static int child(tree *t, int parent, const char *name)
{
    for (int c = t->v[parent].first_child; c >= 0; c = t->v[c].next)
        if (!strcmp(t->v[c].name, name)) return c;
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 1024;
        node *nv = realloc(t->v, (size_t)t->cap * sizeof *nv);
        if (!nv) return -1;
        t->v = nv;
    }
    node *k = &t->v[t->n];
    k->name = strdup(name);
    k->incl = k->self = 0;
    k->first_child = -1;
    k->next = t->v[parent].first_child;
    t->v[parent].first_child = t->n;
    return t->n++;
}

static double g_min;
static int g_depth;

static int cmp_incl(const void *a, const void *b, void *arg)
{
    const node *v = arg;
    double x = v[*(const int *)a].incl, y = v[*(const int *)b].incl;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void print(const tree *t, int at, int depth, double total)
{
    int kids[4096], nk = 0;
    for (int c = t->v[at].first_child; c >= 0 && nk < 4096; c = t->v[c].next) kids[nk++] = c;
    qsort_r(kids, (size_t)nk, sizeof *kids, cmp_incl, t->v);
    int hidden = 0;
    for (int i = 0; i < nk; i++) {
        const node *k = &t->v[kids[i]];
        if (k->incl < g_min * total || depth >= g_depth) { hidden++; continue; }
        char b1[32], b2[32], name[512];   /* as long as the names made below */
        snprintf(name, sizeof name, "%s", k->name);
        printf("%10s %10s %5.1f%%  %*s%s\n", cli_bytes(k->incl, b1, sizeof b1), cli_bytes(k->self, b2, sizeof b2),
               total > 0 ? 100 * k->incl / total : 0.0, 2 * depth, "", cli_text(name));
        print(t, kids[i], depth + 1, total);
    }
    if (hidden) printf("%10s %10s %6s  %*s(%d more below the cut)\n", "", "", "", 2 * depth, "", hidden);
}

static int run(int argc, char **argv)
{
    int c, inverted = 0, allocated = 0;
    g_min = 0.01;
    g_depth = 64;
    rep_at at = { NULL };
    static const struct option opts[] = {
        { "inverted", no_argument, 0, 'i' }, { "metric", required_argument, 0, 'm' },
        { "min-share", required_argument, 0, 's' }, { "depth", required_argument, 0, 'd' },
        { "at", required_argument, 0, 'a' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "i", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'i': inverted = 1; break;
        case 'm':
            if (!strcmp(optarg, "live")) allocated = 0;
            else if (!strcmp(optarg, "allocated")) allocated = 1;
            else return cli_usage_error(&cmd_tree, "--metric takes live or allocated");
            break;
        case 's':
            if (cli_parse_number(optarg, 100, &g_min))
                return cli_usage_error(&cmd_tree, "--min-share takes a percentage (0 to 100)");
            g_min /= 100;
            break;
        case 'd':
            g_depth = (int)strtol(optarg, &end, 10);
            if (*end || g_depth <= 0) return cli_usage_error(&cmd_tree, "--depth takes a positive number");
            break;
        case 'a':
            if (rep_parse_at(optarg, &at)) return cli_usage_error(&cmd_tree, "%s", "--at takes seconds since the start or an absolute time in microseconds");
            break;
        default: return cli_usage_error(&cmd_tree, "bad option");
        }
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_tree, "need exactly one FILE");
    const char *path = argv[optind];
    mlz_reader *r;
    prof p;
    if (cli_load("tree", path, &at, &r, &p)) return 1;
    tree t = { 0 };
    t.cap = 1024;
    t.v = calloc((size_t)t.cap, sizeof *t.v);
    t.v[0] = (node){ strdup("(all)"), 0, 0, -1, -1 };
    t.n = 1;
    double total = 0;
    char name[512];
    for (size_t i = 0; i < p.nsites; i++) {
        const prof_site *s = &p.sites[i];
        if (p.site_of[i] != i || !s->samples) continue;
        double v = allocated ? s->alloc_bytes.value : s->live_bytes.value;
        if (v <= 0) continue;
        total += v;
        t.v[0].incl += v;
        int at_node = 0;
        uint32_t d = s->stack->depth;
        for (uint32_t k = 0; k < d && at_node >= 0; k++) {
            const mlz_frame *f = &s->stack->frames[inverted ? k : d - 1 - k];
            /* Nodes are functions: the lines of one function are one node. */
            const char *fn = mlz_meta_function(p.meta, f->func_id);
            snprintf(name, sizeof name, "%s%s", fn ? fn : "??", f->inlined ? " [inlined]" : "");
            at_node = child(&t, at_node, name);
            if (at_node < 0) break;
            t.v[at_node].incl += v;
            /* Self is the allocation site's: the leaf, wherever it is drawn. */
            if (k == (inverted ? 0 : d - 1)) t.v[at_node].self += v;
        }
    }
    char b1[32];
    printf("%s: %s %s, %s tree; nodes under %.3g%% hidden\n", path, cli_bytes(total, b1, sizeof b1),
           allocated ? "allocated" : "live", inverted ? "inverted (allocation sites first)" : "call", g_min * 100);
    printf("%10s %10s %6s  %s\n", "inclusive", "self", "share", "function");
    print(&t, 0, 0, total);
    for (int i = 0; i < t.n; i++) free(t.v[i].name);
    free(t.v);
    cli_unload(r, &p);
    return 0;
}

const mlz_command cmd_tree = {
    "tree", run, "call tree of the heap with inclusive and self bytes",
    "usage: memlyze tree [--inverted] [--metric live|allocated] [--min-share PCT] [--depth N] [--at TIME] FILE\n"
    "\n"
    "Prints the call tree from main (or, --inverted, from the allocation sites)\n"
    "with each function's estimated inclusive and self bytes.\n"
    "  --inverted        allocation sites at the top, callers below\n"
    "  --metric M        live (default) or allocated bytes\n"
    "  --min-share PCT   hide nodes under PCT percent of the total (default 1)\n"
    "  --depth N         deepest level shown\n"
    "  --at TIME         the heap at TIME (seconds since the start, or microseconds)\n",
};
