/*
 * sitejson.h - the JSON shape of a report's sites, one writer for every
 * command that prints them (top, leaks and temporary, diff, export json):
 * an estimate is "KEY" with its 95% half-width "KEY_ci95", a site's call
 * chain is "frames" (leaf first), and a report is an object with a "sites"
 * array, dumped with indent 1 and 17 significant digits.
 */
#ifndef MLZ_SITEJSON_H
#define MLZ_SITEJSON_H

#include "profile.h"

#include <jansson.h>
#include <stdio.h>

/* o[key] = e's value, o[key_ci95] = its 95% half-width. */
void    sitejson_est(json_t *o, const char *key, const est *e);

/* A site's own figures: stack_id, samples, live_samples, live_bytes,
 * live_count, alloc_bytes, alloc_count (each with _ci95), peak_bytes and
 * peak_us. The caller adds "frames" and what its report ranks by. */
json_t *sitejson_site(const prof_site *s);

/* "func (file:line)" names of the first max frames of st. */
json_t *sitejson_frame_names(const mlz_meta *m, const mlz_stack *st, uint32_t max);

/* report["sites"] = sites, then the whole report to f and a newline. Takes
 * both references; 0, or -1 if the write failed. */
int     sitejson_dump(json_t *report, json_t *sites, FILE *f);

#endif
