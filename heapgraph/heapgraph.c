/*
 * heapgraph.c - analyses of a heap dump as a graph of objects.
 *
 * Nodes are the .arc's objects: the root object, the root pieces it points
 * to (globals, stacks, registers, TLS: heapdump.c) and the heap objects,
 * which the .mlyze beside the dump names in the same order as its ALLOC
 * events (address, site, thread, birth). Edges are the strong tagged words
 * (weak references retain nothing).
 *
 * Reachability is a breadth-first search from the root, so the parent links
 * give the shortest chains. Dominators use Cooper, Harvey and Kennedy's
 * iterative algorithm ("A Simple, Fast Dominance Algorithm", 2001): walk the
 * nodes in reverse postorder, intersect the dominators of the processed
 * predecessors, repeat until nothing changes. Heap graphs are shallow and
 * mostly tree-like, so it settles in a few rounds and beats Lengauer-Tarjan
 * on code size. A node's retained size is the heap bytes of its dominator
 * subtree: what would be freed if it let go.
 */
#include "errbuf.h"
#include "heapgraph.h"
#include "heapdump.h"

#include <ctype.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NONE UINT32_MAX

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static char *jstr(json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? strdup(s) : NULL;
}

/* The heapdump's metadata: id and root pieces; nodes get their kinds. */
static int read_links(heapgraph *g, const char *arc, const char *side, char *err, size_t errlen)
{
    const mlz_meta *m = g->p.meta;
    json_t *hd = json_object_get((json_t *)m->root, "heapdump");
    const char *id = json_string_value(json_object_get(hd, "id"));
    json_t *roots = json_object_get(hd, "roots");
    g->attached_at = json_integer_value(json_object_get(hd, "attached_at"));
    if (!id || !json_is_array(roots))
        return errbuf_set(err, errlen, "%s is not the snapshot of a heap dump (no \"heapdump\" metadata)", side);
    const arc_obj *ro = &g->arc.objs[g->arc.root];
    if (ro->size < 8 || strtoull(id, NULL, 16) != rd64(ro->data))
        return errbuf_set(err, errlen, "%s and %s are not of the same dump (ids differ)", arc, side);
    g->pid = m->pid;
    g->nroots = json_array_size(roots);
    g->roots = calloc(g->nroots ? g->nroots : 1, sizeof *g->roots);
    if (!g->roots) return errbuf_set(err, errlen, "out of memory");
    if (ro->size < 8 * (g->nroots + 1)) return errbuf_set(err, errlen, "%s: the root object has fewer roots than %s lists", arc, side);
    for (size_t i = 0; i < g->n; i++) g->nodes[i].kind = HG_HEAP;
    g->nodes[g->arc.root].kind = HG_ROOT;
    for (size_t i = 0; i < g->nroots; i++) {
        json_t *r = json_array_get(roots, i);
        const char *kind = json_string_value(json_object_get(r, "kind"));
        g->roots[i] = (hg_root_info){ jstr(r, "name"), jstr(r, "file"), jstr(r, "module"),
                                      json_integer_value(json_object_get(r, "tid")) };
        long k = arc_tagged(ro, i + 1) ? arc_find(&g->arc, rd64(ro->data + 8 * (i + 1))) : -1;
        if (k < 0 || !kind) return errbuf_set(err, errlen, "%s: root %zu of %s is missing", arc, i, side);
        hg_node *nd = &g->nodes[k];
        nd->kind = !strcmp(kind, "global") ? HG_GLOBAL : !strcmp(kind, "stack") ? HG_STACK
                 : !strcmp(kind, "registers") ? HG_REGS : HG_TLS;
        nd->piece = (uint32_t)i;
        nd->addr = (uint64_t)json_integer_value(json_object_get(r, "addr"));
        nd->size = g->arc.objs[k].size;
    }
    return 0;
}

/* The heap objects, in ALLOC order, get their addresses and sites. */
static int read_objects(heapgraph *g, const char *arc, const char *side, char *err, size_t errlen)
{
    mlz_error me = { 0 };
    mlz_reader *r = mlz_reader_open(side, 0, &me);
    if (!r) return errbuf_set(err, errlen, "%s: %s", side, me.msg);
    const mlz_meta *m = g->p.meta;
    size_t next = 0;
    mlz_event ev;
    int rc;
    while ((rc = mlz_reader_next(r, &ev, &me)) == 1) {
        if (ev.type != MLZ_EV_ALLOC) continue;
        while (next < g->n && g->nodes[next].kind != HG_HEAP) next++;
        if (next == g->n) break;
        uint64_t size = ev.size ? ev.size : 1;
        if (g->arc.objs[next].size != size) break;
        const mlz_stack *st = mlz_meta_stack(m, ev.stack_id);
        g->nodes[next].addr = ev.addr;
        g->nodes[next].size = ev.size;
        g->nodes[next].site = st ? g->p.site_of[st - m->stacks] : NONE;
        g->heap_objects++;
        g->heap_bytes += ev.size;
        next++;
    }
    mlz_reader_close(r);
    if (rc < 0) return errbuf_set(err, errlen, "%s: %s", side, me.msg);
    while (next < g->n && g->nodes[next].kind != HG_HEAP) next++;
    if (rc == 1 || next != g->n)
        return errbuf_set(err, errlen, "%s and %s do not match: object %zu differs from its ALLOC event", arc, side, next);
    return 0;
}

static int build_edges(heapgraph *g)
{
    g->first = calloc(g->n + 1, sizeof *g->first);
    if (!g->first) return -1;
    for (int pass = 0; pass < 2; pass++) {
        size_t e = 0;
        for (size_t i = 0; i < g->n; i++) {
            const arc_obj *o = &g->arc.objs[i];
            g->first[i] = (uint32_t)e;
            for (uint64_t w = 0; w < o->size / 8; w++) {
                if (!o->bitmap[w / 8]) { w |= 7; continue; }
                if (!arc_tagged(o, w)) continue;
                uint64_t v = rd64(o->data + 8 * w);
                if (!v || (v & ARC_WEAK)) continue;
                long t = arc_find(&g->arc, v);
                if (t < 0) continue;
                if (pass) { g->to[e] = (uint32_t)t; g->at[e] = (uint32_t)(8 * w); }
                e++;
            }
        }
        g->first[g->n] = (uint32_t)e;
        if (!pass) {
            g->nedges = e;
            g->to = malloc((e ? e : 1) * sizeof *g->to);
            g->at = malloc((e ? e : 1) * sizeof *g->at);
            if (!g->to || !g->at) return -1;
        }
    }
    return 0;
}

static int load_pair(heapgraph *g, const char *arc, char *err, size_t errlen)
{
    char side[PATH_MAX];
    if (hd_mlyze_name(arc, side, sizeof side)) return errbuf_set(err, errlen, "%s: name too long", arc);
    arc_error e;
    if (arc_open(&g->arc, arc, &e)) {
        if (!strcmp(e.rule, "io")) return errbuf_set(err, errlen, "%s: %s", arc, e.msg);
        return errbuf_set(err, errlen, "%s: invalid: %s at byte %llu: %s", arc, e.rule, (unsigned long long)e.offset, e.msg);
    }
    g->n = g->arc.nobjs;
    if (g->n >= NONE) return errbuf_set(err, errlen, "%s: too many objects", arc);
    g->root = (uint32_t)g->arc.root;
    g->nodes = calloc(g->n, sizeof *g->nodes);
    if (!g->nodes) return errbuf_set(err, errlen, "out of memory");
    mlz_error me = { 0 };
    g->r = mlz_reader_open(side, 0, &me);
    if (!g->r) return errbuf_set(err, errlen, "%s: %s (a dump's snapshot lies beside it)", side, me.msg);
    if (prof_replay(&g->p, g->r, UINT64_MAX, &me)) { mlz_reader_close(g->r); g->r = NULL; return errbuf_set(err, errlen, "%s: %s", side, me.msg); }
    if (read_links(g, arc, side, err, errlen) || read_objects(g, arc, side, err, errlen)) return -1;
    if (build_edges(g)) return errbuf_set(err, errlen, "out of memory");
    return 0;
}

int hg_load(heapgraph *g, const char *what, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    size_t i = 0;
    while (isdigit((unsigned char)what[i])) i++;
    if (i == 0 || what[i]) {
        size_t l = strlen(what);
        if (l < 5 || strcmp(what + l - 4, ".arc")) return errbuf_set(err, errlen, "%s: not a .arc heap dump or a process id", what);
        return load_pair(g, what, err, errlen);
    }
    /* A process: dump it into a private folder, read, remove. */
    long pid = strtol(what, NULL, 10);
    if (pid <= 0 || pid > 0x7fffffff) return errbuf_set(err, errlen, "'%s' is not a process id", what);
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_MAX], arc[PATH_MAX + 32], side[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/memlyze-heapdump.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return errbuf_set(err, errlen, "cannot create a folder under %s", tmp && *tmp ? tmp : "/tmp");
    snprintf(arc, sizeof arc, "%s/dump.arc", dir);
    snprintf(side, sizeof side, "%s/dump.mlyze", dir);
    hd_stats st;
    int rc = hd_dump((pid_t)pid, arc, side, 0, &st, err, errlen);
    if (!rc) rc = load_pair(g, arc, err, errlen);
    unlink(arc);
    unlink(side);
    rmdir(dir);
    return rc;
}

void hg_free(heapgraph *g)
{
    arc_close(&g->arc);
    for (size_t i = 0; i < g->nroots; i++) { free(g->roots[i].name); free(g->roots[i].file); free(g->roots[i].module); }
    free(g->roots);
    free(g->nodes);
    free(g->first);
    free(g->to);
    free(g->at);
    free(g->parent);
    free(g->parent_at);
    free(g->depth);
    free(g->idom);
    free(g->retained);
    free(g->retained_objs);
    if (g->r) { prof_free(&g->p); mlz_reader_close(g->r); }
    memset(g, 0, sizeof *g);
}

int hg_reach(heapgraph *g)
{
    uint32_t *q = malloc((g->n + 1) * sizeof *q);
    g->parent = malloc((g->n + 1) * sizeof *g->parent);
    g->parent_at = malloc((g->n + 1) * sizeof *g->parent_at);
    g->depth = calloc(g->n + 1, sizeof *g->depth);
    if (!q || !g->parent || !g->parent_at || !g->depth) { free(q); return -1; }
    for (size_t i = 0; i < g->n; i++) g->parent[i] = NONE;
    size_t h = 0, t = 0;
    q[t++] = g->root;
    g->parent[g->root] = g->root;
    while (h < t) {
        uint32_t v = q[h++];
        for (uint32_t e = g->first[v]; e < g->first[v + 1]; e++)
            if (g->parent[g->to[e]] == NONE) {
                g->parent[g->to[e]] = v;
                g->parent_at[g->to[e]] = g->at[e];
                g->depth[g->to[e]] = g->depth[v] + 1;
                q[t++] = g->to[e];
            }
    }
    g->reachable = t;
    free(q);
    return 0;
}

static uint32_t intersect(const uint32_t *idom, const uint32_t *po, uint32_t a, uint32_t b)
{
    while (a != b) {
        while (po[a] < po[b]) a = idom[a];
        while (po[b] < po[a]) b = idom[b];
    }
    return a;
}

int hg_dominators(heapgraph *g)
{
    size_t n = g->n;
    int rc = -1;
    uint32_t *po = malloc(n * sizeof *po), *rpo = malloc(n * sizeof *rpo);
    uint32_t *stk = malloc(n * sizeof *stk), *cur = malloc(n * sizeof *cur);
    uint32_t *pfirst = calloc(n + 1, sizeof *pfirst), *preds = malloc((g->nedges ? g->nedges : 1) * sizeof *preds);
    g->idom = malloc(n * sizeof *g->idom);
    g->retained = calloc(n, sizeof *g->retained);
    g->retained_objs = calloc(n, sizeof *g->retained_objs);
    if (!po || !rpo || !stk || !cur || !pfirst || !preds || !g->idom || !g->retained || !g->retained_objs) goto out;

    /* Postorder numbers by an explicit-stack depth-first walk. */
    for (size_t i = 0; i < n; i++) { po[i] = NONE; g->idom[i] = NONE; }
    size_t sp = 0, np = 0;
    stk[sp++] = g->root;
    cur[g->root] = g->first[g->root];
    po[g->root] = NONE - 1;     /* on the stack */
    while (sp) {
        uint32_t v = stk[sp - 1];
        if (cur[v] < g->first[v + 1]) {
            uint32_t w = g->to[cur[v]++];
            if (po[w] == NONE) { po[w] = NONE - 1; cur[w] = g->first[w]; stk[sp++] = w; }
        } else {
            po[v] = (uint32_t)np;
            rpo[n - 1 - np] = v;
            np++;
            sp--;
        }
    }
    uint32_t *order = rpo + (n - np);     /* reverse postorder of the reachable nodes */

    /* Predecessors among reachable nodes. */
    for (size_t v = 0; v < n; v++)
        if (po[v] != NONE)
            for (uint32_t e = g->first[v]; e < g->first[v + 1]; e++) pfirst[g->to[e] + 1]++;
    for (size_t v = 0; v < n; v++) pfirst[v + 1] += pfirst[v];
    for (size_t v = 0; v < n; v++) cur[v] = pfirst[v];
    for (size_t v = 0; v < n; v++)
        if (po[v] != NONE)
            for (uint32_t e = g->first[v]; e < g->first[v + 1]; e++) preds[cur[g->to[e]]++] = (uint32_t)v;

    g->idom[g->root] = g->root;
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t k = 1; k < np; k++) {
            uint32_t v = order[k], nd = NONE;
            for (uint32_t e = pfirst[v]; e < pfirst[v + 1]; e++) {
                uint32_t p = preds[e];
                if (g->idom[p] == NONE) continue;
                nd = nd == NONE ? p : intersect(g->idom, po, p, nd);
            }
            if (nd != NONE && g->idom[v] != nd) { g->idom[v] = nd; changed = 1; }
        }
    }
    /* Retained sizes: children come after their dominator in reverse postorder. */
    for (size_t k = 0; k < np; k++) {
        uint32_t v = order[k];
        if (g->nodes[v].kind == HG_HEAP) { g->retained[v] = g->nodes[v].size; g->retained_objs[v] = 1; }
    }
    for (size_t k = np; k-- > 1;) {
        uint32_t v = order[k];
        g->retained[g->idom[v]] += g->retained[v];
        g->retained_objs[g->idom[v]] += g->retained_objs[v];
    }
    rc = 0;
out:
    free(po); free(rpo); free(stk); free(cur); free(pfirst); free(preds);
    return rc;
}

int hg_site_retained(const heapgraph *g, uint64_t *out, uint64_t *objs)
{
    size_t n = g->n;
    uint32_t *cfirst = calloc(n + 1, sizeof *cfirst), *kids = malloc((n ? n : 1) * sizeof *kids);
    uint32_t *stk = malloc((n ? n : 1) * sizeof *stk), *cur = malloc((n ? n : 1) * sizeof *cur);
    uint32_t *active = calloc(g->p.nsites + 1, sizeof *active);
    int rc = -1;
    if (!cfirst || !kids || !stk || !cur || !active) goto out;
    memset(out, 0, g->p.nsites * sizeof *out);
    memset(objs, 0, g->p.nsites * sizeof *objs);
    for (size_t v = 0; v < n; v++)
        if (g->idom[v] != NONE && v != g->root) cfirst[g->idom[v] + 1]++;
    for (size_t v = 0; v < n; v++) cfirst[v + 1] += cfirst[v];
    for (size_t v = 0; v < n; v++) cur[v] = cfirst[v];
    for (size_t v = 0; v < n; v++)
        if (g->idom[v] != NONE && v != g->root) kids[cur[g->idom[v]]++] = (uint32_t)v;
    /* Depth-first over the dominator tree: an object counts for its site
     * unless one of its dominators is of the same site. */
    size_t sp = 0;
    stk[sp++] = g->root;
    cur[g->root] = cfirst[g->root];
    while (sp) {
        uint32_t v = stk[sp - 1];
        if (cur[v] < cfirst[v + 1]) {
            uint32_t w = kids[cur[v]++];
            const hg_node *nd = &g->nodes[w];
            if (nd->kind == HG_HEAP && nd->site != NONE) {
                if (!active[nd->site]) { out[nd->site] += g->retained[w]; objs[nd->site] += g->retained_objs[w]; }
                active[nd->site]++;
            }
            cur[w] = cfirst[w];
            stk[sp++] = w;
        } else {
            const hg_node *nd = &g->nodes[v];
            if (nd->kind == HG_HEAP && nd->site != NONE) active[nd->site]--;
            sp--;
        }
    }
    rc = 0;
out:
    free(cfirst); free(kids); free(stk); free(cur); free(active);
    return rc;
}

void hg_site_label(const heapgraph *g, uint32_t site, char *buf, size_t len)
{
    if (site == NONE || site >= g->p.nsites || !g->p.sites[site].stack || !g->p.sites[site].stack->depth) {
        snprintf(buf, len, "(unknown site)");
        return;
    }
    const mlz_stack *st = g->p.sites[site].stack;
    char a[512], b[512];
    prof_frame_label(g->p.meta, &st->frames[0], a, sizeof a);
    if (st->depth > 1) {
        prof_frame_label(g->p.meta, &st->frames[1], b, sizeof b);
        snprintf(buf, len, "%s <- %s", a, b);
    } else {
        snprintf(buf, len, "%s", a);
    }
}

int hg_site_is(const heapgraph *g, uint32_t site, const char *name)
{
    if (site == NONE || site >= g->p.nsites || !g->p.sites[site].stack) return 0;
    const mlz_stack *st = g->p.sites[site].stack;
    const mlz_meta *m = g->p.meta;
    if (st->depth) {
        const char *fn = mlz_meta_function(m, st->frames[0].func_id);
        return fn && !strcmp(fn, name);
    }
    return 0;
}

static const char *const reg_names[] = {
    "r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8", "rax", "rcx", "rdx", "rsi",
    "rdi", "orig_rax", "rip", "cs", "eflags", "rsp", "ss", "fs_base", "gs_base", "ds", "es", "fs", "gs",
};

void hg_label(const heapgraph *g, uint32_t i, char *buf, size_t len)
{
    const hg_node *nd = &g->nodes[i];
    const hg_root_info *ri = nd->kind != HG_HEAP && nd->kind != HG_ROOT ? &g->roots[nd->piece] : NULL;
    const char *mod = ri && ri->module ? strrchr(ri->module, '/') : NULL;
    mod = mod ? mod + 1 : ri && ri->module ? ri->module : "?";
    switch (nd->kind) {
    case HG_ROOT: snprintf(buf, len, "(root)"); break;
    case HG_GLOBAL:
        if (ri->name) snprintf(buf, len, "%s (%s)", ri->name, ri->file ? ri->file : mod);
        else snprintf(buf, len, "data of %s at %#llx", mod, (unsigned long long)nd->addr);
        break;
    case HG_STACK: snprintf(buf, len, "thread %lld stack", (long long)ri->tid); break;
    case HG_REGS: snprintf(buf, len, "thread %lld registers", (long long)ri->tid); break;
    case HG_TLS: snprintf(buf, len, "thread %lld TLS", (long long)ri->tid); break;
    default: {
        char s[1024];
        hg_site_label(g, nd->site, s, sizeof s);
        char *lt = strstr(s, " <- ");
        if (lt) *lt = 0;
        snprintf(buf, len, "%s", s);
    }
    }
}

void hg_chain(const heapgraph *g, uint32_t i, char *buf, size_t len)
{
    uint32_t path[64];
    size_t n = 0;
    for (uint32_t v = i; v != g->root && g->parent[v] != NONE && n < 64; v = g->parent[v]) path[n++] = v;
    size_t o = 0;
    buf[0] = 0;
    if (n == 64) o += (size_t)snprintf(buf, len, "... -> ");
    for (size_t k = n; k-- > 0 && o < len;) {
        uint32_t v = path[k];
        char lab[1024];
        hg_label(g, v, lab, sizeof lab);
        o += (size_t)snprintf(buf + o, len - o, "%s", lab);
        /* Where the pointer landed, when not at the start. */
        if (k + 1 < n || n == 64) {
            const arc_obj *src = &g->arc.objs[g->parent[v]];
            uint64_t into = rd64(src->data + g->parent_at[v]) - g->arc.objs[v].id;
            if (into && o < len) o += (size_t)snprintf(buf + o, len - o, " [+%llu]", (unsigned long long)into);
        }
        if (k > 0 && o < len) {
            uint32_t off = g->parent_at[path[k - 1]];
            if (g->nodes[v].kind == HG_REGS && off / 8 < sizeof reg_names / sizeof *reg_names)
                o += (size_t)snprintf(buf + o, len - o, " %s -> ", reg_names[off / 8]);
            else
                o += (size_t)snprintf(buf + o, len - o, " @+%u -> ", off);
        }
    }
}
