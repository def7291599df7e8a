/*
 * finalize.h - spool (raw PCs, written inside the target) to symbolized
 * .mlyze trace (written here, outside it).
 */
#ifndef MLZ_FINALIZE_H
#define MLZ_FINALIZE_H

#include <stddef.h>

/* 0, or -1 with a one-line reason in err. Never leaves a partial OUT.
 * kind: "trace" (a recording) or "snapshot" (the live heap at one moment). */
int mlz_finalize(const char *spool, const char *out, const char *kind, int compress, int replace,
                 char *err, size_t errlen);

#endif
