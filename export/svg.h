/*
 * svg.h - small helpers for the SVG reports (flamegraph, timeline): XML
 * escaping, colors and "nice" axis steps.
 */
#ifndef MLZ_SVG_H
#define MLZ_SVG_H

#include <stdio.h>

/* Writes s with & < > " ' escaped (safe in text and in attributes); bytes
 * that XML 1.0 forbids (control characters) become '?'. */
void svg_text(FILE *f, const char *s);
/* A step of 1, 2 or 5 times a power of ten so that range/step is about n. */
double svg_nice_step(double range, int n);
/* A step for bytes: a nice step in the unit (B, KiB, MiB, GiB) that range
 * needs; *unit and *div say how to label it. */
double svg_bytes_step(double range, int n, const char **unit, double *div);
/* A color from a name, stable across runs (same function, same color). */
void svg_name_color(const char *name, char *buf, size_t len);

#endif
