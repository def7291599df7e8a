/*
 * diff.h - growth per site between two loaded profiles, as memlyze diff
 * computes it (cmd_diff.c), for the commands that show it elsewhere
 * (memlyze serve).
 */
#ifndef MLZ_DIFF_H
#define MLZ_DIFF_H

#include "profile.h"

typedef struct diff_row {
    double a, b;              /* live bytes in A and B */
    double growth, lo, hi;    /* with its 95% interval (paired: not symmetric) */
    double count_growth;      /* live objects */
    char frames[4][256];      /* innermost first */
    unsigned nframes;
} diff_row;

typedef struct diff_result {
    diff_row *rows;           /* largest growth first */
    size_t n;
    double a, b, growth, lo, hi;   /* the totals */
    int paired;               /* samples paired (one session): born/died */
    uint64_t born, died;
} diff_result;

/* 0, or -1 when out of memory. same_file: a and b are two moments of one
 * file (always one session); otherwise paired when their metadata say so,
 * as memlyze diff does (pairdiff.h). */
int  diff_profiles(const prof *a, const prof *b, int same_file, diff_result *out);
void diff_result_free(diff_result *r);

#endif
