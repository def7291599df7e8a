/*
 * flamegraph.h - a frame tree (stacks.h) drawn as one self-contained flame
 * graph, SVG or HTML: root at the bottom, each frame as wide as its
 * inclusive estimate, callees above callers, largest first. With a base
 * tree (--diff), frames are colored by their growth from the base: red grew,
 * blue shrank, pale unchanged; widths stay those of the newer profile.
 */
#ifndef MLZ_FLAMEGRAPH_H
#define MLZ_FLAMEGRAPH_H

#include "stacks.h"

typedef struct fg_opts {
    const char *title, *subtitle;
    enum rep_metric metric;
    int html;                 /* an HTML page instead of an SVG document */
    int width;                /* pixels */
    int sampled;              /* estimates carry intervals worth printing */
    const st_tree *base;      /* --diff: the base profile over the same st_frames */
    const char *base_name;
} fg_opts;

/* 0, or -1 when out of memory. */
int fg_write(FILE *f, const st_tree *t, const fg_opts *o);

/* A frame's label as the graph shows it (data-n): "func (file:line)";
 * "all" for the root (ST_NONE). #zoom=RE in the page's URL matches it. */
void fg_frame_label(const st_tree *t, uint32_t frame, char *buf, size_t len);

/* flamegraph_page.c */
extern const char fg_style[], fg_script[];

#endif
