/*
 * stacks.h - folding sites into a tree of frames (root at node 0, callers
 * above callees), for flame graphs and their diffs.
 *
 * Frames are symbolic: (function, file, line) as strings, interned in an
 * st_frames table that two trees can share, so a tree built from another
 * recording of the same program matches node for node by symbol, whatever
 * the addresses (ASLR, another build).
 */
#ifndef MLZ_STACKS_H
#define MLZ_STACKS_H

#include "keymap.h"
#include "report.h"

typedef struct st_frame {
    const char *func, *file;  /* file may be "" */
    uint32_t line;
    int inlined;              /* as first seen */
} st_frame;

typedef struct st_frames {
    keymap *map;
    st_frame *f;
    size_t n, cap;
} st_frames;

int      st_frames_init(st_frames *t);
void     st_frames_free(st_frames *t);
/* The index of frame f of a file with metadata m; UINT32_MAX on out of memory. */
uint32_t st_frame_of(st_frames *t, const mlz_meta *m, const mlz_frame *f);

#define ST_NONE UINT32_MAX

typedef struct st_node {
    uint32_t frame;           /* ST_NONE for the root */
    uint32_t parent, first_child, next_sibling;
    uint32_t depth;           /* root 0 */
    est total, self;          /* inclusive and own estimates (variances add up:
                                 the sites' allocations are independent) */
} st_node;

typedef struct st_tree {
    st_frames *frames;
    st_node *n;
    size_t count, cap;
    keymap *kids;             /* (parent, frame) -> node */
} st_tree;

int  st_tree_init(st_tree *t, st_frames *frames);
void st_tree_free(st_tree *t);
/* Adds v along the stack's frames, outermost caller first; 0 or -1 (OOM). */
int  st_tree_add(st_tree *t, const mlz_meta *m, const mlz_stack *st, const est *v);
/* Every site of p with a nonzero metric m. */
int  st_tree_from_prof(st_tree *t, const prof *p, enum rep_metric m);
uint32_t st_tree_child(const st_tree *t, uint32_t parent, uint32_t frame);
/* Orders every node's children by total, largest first (ties by name). */
int  st_tree_sort(st_tree *t);

#endif
