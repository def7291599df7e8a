/*
 * addrmap.h - address -> live object, for replaying a trace in the tools.
 * Linear probing with backward-shift deletion (no tombstones), grows x2.
 */
#ifndef MLZ_ADDRMAP_H
#define MLZ_ADDRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct addr_obj {
    uint64_t addr;            /* 0 marks an empty slot */
    uint64_t size;
    uint64_t time_us;
    uint32_t site;            /* index into the profile's sites */
    uint16_t thread;
    uint8_t  rate_idx;        /* the rate it was sampled at: prof.rates[rate_idx] */
} addr_obj;

typedef struct addrmap {
    addr_obj *slots;
    size_t mask, count;
} addrmap;

int  addrmap_init(addrmap *m);
void addrmap_free(addrmap *m);
/* Inserts or overwrites; returns the previous object through *old when the
 * address was already present (1), else 0; -1 on out of memory. */
int  addrmap_put(addrmap *m, const addr_obj *o, addr_obj *old);
/* Removes addr; 1 and *out when it was present, else 0. */
int  addrmap_take(addrmap *m, uint64_t addr, addr_obj *out);
/* The object at addr, or NULL (valid until the map changes). */
const addr_obj *addrmap_get(const addrmap *m, uint64_t addr);
/* Calls fn for every object (any order). */
void addrmap_each(const addrmap *m, void (*fn)(const addr_obj *, void *), void *arg);

#endif
