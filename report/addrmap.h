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

/* The hash and the probe loops are inline: the replay of a trace calls them
 * for every event. */
static inline size_t addrmap_home(const addrmap *m, uint64_t a)
{
    a ^= a >> 33;
    a *= 0xff51afd7ed558ccdULL;
    a ^= a >> 33;
    return (size_t)a & m->mask;
}

int  addrmap_grow(addrmap *m);

/* The slot of addr, or NULL when absent (valid until the map changes). */
static inline addr_obj *addrmap_find(const addrmap *m, uint64_t addr)
{
    if (!addr) return NULL;
    for (size_t i = addrmap_home(m, addr); m->slots[i].addr; i = (i + 1) & m->mask)
        if (m->slots[i].addr == addr) return &m->slots[i];
    return NULL;
}

/* The slot for addr (addr != 0): its object when present (*had = 1), else a
 * new slot holding only addr (*had = 0), for the caller to fill. NULL on out
 * of memory. */
static inline addr_obj *addrmap_slot(addrmap *m, uint64_t addr, int *had)
{
    if ((m->count + 1) * 4 > (m->mask + 1) * 3 && addrmap_grow(m)) return NULL;
    size_t i = addrmap_home(m, addr);
    while (m->slots[i].addr) {
        if (m->slots[i].addr == addr) {
            *had = 1;
            return &m->slots[i];
        }
        i = (i + 1) & m->mask;
    }
    m->slots[i].addr = addr;
    m->count++;
    *had = 0;
    return &m->slots[i];
}

/* Removes the object in slot o (from addrmap_find or addrmap_slot). */
void addrmap_remove_at(addrmap *m, addr_obj *o);

int  addrmap_init(addrmap *m);
void addrmap_free(addrmap *m);
/* Inserts or overwrites; returns the previous object through *old when the
 * address was already present (1), else 0; -1 on out of memory. */
int  addrmap_put(addrmap *m, const addr_obj *o, addr_obj *old);
/* Removes addr; 1 and *out when it was present, else 0. */
int  addrmap_take(addrmap *m, uint64_t addr, addr_obj *out);
/* Calls fn for every object (any order). */
void addrmap_each(const addrmap *m, void (*fn)(const addr_obj *, void *), void *arg);

#endif
