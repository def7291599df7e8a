/*
 * test_clock.c - the TSC event clock (core/clock.h): the calibration's
 * arithmetic on made-up pairs, its rule that the offset only moves forward,
 * and the real clock of this machine against CLOCK_MONOTONIC.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../check.h"
#include "clock.h"

#define GHZ3(ns) ((ns) * 3)       /* ticks of a 3 GHz TSC */

static mlz_clock fake(uint64_t tick0, uint64_t ns0)
{
    mlz_clock c;
    memset(&c, 0, sizeof c);
    c.usable = 1;
    c.start_tick = tick0;
    c.start_ns = ns0;
    return c;
}

static uint64_t at(mlz_clock *c, uint64_t tick)
{
    return mlz_clock_ns_at(atomic_load(&c->mult), tick) + atomic_load(&c->offset);
}

/* No rate before MLZ_CLOCK_CALIBRATE_NS have passed; after, the conversion
 * meets CLOCK_MONOTONIC at the pair and runs 2^-12 slow. */
static void test_calibration(void)
{
    uint64_t t0 = 1000000000000ull, n0 = 5000000000ull;
    mlz_clock c = fake(t0, n0);
    mlz_clock_update(&c, t0 + GHZ3(10000000ull), n0 + 10000000ull);
    CHECK_EQ_U64(atomic_load(&c.mult), 0);
    uint64_t d = 30000000ull;                   /* 30 ms */
    mlz_clock_update(&c, t0 + GHZ3(d), n0 + d);
    REQUIRE(atomic_load(&c.mult) != 0);
    uint64_t here = at(&c, t0 + GHZ3(d));
    CHECK(here <= n0 + d && here + 2 >= n0 + d);
    /* One second later the clock trails by 244 us (2^-12), not more. */
    uint64_t later = at(&c, t0 + GHZ3(d + 1000000000ull)), want = n0 + d + 1000000000ull;
    CHECK(later < want);
    CHECK(want - later > 240000 && want - later < 250000);
}

/* Rounds move the offset to CLOCK_MONOTONIC, never back. */
static void test_offset_forward_only(void)
{
    uint64_t t0 = 7000000000ull, n0 = 100;
    mlz_clock c = fake(t0, n0);
    mlz_clock_update(&c, t0 + GHZ3(20000000ull), n0 + 20000000ull);
    REQUIRE(atomic_load(&c.mult) != 0);
    uint64_t tick = t0 + GHZ3(1020000000ull), ns = n0 + 1020000000ull;
    uint64_t before = at(&c, tick);
    CHECK(before < ns);
    mlz_clock_update(&c, tick, ns);              /* caught up */
    CHECK_EQ_U64(at(&c, tick), ns);
    uint64_t off = atomic_load(&c.offset);
    mlz_clock_update(&c, tick, ns - 5000);      /* a pair behind: ignored */
    CHECK_EQ_U64(atomic_load(&c.offset), off);
    CHECK_EQ_U64(at(&c, tick), ns);
}

/* A TSC that started long before CLOCK_MONOTONIC's zero (the offset wraps
 * below zero) converts the same. */
static void test_offset_below_zero(void)
{
    uint64_t t0 = 1ull << 60, n0 = 1000;
    mlz_clock c = fake(t0, n0);
    mlz_clock_update(&c, t0 + GHZ3(20000000ull), n0 + 20000000ull);
    REQUIRE(atomic_load(&c.mult) != 0);
    uint64_t v = at(&c, t0 + GHZ3(20000000ull));
    CHECK(v <= n0 + 20000000ull && v + 2 >= n0 + 20000000ull);
    mlz_clock_update(&c, t0 + GHZ3(40000000ull), n0 + 40000000ull);
    CHECK_EQ_U64(at(&c, t0 + GHZ3(40000000ull)), n0 + 40000000ull);
}

static int kernel_clock_is_tsc(void)
{
    char buf[16] = { 0 };
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (!f) return 0;
    int ok = fgets(buf, sizeof buf, f) && strcmp(buf, "tsc\n") == 0;
    fclose(f);
    return ok;
}

static mlz_clock real;
static _Atomic int going_back;

static void *reader(void *arg)
{
    (void)arg;
    uint64_t last = 0;
    for (int i = 0; i < 2000000; i++) {
        uint64_t t = mlz_clock_now(&real);
        if (t < last) atomic_store(&going_back, 1);
        last = t;
    }
    return NULL;
}

/* This machine's clock: TSC-based when the kernel's is (else exactly
 * clock_gettime), within 50 us of CLOCK_MONOTONIC, and never going back in
 * a thread while the offset moves under it. */
static void test_real_clock(void)
{
    int tsc = MLZ_CLOCK_HAVE_TSC && kernel_clock_is_tsc();
    printf("  (kernel clocksource %s)\n", tsc ? "tsc: the TSC clock is under test" : "not tsc: clock_gettime");
    mlz_clock_init(&real, 1);
    CHECK_EQ_U64(real.usable, tsc);
    struct timespec nap = { 0, 25000000 };
    nanosleep(&nap, NULL);
    mlz_clock_tick(&real);
    CHECK_EQ_U64(atomic_load(&real.mult) != 0, tsc);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, reader, NULL);
    for (int r = 0; r < 20; r++) {
        struct timespec ms = { 0, 2000000 };
        nanosleep(&ms, NULL);
        mlz_clock_tick(&real);
        uint64_t a = mlz_clock_mono_ns(), t = mlz_clock_now(&real), b = mlz_clock_mono_ns();
        CHECK(t <= b + 1000 && t + 50000 >= a);
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(!atomic_load(&going_back));
    mlz_clock_init(&real, 0);                   /* as without a TSC clocksource */
    mlz_clock_tick(&real);
    CHECK_EQ_U64(atomic_load(&real.mult), 0);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_calibration);
    RUN(test_offset_forward_only);
    RUN(test_offset_below_zero);
    RUN(test_real_clock);
    CHECK_EXIT();
}
