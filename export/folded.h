/*
 * folded.h - Brendan Gregg's folded stacks: one line per stack,
 * "root;caller;...;leaf VALUE", the input of flamegraph.pl, speedscope,
 * inferno and most flame-graph tools.
 *
 * Frames are function names; inlined frames get the "_[i]" suffix that
 * stackcollapse-perf.pl uses. ';' inside a name (rare C++ templates) becomes
 * ':' so it cannot split a frame. Sites whose function chains are equal are
 * summed into one line; lines are sorted; values are rounded estimates and
 * lines rounding to 0 are left out.
 */
#ifndef MLZ_FOLDED_H
#define MLZ_FOLDED_H

#include "report.h"

int folded_write(FILE *f, const prof *p, enum rep_metric m, char *err, size_t errlen);

#endif
