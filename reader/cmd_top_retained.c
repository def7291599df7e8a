/*
 * cmd_top_retained.c - memlyze top --retained FILE.arc|PID: sites and root
 * pieces (globals, stacks) ranked by the heap bytes they alone keep alive,
 * from the dominator tree of a heap dump (heapgraph.c).
 */
#include "cli.h"
#include "heapgraph.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

typedef struct row { uint64_t bytes, objects; int is_site; uint32_t which; } row;

static int by_bytes(const void *x, const void *y)
{
    const row *a = x, *b = y;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    if (a->is_site != b->is_site) return a->is_site ? 1 : -1;   /* globals first on ties */
    return a->which < b->which ? -1 : a->which > b->which;
}

int top_retained_run(int argc, char **argv)
{
    long n = 10;
    int c;
    static const struct option opts[] = {
        { "retained", no_argument, 0, 'R' }, { "count", required_argument, 0, 'n' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        if (c == 'n') {
            char *end;
            n = strtol(optarg, &end, 10);
            if (*end || n <= 0) return cli_usage_error(&cmd_top, "-n needs a positive count");
        } else if (c != 'R') return cli_usage_error(&cmd_top, "--retained takes only -n N and FILE.arc or PID");
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_top, "--retained needs one FILE.arc or PID");
    heapgraph g;
    char err[1024];
    if (hg_load(&g, argv[optind], err, sizeof err)) { hg_free(&g); return cli_error("top", "%s", err); }
    uint64_t *sb = calloc(g.p.nsites + 1, sizeof *sb), *so = calloc(g.p.nsites + 1, sizeof *so);
    row *rows = malloc((g.p.nsites + g.nroots + 1) * sizeof *rows);
    if (!sb || !so || !rows || hg_reach(&g) || hg_dominators(&g) || hg_site_retained(&g, sb, so)) {
        free(sb); free(so); free(rows); hg_free(&g);
        return cli_error("top", "out of memory");
    }
    size_t nr = 0;
    uint64_t leaked = 0, leaked_n = 0;
    for (size_t i = 0; i < g.n; i++) {
        const hg_node *nd = &g.nodes[i];
        if (nd->kind == HG_HEAP && g.parent[i] == UINT32_MAX) { leaked += nd->size; leaked_n++; }
        if (nd->kind != HG_HEAP && nd->kind != HG_ROOT && g.retained[i])
            rows[nr++] = (row){ g.retained[i], g.retained_objs[i], 0, (uint32_t)i };
    }
    for (size_t s = 0; s < g.p.nsites; s++)
        if (sb[s]) rows[nr++] = (row){ sb[s], so[s], 1, (uint32_t)s };
    qsort(rows, nr, sizeof *rows, by_bytes);
    char b1[32], b2[32];
    printf("heap dump of process %lld: %llu objects (%s); %llu unreachable (%s) retain nothing\n", (long long)g.pid,
           (unsigned long long)g.heap_objects, cli_bytes((double)g.heap_bytes, b1, sizeof b1),
           (unsigned long long)leaked_n, cli_bytes((double)leaked, b2, sizeof b2));
    printf("%4s  %12s  %10s  %8s  %-6s  %s\n", "rank", "retained B", "", "objects", "kind", "what");
    for (size_t i = 0; i < nr && i < (size_t)n; i++) {
        char lab[2048];
        if (rows[i].is_site) hg_site_label(&g, rows[i].which, lab, sizeof lab);
        else hg_label(&g, rows[i].which, lab, sizeof lab);
        printf("%4zu  %12llu  %10s  %8llu  %-6s  %s\n", i + 1, (unsigned long long)rows[i].bytes,
               cli_bytes((double)rows[i].bytes, b1, sizeof b1), (unsigned long long)rows[i].objects,
               rows[i].is_site ? "site" : g.nodes[rows[i].which].kind == HG_GLOBAL ? "global" : "thread", lab);
    }
    free(sb); free(so); free(rows);
    hg_free(&g);
    return 0;
}
