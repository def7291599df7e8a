/*
 * speedscope.h - a replayed profile in speedscope's file format (the
 * published schema https://www.speedscope.app/file-format-schema.json):
 * shared frames and one "sampled" profile per metric (live bytes, allocated
 * bytes, live objects, allocations), each sample one site, root first,
 * weighted by its estimate.
 */
#ifndef MLZ_SPEEDSCOPE_H
#define MLZ_SPEEDSCOPE_H

#include "profile.h"

#include <stdio.h>

/* name: shown by speedscope as the profile group's name. 0 or -1 with err. */
int speedscope_write(FILE *f, const prof *p, const char *name, char *err, size_t errlen);

#endif
