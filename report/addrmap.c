/*
 * addrmap.c - see addrmap.h. Address 0 is never a live allocation, so it
 * marks empty slots.
 */
#include "addrmap.h"

#include <stdlib.h>

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

int addrmap_grow(addrmap *m)
{
    addrmap n = { calloc((m->mask + 1) * 2, sizeof(addr_obj)), m->mask * 2 + 1, 0 };
    if (!n.slots) return -1;
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].addr) {
            size_t j = addrmap_home(&n, m->slots[i].addr);
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
    int had;
    addr_obj *s = addrmap_slot(m, o->addr, &had);
    if (!s) return -1;
    if (had && old) *old = *s;
    *s = *o;
    return had;
}

void addrmap_remove_at(addrmap *m, addr_obj *o)
{
    /* Backward shift: pull later members of the cluster into the hole when
     * their home slot is not between the hole and themselves. */
    size_t hole = (size_t)(o - m->slots), j = hole;
    for (;;) {
        j = (j + 1) & m->mask;
        if (!m->slots[j].addr) break;
        size_t home = addrmap_home(m, m->slots[j].addr);
        if (((j - home) & m->mask) >= ((j - hole) & m->mask)) {
            m->slots[hole] = m->slots[j];
            hole = j;
        }
    }
    m->slots[hole].addr = 0;
    m->count--;
}

int addrmap_take(addrmap *m, uint64_t addr, addr_obj *out)
{
    addr_obj *o = addrmap_find(m, addr);
    if (!o) return 0;
    if (out) *out = *o;
    addrmap_remove_at(m, o);
    return 1;
}

void addrmap_each(const addrmap *m, void (*fn)(const addr_obj *, void *), void *arg)
{
    for (size_t i = 0; i <= m->mask; i++)
        if (m->slots[i].addr) fn(&m->slots[i], arg);
}
