/*
 * timeline.h - the estimated live heap of a trace over time as one
 * self-contained SVG (memlyze timeline; memlyze serve shows it too).
 */
#ifndef MLZ_TIMELINE_H
#define MLZ_TIMELINE_H

#include "heapseries.h"

#include <stdio.h>

/* Writes the chart of h; path names the file in the default title (title
 * NULL). An element <g id="mlztl"> carries the plot's geometry for scripts:
 * data-start-us, data-span-us, data-left (px) and data-plot-width (px). */
void tl_write_svg(FILE *f, const heapseries *h, const char *path, const char *title, long width, long height);

#endif
