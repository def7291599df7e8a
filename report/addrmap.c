/*
 * addrmap.c - see addrmap.h. Address 0 is never a live allocation, so it
 * marks empty slots.
 */
#include "addrmap.h"

#include <stdlib.h>

static size_t slot_of(const addrmap *m, uint64_t a)
{
    a ^= a >> 33;
    a *= 0xff51afd7ed558ccdULL;
    a ^= a >> 33;
    return (size_t)a & m->mask;
}

int addrmap_init(addrmap *m)
{
    m->mask = 1023;
    m->count = 0;
    m->slots = calloc(m->mask + 1, sizeof *m->slots);
    return m->slots ? 0 : -1;
}

void addrmap_free(addrmap *m)
{
    free(m->slots);
    m->slots = NULL;
}

static int grow(addrmap *m)
{
    addrmap n = { calloc((m->mask + 1) * 2, sizeof(addr_obj)), m->mask * 2 + 1, 0 };
    if (!n.slots) return -1;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].addr) {
            size_t j = slot_of(&n, m->slots[i].addr);
            while (n.slots[j].addr) j = (j + 1) & n.mask;
            n.slots[j] = m->slots[i];
            n.count++;
        }
    free(m->slots);
    *m = n;
    return 0;
}

int addrmap_put(addrmap *m, const addr_obj *o, addr_obj *old)
{
    if ((m->count + 1) * 4 > (m->mask + 1) * 3 && grow(m)) return -1;
    size_t i = slot_of(m, o->addr);
    while (m->slots[i].addr) {
        if (m->slots[i].addr == o->addr) {
            if (old) *old = m->slots[i];
            m->slots[i] = *o;
            return 1;
        }
        i = (i + 1) & m->mask;
    }
    m->slots[i] = *o;
    m->count++;
    return 0;
}

const addr_obj *addrmap_get(const addrmap *m, uint64_t addr)
{
    if (!addr) return NULL;
    for (size_t i = slot_of(m, addr); m->slots[i].addr; i = (i + 1) & m->mask)
        if (m->slots[i].addr == addr) return &m->slots[i];
    return NULL;
}

int addrmap_take(addrmap *m, uint64_t addr, addr_obj *out)
{
    if (!addr) return 0;
    size_t i = slot_of(m, addr);
    while (m->slots[i].addr != addr) {
        if (!m->slots[i].addr) return 0;
        i = (i + 1) & m->mask;
    }
    if (out) *out = m->slots[i];
    /* Backward shift: pull later members of the cluster into the hole when
     * their home slot is not between the hole and themselves. */
    size_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->slots[j].addr) break;
        size_t home = slot_of(m, m->slots[j].addr);
        if (((j - home) & m->mask) >= ((j - hole) & m->mask)) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].addr = 0;
    m->count--;
    return 1;
}

void addrmap_each(const addrmap *m, void (*fn)(const addr_obj *, void *), void *arg)
{
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].addr) fn(&m->slots[i], arg);
}
