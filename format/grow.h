/*
 * grow.h - a malloc'd array grown by doubling, for the format library's
 * codec and parsers.
 */
#ifndef MLZ_GROW_H
#define MLZ_GROW_H

#include <stddef.h>
#include <stdlib.h>

/* Makes *p hold at least need elements of elem bytes (*cap counts them);
 * 0, or -1 when out of memory (*p and *cap unchanged). */
static inline int mlz_grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

#endif
