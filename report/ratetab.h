/*
 * ratetab.h - the sampling rates of a trace's ALLOC events. The metadata's
 * rate holds from the start; a rate MARKER (mlz_meta_marker_rate: the
 * payload raises its rate under overload) sets the rate of the ALLOCs after
 * it. Readers keep each live object's index into this table, so its weight
 * at FREE is the one it had at birth.
 */
#ifndef MLZ_RATETAB_H
#define MLZ_RATETAB_H

#include "mlz_format.h"

#define RATETAB_MAX 64   /* the payload writes 21 at most */

typedef struct ratetab {
    uint64_t v[RATETAB_MAX];
    unsigned n, cur;     /* v[cur] is in force */
} ratetab;

static inline void ratetab_init(ratetab *t, uint64_t rate)
{
    t->v[0] = rate;
    t->n = 1;
    t->cur = 0;
}

/* A MARKER event. A file naming more than RATETAB_MAX rates (no writer of
 * ours does) keeps the last one the table could hold. */
static inline void ratetab_marker(ratetab *t, const mlz_meta *m, uint64_t name_id)
{
    uint64_t rate = mlz_meta_marker_rate(m, name_id);
    if (!rate) return;
    unsigned i = 0;
    while (i < t->n && t->v[i] != rate) i++;
    if (i == t->n) {
        if (t->n == RATETAB_MAX) return;
        t->v[t->n++] = rate;
    }
    t->cur = i;
}

#endif
