/*
 * growbuf.h - growing an array by doubling: the split codec, the metadata's
 * fast path, the readers of other tools' files and the replay plan.
 */
#ifndef MLZ_GROWBUF_H
#define MLZ_GROWBUF_H

#include <stdlib.h>

/* Makes *p (of *cap elements of elem bytes) hold at least n, doubling from
 * 16; 0, or -1 on out of memory (*p unchanged). */
static inline int grow_to(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < n) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

#endif
