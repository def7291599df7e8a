/*
 * cmd_leakcheck.c - memlyze leakcheck PID|FILE.arc: heap objects no root
 * reaches, by allocation site (heapgraph.c).
 */
#include "cli.h"
#include "heapgraph.h"

#include <stdlib.h>
#include <string.h>

typedef struct leak_site { uint32_t site; uint64_t bytes, count; } leak_site;

static int by_bytes(const void *x, const void *y)
{
    const leak_site *a = x, *b = y;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    return a->site < b->site ? -1 : a->site > b->site;
}

static int run(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] == '-') return cli_usage_error(&cmd_leakcheck, "need one PID or FILE.arc");
    heapgraph g;
    char err[1024];
    if (hg_load(&g, argv[1], err, sizeof err)) { hg_free(&g); return cli_error("leakcheck", "%s", err); }
    if (hg_reach(&g)) { hg_free(&g); return cli_error("leakcheck", "out of memory"); }
    leak_site *ls = calloc(g.p.nsites + 1, sizeof *ls);
    if (!ls) { hg_free(&g); return cli_error("leakcheck", "out of memory"); }
    uint64_t nbytes = 0, nobj = 0;
    for (size_t i = 0; i <= g.p.nsites; i++) ls[i].site = (uint32_t)(i < g.p.nsites ? i : UINT32_MAX);
    for (size_t i = 0; i < g.n; i++) {
        const hg_node *nd = &g.nodes[i];
        if (nd->kind != HG_HEAP || g.parent[i] != UINT32_MAX) continue;
        leak_site *s = &ls[nd->site < g.p.nsites ? nd->site : g.p.nsites];
        s->bytes += nd->size;
        s->count++;
        nbytes += nd->size;
        nobj++;
    }
    qsort(ls, g.p.nsites + 1, sizeof *ls, by_bytes);
    size_t nsites = 0;
    while (nsites <= g.p.nsites && ls[nsites].count) nsites++;
    char b1[32], b2[32];
    printf("process %lld: %llu live objects (%s), %llu reachable from %zu roots\n", (long long)g.pid,
           (unsigned long long)g.heap_objects, cli_bytes((double)g.heap_bytes, b1, sizeof b1),
           (unsigned long long)(g.heap_objects - nobj), g.nroots);
    /* Attached to a running program: memory it allocated before is not
     * scanned, and what only that memory points to is unreachable here
     * without being leaked. */
    if (g.attached_at)
        printf("note: memlyze-attach loaded the profiler into the running program: the memory it allocated before "
               "is not known, not scanned, and an object only that memory points to is listed below as well "
               "(memlyze run -r 1 from the start sees all)\n");
    printf("%s: %llu objects, %s in %zu sites\n", g.attached_at ? "unreachable from the roots scanned" : "definitely leaked",
           (unsigned long long)nobj, cli_bytes((double)nbytes, b2, sizeof b2), nsites);
    if (nsites) printf("%12s  %8s  %s\n", "bytes", "objects", "site");
    for (size_t i = 0; i < nsites; i++) {
        char lab[2048];
        hg_site_label(&g, ls[i].site, lab, sizeof lab);
        printf("%12llu  %8llu  %s\n", (unsigned long long)ls[i].bytes, (unsigned long long)ls[i].count, lab);
    }
    free(ls);
    hg_free(&g);
    return 0;
}

const mlz_command cmd_leakcheck = {
    "leakcheck", run, "objects no root reaches, by site (definitely leaked)",
    "usage: memlyze leakcheck PID|FILE.arc\n"
    "\n"
    "Finds the heap objects that no chain of pointers from a root reaches:\n"
    "\"definitely leaked\" in LeakSanitizer's sense, on a process that keeps\n"
    "running. Roots are every module's writable data and bss, every thread's\n"
    "stack, registers, static TLS and TLS blocks of dlopen'd libraries.\n"
    "Unreachable cycles count as leaked. A pointer anywhere inside an object\n"
    "(not only at its start) keeps it. A pointer the program hides (XORed,\n"
    "compressed, stored in a file) does not: its object is reported. With a\n"
    "PID (exact mode: memlyze-attach -r 1, or memlyze run -r 1) a heap dump\n"
    "is taken first (see memlyze heapdump) and removed; with FILE.arc, its\n"
    "FILE.mlyze must lie beside it.\n"
    "Prints the totals, then bytes, objects and site (allocating function <-\n"
    "its caller) of each leaking site, largest first.\n"
    "Attached to a running program (memlyze-attach), the memory allocated\n"
    "before the attach is not scanned: objects only it points to are listed\n"
    "too, as \"unreachable from the roots scanned\", with a note.\n",
};
