/*
 * cmd_retainers.c - memlyze retainers FILE --site NAME|--addr ADDR: the
 * shortest chains of pointers from a root to objects (heapgraph.c).
 */
#include "cli.h"
#include "heapgraph.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

typedef struct hit { uint32_t node, depth; } hit;

static int by_depth(const void *x, const void *y)
{
    const hit *a = x, *b = y;
    if (a->depth != b->depth) return a->depth < b->depth ? -1 : 1;
    return a->node < b->node ? -1 : a->node > b->node;
}

static int run(int argc, char **argv)
{
    const char *site = NULL, *addr_s = NULL;
    long nmax = 3;
    int c;
    static const struct option opts[] = {
        { "site", required_argument, 0, 's' }, { "addr", required_argument, 0, 'a' },
        { "count", required_argument, 0, 'n' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "s:a:n:", opts, NULL)) != -1) {
        if (c == 's') site = optarg;
        else if (c == 'a') addr_s = optarg;
        else if (c == 'n') {
            char *end;
            nmax = strtol(optarg, &end, 10);
            if (*end || nmax <= 0) return cli_usage_error(&cmd_retainers, "-n needs a positive count");
        } else return cli_usage_error(&cmd_retainers, "bad option");
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_retainers, "need one FILE.arc or PID");
    if (!site == !addr_s) return cli_usage_error(&cmd_retainers, "need one of --site NAME or --addr ADDR");
    uint64_t addr = 0;
    if (addr_s) {
        char *end;
        addr = strtoull(addr_s, &end, 0);
        if (*end || !addr) return cli_usage_error(&cmd_retainers, "'%s' is not an address", addr_s);
    }
    heapgraph g;
    char err[1024];
    if (hg_load(&g, argv[optind], err, sizeof err)) { hg_free(&g); return cli_error("retainers", "%s", err); }
    if (hg_reach(&g)) { hg_free(&g); return cli_error("retainers", "out of memory"); }
    hit *h = malloc((g.n ? g.n : 1) * sizeof *h);
    if (!h) { hg_free(&g); return cli_error("retainers", "out of memory"); }
    size_t nh = 0, leaked = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < g.n; i++) {
        const hg_node *nd = &g.nodes[i];
        if (nd->kind != HG_HEAP) continue;
        if (site ? !hg_site_is(&g, nd->site, site) : !(addr >= nd->addr && addr - nd->addr < (nd->size ? nd->size : 1)))
            continue;
        bytes += nd->size;
        if (g.parent[i] == UINT32_MAX) { leaked++; continue; }
        h[nh++] = (hit){ (uint32_t)i, g.depth[i] };
    }
    if (!nh && !leaked) {
        free(h);
        hg_free(&g);
        if (site) return cli_error("retainers", "no live object was allocated by a function named %s", site);
        return cli_error("retainers", "no live object holds address %#llx", (unsigned long long)addr);
    }
    qsort(h, nh, sizeof *h, by_depth);
    char b[32];
    printf("%zu objects (%s) %s %s: %zu reachable, %zu unreachable (leaked)\n", nh + leaked,
           cli_bytes((double)bytes, b, sizeof b), site ? "allocated by" : "holding",
           site ? site : addr_s, nh, leaked);
    if (nh) printf("shortest chains from a root:\n");
    static char chain[65536];
    for (size_t i = 0; i < nh && i < (size_t)nmax; i++) {
        hg_chain(&g, h[i].node, chain, sizeof chain);
        printf("  %s\n", chain);
    }
    free(h);
    hg_free(&g);
    return 0;
}

const mlz_command cmd_retainers = {
    "retainers", run, "shortest chains from a root to objects of a site",
    "usage: memlyze retainers (--site NAME | --addr ADDR) [-n N] FILE.arc|PID\n"
    "\n"
    "Why is it still alive: prints the shortest chains of pointers from a root\n"
    "(a global by symbol name, a thread's stack, registers or TLS) to the\n"
    "objects allocated by function NAME, or to the object holding address ADDR,\n"
    "shortest first. Each step names the object (a global's symbol and source\n"
    "file or module, or a heap object's allocating function and line) and the\n"
    "offset of the field holding the next pointer (@+16); [+40] marks a pointer\n"
    "into the middle of an object. For example:\n"
    "  g_cache (server.c) @+0 -> cache_new (server.c:38) @+16 -> entry_new (server.c:40)\n"
    "  -s, --site NAME   objects whose allocating function is NAME\n"
    "  -a, --addr ADDR   the object holding this address (0x... or decimal)\n"
    "  -n, --count N     chains to print (default 3)\n"
    "With a PID a heap dump is taken first (see memlyze heapdump) and removed.\n",
};
