/*
 * clock.h - the event clock: CLOCK_MONOTONIC nanoseconds, read from the
 * TSC when the kernel's own clocksource is the TSC.
 *
 * Exact mode reads the clock twice per malloc/free pair; clock_gettime
 * through the vDSO cost 30 ns a call on the test machine against 12 ns for
 * rdtsc, a fifth of the hooked thread's time. So, when the kernel itself
 * trusts the TSC (its clocksource is "tsc": invariant, synchronised across
 * CPUs), we convert ticks ourselves:
 *
 *     ns = (tick * mult >> 32) + offset
 *
 * mult is measured once against CLOCK_MONOTONIC over at least
 * MLZ_CLOCK_CALIBRATE_NS (until then the clock is clock_gettime), then
 * lowered by 2^-12 (244 ppm) so that our clock runs a little slow; the
 * drain thread moves offset forward to CLOCK_MONOTONIC at every round
 * (mlz_clock_tick). offset never moves back, so the clock never goes back
 * in any thread, and it trails CLOCK_MONOTONIC by at most 244 ppm of the
 * time since the last round (2.4 us at the drain's 10 ms period).
 *
 * One writer (the drain thread) and lock-free readers: mult is written once,
 * before readers can see it (release/acquire), offset is one atomic word.
 */
#ifndef MLZ_CLOCK_H
#define MLZ_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
#include <x86intrin.h>
#define MLZ_CLOCK_HAVE_TSC 1
#else
#define MLZ_CLOCK_HAVE_TSC 0
#endif

#define MLZ_CLOCK_CALIBRATE_NS (20 * 1000 * 1000)
#define MLZ_CLOCK_SLOW_SHIFT   12

typedef struct mlz_clock {
    _Atomic uint64_t mult;      /* ns per tick << 32; 0: use clock_gettime */
    _Atomic uint64_t offset;    /* only grows */
    uint64_t start_tick, start_ns;  /* the calibration's first pair */
    int usable;                 /* the kernel's clocksource is the TSC */
} mlz_clock;

static inline uint64_t mlz_clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mlz_clock_ns_at(uint64_t mult, uint64_t tick)
{
    return (uint64_t)(((unsigned __int128)tick * mult) >> 32);
}

static inline uint64_t mlz_clock_now(mlz_clock *c)
{
#if MLZ_CLOCK_HAVE_TSC
    uint64_t m = atomic_load_explicit(&c->mult, memory_order_acquire);
    if (m) return mlz_clock_ns_at(m, __rdtsc()) + atomic_load_explicit(&c->offset, memory_order_relaxed);
#else
    (void)c;
#endif
    return mlz_clock_mono_ns();
}

/* Zeroes *c and, if the kernel's clocksource is the TSC, takes the first
 * calibration pair. Raw syscalls only (runs inside a target, maybe before
 * its malloc works). allow_tsc 0 keeps clock_gettime (what a machine
 * without a TSC clocksource gets: the tests try it everywhere). */
void mlz_clock_init(mlz_clock *c, int allow_tsc);

/* From one thread at a time (the drain): calibrates once enough time has
 * passed, then moves offset forward to CLOCK_MONOTONIC. */
void mlz_clock_tick(mlz_clock *c);
/* The same with a given (tick, ns) pair (tests). */
void mlz_clock_update(mlz_clock *c, uint64_t tick, uint64_t ns);

#endif
