/*
 * heapgraph.h - a heap dump (.arc + the .mlyze beside it) as a graph:
 * what is reachable from the roots, the shortest chain from a root to an
 * object, and the dominator tree that gives retained sizes.
 */
#ifndef MLZ_HEAPGRAPH_H
#define MLZ_HEAPGRAPH_H

#include "arc.h"
#include "profile.h"

#include <stddef.h>
#include <stdint.h>

enum hg_kind { HG_ROOT, HG_GLOBAL, HG_STACK, HG_REGS, HG_TLS, HG_HEAP };

typedef struct hg_node {
    int kind;
    uint64_t addr, size;      /* in the process (registers: addr 0) */
    uint32_t site;            /* HG_HEAP: the profile's canonical site */
    uint32_t piece;           /* root pieces: index into the roots list */
} hg_node;

typedef struct hg_root_info {
    char *name, *file, *module;   /* globals; any may be NULL */
    int64_t tid;                  /* stacks, registers, TLS */
} hg_root_info;

typedef struct heapgraph {
    arc_file arc;
    hg_node *nodes;           /* parallel to arc.objs */
    size_t n;
    uint32_t root;            /* the root object */
    hg_root_info *roots;      /* the dump's root pieces */
    size_t nroots;
    uint64_t heap_objects, heap_bytes;
    int64_t pid;
    int64_t attached_at;      /* unix seconds memlyze-attach loaded the profiler, or 0 (from the start) */
    /* Strong edges, CSR: the words of node i are edges [first[i], first[i+1]). */
    uint32_t *first, *to, *at;    /* at: byte offset of the word in the source */
    size_t nedges;
    /* After hg_reach: shortest-chain parents (UINT32_MAX: unreachable). */
    uint32_t *parent, *parent_at;
    uint32_t *depth;              /* pointers from the root (the root: 0) */
    size_t reachable;
    /* After hg_dominators: immediate dominators and retained heap bytes. */
    uint32_t *idom;
    uint64_t *retained, *retained_objs;
    /* For labels: the snapshot's profile. */
    mlz_reader *r;
    prof p;
} heapgraph;

/* Loads FILE.arc and FILE.mlyze (or a PID: dumps it to a temporary pair
 * first, which is removed again). 0, or -1 with one line in err. */
int  hg_load(heapgraph *g, const char *what, char *err, size_t errlen);
void hg_free(heapgraph *g);
/* Breadth-first from the root: parent, reachable. */
int  hg_reach(heapgraph *g);
/* Cooper-Harvey-Kennedy dominators on the reachable graph, then retained
 * bytes and objects of every node (heap objects in its dominator subtree). */
int  hg_dominators(heapgraph *g);
/* "g_table (graph.c)", "thread 12 stack", "list_node (graph.c:34)"... */
void hg_label(const heapgraph *g, uint32_t i, char *buf, size_t len);
/* A heap object's site as its leaf and caller frames. */
void hg_site_label(const heapgraph *g, uint32_t site, char *buf, size_t len);
/* The chain from a root to i: "a @+16 -> b -> c [+40]". */
void hg_chain(const heapgraph *g, uint32_t i, char *buf, size_t len);
/* Whether a site's leaf function (the allocating one) is name. */
int  hg_site_is(const heapgraph *g, uint32_t site, const char *name);
/* Retained bytes of each site: the union of its objects' dominator
 * subtrees (an object below another of the same site is counted once).
 * out[site] and objs[site], arrays of p.nsites. */
int  hg_site_retained(const heapgraph *g, uint64_t *out, uint64_t *objs);

#endif
