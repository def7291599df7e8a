/*
 * clock.c - calibration of the TSC event clock (clock.h).
 */
#include "clock.h"

#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if MLZ_CLOCK_HAVE_TSC
/* The kernel switches away from the TSC when it finds it unstable; reading
 * what it uses now is the one check that covers VMs and old CPUs alike. */
static int kernel_uses_tsc(void)
{
    char buf[32];
    int fd = (int)syscall(SYS_openat, AT_FDCWD,
                          "/sys/devices/system/clocksource/clocksource0/current_clocksource",
                          O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    return n == 4 && memcmp(buf, "tsc\n", 4) == 0;
}

/* A (tick, ns) pair read as close together as we can: the tick is the
 * middle of the two rdtsc around clock_gettime, best of three. */
static void pair(uint64_t *tick, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 3; i++) {
        uint64_t a = __rdtsc(), t = mlz_clock_mono_ns(), b = __rdtsc();
        if (b - a < best) { best = b - a; *tick = a + (b - a) / 2; *ns = t; }
    }
}
#endif

void mlz_clock_init(mlz_clock *c, int allow_tsc)
{
    memset(c, 0, sizeof *c);
#if MLZ_CLOCK_HAVE_TSC
    if (allow_tsc && kernel_uses_tsc()) {
        c->usable = 1;
        pair(&c->start_tick, &c->start_ns);
    }
#else
    (void)allow_tsc;
#endif
}

void mlz_clock_tick(mlz_clock *c)
{
#if MLZ_CLOCK_HAVE_TSC
    if (!c->usable) return;
    uint64_t tick, ns;
    pair(&tick, &ns);
    mlz_clock_update(c, tick, ns);
#else
    (void)c;
#endif
}

void mlz_clock_update(mlz_clock *c, uint64_t tick, uint64_t ns)
{
    uint64_t m = atomic_load_explicit(&c->mult, memory_order_relaxed);
    if (!m) {
        if (ns - c->start_ns < MLZ_CLOCK_CALIBRATE_NS || tick <= c->start_tick) return;
        m = (uint64_t)(((unsigned __int128)(ns - c->start_ns) << 32) / (tick - c->start_tick));
        m -= m >> MLZ_CLOCK_SLOW_SHIFT;
        if (!m) { c->usable = 0; return; }
        atomic_store_explicit(&c->offset, ns - mlz_clock_ns_at(m, tick), memory_order_relaxed);
        atomic_store_explicit(&c->mult, m, memory_order_release);
        return;
    }
    /* Forward only. The subtraction wraps when the conversion overtook
     * CLOCK_MONOTONIC (it cannot by more than the calibration error):
     * compare as the signed distance. */
    uint64_t want = ns - mlz_clock_ns_at(m, tick), have = atomic_load_explicit(&c->offset, memory_order_relaxed);
    if ((int64_t)(want - have) > 0) atomic_store_explicit(&c->offset, want, memory_order_relaxed);
}
