/*
 * addrset.h - the live allocations of a trace being written (address ->
 * size), so that finalize can end an exec'd image's heap with FREE events.
 */
#ifndef MLZ_ADDRSET_H
#define MLZ_ADDRSET_H

#include <stddef.h>
#include <stdint.h>

typedef struct addrset {
    uint64_t *addr;
    uint64_t *size;
    uint8_t *state;           /* 0 empty, 1 live, 2 was live (a probe chain goes on) */
    size_t cap, used, live;   /* used: non-empty slots */
    uint64_t live_bytes;
} addrset;

int  addrset_put(addrset *s, uint64_t addr, uint64_t size);   /* 0, or -1 out of memory */
void addrset_del(addrset *s, uint64_t addr);                  /* absent: nothing */
/* Calls fn for every live address, then empties the set. 0 or fn's first non-zero. */
int  addrset_drain(addrset *s, int (*fn)(void *ctx, uint64_t addr), void *ctx);
void addrset_free(addrset *s);

#endif
