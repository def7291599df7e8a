/*
 * pairdiff.h - growth between two live sets of one sampling session, from
 * the samples that changed (memlyze diff).
 *
 * Two snapshots of one session, or two moments of one trace, hold the very
 * same sample for every sampled object alive at both: it cancels exactly in
 * B - A however lucky the sampler's draw was. Only the samples born between
 * A and B (in B only) and the samples of A that died (in A only) carry
 * sampling error, so the growth's variance is the sum of their terms alone.
 * Files of different sessions share no samples: their growth is the
 * difference of two independent estimates (variance of A plus that of B).
 */
#ifndef MLZ_PAIRDIFF_H
#define MLZ_PAIRDIFF_H

#include "profile.h"

/* 1 when a and b are snapshots of the same sampling session (equal
 * "session" keys and rates), so their samples can be paired; else 0 and
 * *why says why not, for the report's header ("different processes"). */
int pd_same_session(const mlz_meta *a, const mlz_meta *b, const char **why);

/* One sample present on one side only: sign +1 born (o is b's, weights
 * from b's rate), -1 died (o is a's). */
typedef void (*pd_fn)(void *arg, const prof *p, const addr_obj *o, int sign);

/* Calls fn for every live sample of b that is not in a, then for every one
 * of a that is not in b. Two samples are one when they have the same
 * address, birth time, size and thread: an address reused by another
 * object between A and B is a death and a birth. Their sites are not
 * compared: files of one session may come from tools that name frames
 * differently (memlyze snapshot, the gdb and lldb scripts). */
void pd_changes(const prof *a, const prof *b, pd_fn fn, void *arg);

/* A paired growth: the born and the died samples' weights and variance
 * terms, summed apart. */
typedef struct pd_growth {
    est born, died;
} pd_growth;

void   pd_add(pd_growth *g, double weight, double var, int sign);
double pd_value(const pd_growth *g);       /* born - died */
/* The 95% interval of born - died. Few samples make the normal interval
 * (value +- 1.96 sd) miss low: one sample of a 4-sample leak shows a
 * quarter of it with a quarter of its variance. So each part gets a score
 * interval, the totals T that its estimate does not reject at 5% given a
 * variance proportional to T (Var = r T, r = the part's variance terms per
 * estimated byte: exact for objects of one size), and the difference
 * combines the two by the method of variance estimates recovery (MOVER).
 * No samples: [0, 0]. Many samples: the normal interval. */
void   pd_interval95(const pd_growth *g, double *lo, double *hi);

#endif
