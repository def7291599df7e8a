/*
 * test_addrset.c - report/addrset.c (finalize's live set across an exec)
 * against a plain array model under random puts and deletes with reuse.
 */
#include "../check.h"
#include "../../report/addrset.c"

typedef struct { uint64_t size; int live; } model_t;
#define NADDR 5000
static model_t model[NADDR];
static uint64_t drained_bytes, drained_count;

static int count_one(void *ctx, uint64_t addr)
{
    (void)ctx;
    if (addr % 16 || addr / 16 >= NADDR || !model[addr / 16].live) return -1;
    drained_bytes += model[addr / 16].size;
    drained_count++;
    model[addr / 16].live = 0;
    return 0;
}

static void test_random_against_model(void)
{
    addrset s = { 0 };
    uint64_t seed = 12, live = 0, bytes = 0;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 200000; i++) {
            uint64_t a = check_rng(&seed) % NADDR, r = check_rng(&seed);
            if (r % 3) {
                uint64_t size = 1 + r % 4000;
                REQUIRE(addrset_put(&s, a * 16, size) == 0);
                if (model[a].live) bytes -= model[a].size; else live++;
                model[a] = (model_t){ size, 1 };
                bytes += size;
            } else {
                addrset_del(&s, a * 16);
                if (model[a].live) { live--; bytes -= model[a].size; model[a].live = 0; }
            }
        }
        CHECK_EQ_U64(s.live, live);
        CHECK_EQ_U64(s.live_bytes, bytes);
        drained_bytes = drained_count = 0;
        CHECK(addrset_drain(&s, count_one, NULL) == 0);
        CHECK_EQ_U64(drained_count, live);
        CHECK_EQ_U64(drained_bytes, bytes);
        CHECK_EQ_U64(s.live, 0);
        live = bytes = 0;
    }
    addrset_del(&s, 16);       /* absent: nothing */
    CHECK_EQ_U64(s.live, 0);
    addrset_free(&s);
}

static void test_empty(void)
{
    addrset s = { 0 };
    addrset_del(&s, 42);
    CHECK(addrset_drain(&s, count_one, NULL) == 0);
    addrset_free(&s);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_random_against_model);
    RUN(test_empty);
    CHECK_EXIT();
}
