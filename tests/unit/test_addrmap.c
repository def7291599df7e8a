/*
 * test_addrmap.c - report/addrmap.c (the replay's live objects: linear
 * probing, backward-shift deletion, growth) against a plain array model,
 * under random puts, finds, takes and in-place slots, with addresses
 * crowded into few homes so that clusters form, wrap and shift.
 */
#include "../check.h"
#include "addrmap.h"

#define NADDR 6000
static struct { uint64_t size; int live; } model[NADDR];

static uint64_t addr_of(uint64_t i) { return 0x7f0000000000ull + i * 48; }

/* Every live object found with its size, no dead one found, count right. */
static int agrees(const addrmap *m)
{
    size_t live = 0;
    for (uint64_t i = 0; i < NADDR; i++) {
        const addr_obj *o = addrmap_find(m, addr_of(i));
        if (model[i].live != (o != NULL)) return 0;
        if (o && o->size != model[i].size) return 0;
        live += model[i].live;
    }
    return m->count == live;
}

static void test_random_against_model(void)
{
    addrmap m;
    REQUIRE(addrmap_init(&m) == 0);
    uint64_t seed = 7;
    int bad = 0;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 100000; i++) {
            uint64_t a = check_rng(&seed) % NADDR, r = check_rng(&seed), size = 1 + r % 5000;
            switch (r >> 60 & 3) {
            case 0: {                       /* put: the old object comes back */
                addr_obj o = { addr_of(a), size, r, 0, 0, 0 }, old;
                int had = addrmap_put(&m, &o, &old);
                if (had != model[a].live || (had && old.size != model[a].size)) bad++;
                model[a].size = size, model[a].live = 1;
                break;
            }
            case 1: {                       /* the slot, filled in place */
                int had;
                addr_obj *o = addrmap_slot(&m, addr_of(a), &had);
                REQUIRE(o);
                if (had != model[a].live || o->addr != addr_of(a) || (had && o->size != model[a].size)) bad++;
                *o = (addr_obj){ addr_of(a), size, r, 0, 0, 0 };
                model[a].size = size, model[a].live = 1;
                break;
            }
            case 2: {                       /* take */
                addr_obj out;
                int had = addrmap_take(&m, addr_of(a), &out);
                if (had != model[a].live || (had && out.size != model[a].size)) bad++;
                model[a].live = 0;
                break;
            }
            default: {                      /* find, then remove in place */
                addr_obj *o = addrmap_find(&m, addr_of(a));
                if ((o != NULL) != model[a].live) bad++;
                if (o) addrmap_remove_at(&m, o);
                model[a].live = 0;
            }
            }
        }
        if (!agrees(&m)) bad++;
        /* Drain most of it: long clusters shift back into their homes. */
        for (uint64_t a = 0; a < NADDR; a++)
            if (a % 7 && model[a].live) {
                CHECK(addrmap_take(&m, addr_of(a), NULL) == 1);
                model[a].live = 0;
            }
        if (!agrees(&m)) bad++;
    }
    CHECK(bad == 0);
    CHECK(addrmap_find(&m, 0) == NULL && addrmap_take(&m, 0, NULL) == 0);
    addrmap_free(&m);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_random_against_model);
    CHECK_EXIT();
}
