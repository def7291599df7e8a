/*
 * addrset.c - see addrset.h. Open addressing, linear probing; a removed
 * address keeps its slot (state 2) so later probe chains stay intact, and the
 * table is rebuilt from the live entries when it fills up.
 */
#include "addrset.h"

#include <stdlib.h>
#include <string.h>

static size_t slot_of(const addrset *s, uint64_t a)
{
    a ^= a >> 33;
    a *= 0xff51afd7ed558ccdull;
    a ^= a >> 33;
    return (size_t)a & (s->cap - 1);
}

static size_t find(const addrset *s, uint64_t a)
{
    size_t i = slot_of(s, a);
    while (s->state[i] && s->addr[i] != a) i = (i + 1) & (s->cap - 1);
    return i;
}

static int grow(addrset *s)
{
    addrset n = { 0 };
    n.cap = s->cap ? (s->live * 4 > s->cap ? s->cap * 2 : s->cap) : 1024;
    n.addr = malloc(n.cap * sizeof *n.addr);
    n.size = malloc(n.cap * sizeof *n.size);
    n.state = calloc(n.cap, 1);
    if (!n.addr || !n.size || !n.state) { addrset_free(&n); return -1; }
    for (size_t i = 0; i < s->cap; i++)
        if (s->state[i] == 1) {
            size_t j = find(&n, s->addr[i]);
            n.addr[j] = s->addr[i];
            n.size[j] = s->size[i];
            n.state[j] = 1;
            n.used++;
        }
    n.live = n.used;
    n.live_bytes = s->live_bytes;
    addrset_free(s);
    *s = n;
    return 0;
}

int addrset_put(addrset *s, uint64_t addr, uint64_t size)
{
    if ((s->used + 1) * 2 > s->cap && grow(s)) return -1;
    size_t i = find(s, addr);
    if (s->state[i] == 1) s->live_bytes -= s->size[i];
    else { s->live++; if (!s->state[i]) s->used++; }
    s->addr[i] = addr;
    s->size[i] = size;
    s->state[i] = 1;
    s->live_bytes += size;
    return 0;
}

void addrset_del(addrset *s, uint64_t addr)
{
    if (!s->cap) return;
    size_t i = find(s, addr);
    if (s->state[i] != 1) return;
    s->state[i] = 2;
    s->live--;
    s->live_bytes -= s->size[i];
}

int addrset_drain(addrset *s, int (*fn)(void *ctx, uint64_t addr), void *ctx)
{
    int rc = 0;
    for (size_t i = 0; i < s->cap && !rc; i++)
        if (s->state[i] == 1) rc = fn(ctx, s->addr[i]);
    if (s->cap) memset(s->state, 0, s->cap);
    s->used = s->live = 0;
    s->live_bytes = 0;
    return rc;
}

void addrset_free(addrset *s)
{
    free(s->addr);
    free(s->size);
    free(s->state);
    memset(s, 0, sizeof *s);
}
