/*
 * sampler.c - the cold half of Poisson byte sampling: PRNG seeding and
 * exponential countdown draws (the weights readers derive from them are in
 * sampler_weights.c: the payload, which only draws, does without libm).
 *
 * Runs once per thread (init) and once per sample (rearm), i.e. about every
 * 512 KiB allocated at the default rate; nothing here allocates.
 *
 * PRNG: xoroshiro128++ (Blackman & Vigna 2019). Its 128-bit state fits the
 * two words of mlz_sampler_tls, it passes BigCrush and PractRand, and unlike
 * xorshift128+ (the original sampling design's choice) its low bits are not linear, so
 * every output bit is usable. We take the top 53 bits for doubles. The state
 * is expanded from one 64-bit seed with splitmix64, as its authors advise,
 * which also guarantees a non-zero state.
 */
#include "sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int mlz_sampler_follow(mlz_sampler_tls *t, unsigned d)
{
    if (d == t->rate_shift) return 1;
    unsigned k = d - t->rate_shift;   /* the doublings since the thread last looked */
    int keep = d < t->rate_shift || (k < 64 && mlz_sampler_rand(t) >> (64 - k) == 0);
    t->rate_shift = d;
    return keep;
}

uint64_t mlz_sampler_rand(mlz_sampler_tls *t)
{
    uint64_t s0 = t->prng[0], s1 = t->prng[1];
    uint64_t r = rotl(s0 + s1, 17) + s0;
    s1 ^= s0;
    t->prng[0] = rotl(s0, 49) ^ s1 ^ (s1 << 21);
    t->prng[1] = rotl(s1, 28);
    return r;
}

void mlz_sampler_thread_init(mlz_sampler_tls *t, uint64_t rate, uint64_t seed)
{
    uint64_t x = seed;
    t->prng[0] = splitmix64(&x);
    t->prng[1] = splitmix64(&x);
    if ((t->prng[0] | t->prng[1]) == 0) t->prng[1] = 1; /* all-zero is a fixed point */
    t->in_hook = 0;
    t->initialized = 1;
    mlz_sampler_rearm(t, rate);
}

uint64_t mlz_sampler_seed_for_thread(uint64_t global_seed, uint64_t pid,
                                     uint64_t tid, uint64_t time_ns)
{
    /* Chain every input through splitmix64 so a one-bit change anywhere
     * flips half the output bits. */
    uint64_t x = global_seed;
    uint64_t h = splitmix64(&x);
    x = h ^ pid;          h = splitmix64(&x);
    x = h ^ tid;          h = splitmix64(&x);
    x = h ^ time_ns;      h = splitmix64(&x);
    return h;
}

static int read_urandom(uint64_t *out)
{
    int fd;
    do fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) return -1;
    size_t got = 0;
    while (got < sizeof *out) {
        ssize_t n = read(fd, (char *)out + got, sizeof *out - got);
        if (n > 0) got += (size_t)n;
        else if (n < 0 && errno == EINTR) continue;
        else break;
    }
    close(fd);
    return got == sizeof *out ? 0 : -1;
}

uint64_t mlz_sampler_global_entropy(void)
{
    /* We run inside someone else's process: leave its errno as we found it. */
    int saved_errno = errno;
    uint64_t v = 0;
    int ok = 0;
#ifdef SYS_getrandom
    /* No file descriptor needed: works in chroots and fd-starved targets. */
    ok = syscall(SYS_getrandom, &v, sizeof v, 1 /* GRND_NONBLOCK */) == (long)sizeof v;
#endif
    if (!ok) ok = read_urandom(&v) == 0;
    if (!ok) {
        struct timespec a = {0, 0}, b = {0, 0};
        clock_gettime(CLOCK_REALTIME, &a);
        clock_gettime(CLOCK_MONOTONIC, &b);
        v = mlz_sampler_seed_for_thread((uint64_t)a.tv_sec * 1000000000ull + (uint64_t)a.tv_nsec,
                                        (uint64_t)getpid(), (uint64_t)(uintptr_t)&a,
                                        (uint64_t)b.tv_sec * 1000000000ull + (uint64_t)b.tv_nsec);
    }
    errno = saved_errno;
    return v;
}

/*
 * countdown = ceil(-rate * ln(u)), u uniform on (0, 1].
 *
 * u = (k + 1) / 2^53 for a 53-bit k, so ln(u) is finite; the smallest u
 * caps a draw at 36.7 * rate, and the mean of the discrete draw differs from
 * `rate` by ~2e-15 relative: no clamp is needed for accuracy.
 *
 * ceil, not round or truncation: a continuous sample point X lands in the
 * unit ceil(X) (unit j covers (j-1, j]), so P(ceil(X) <= n) = 1 - e^(-n/rate)
 * exactly, which is what mlz_sample_prob() promises for n = req+1 units.
 * The one clamp, near INT64_MAX, only matters for rates above 2.5e17 bytes.
 */
void mlz_sampler_rearm(mlz_sampler_tls *t, uint64_t rate)
{
    if (rate <= 1) {
        t->countdown = 0; /* exact mode: any request (>= 1 unit) goes below 0 */
        return;
    }
    double u = (double)((mlz_sampler_rand(t) >> 11) + 1) * 0x1.0p-53;
    double x = -(double)rate * mlz_sampler_ln(u);
    if (x >= 9.2e18) {
        t->countdown = INT64_MAX - 1;
        return;
    }
    int64_t k = (int64_t)x;                 /* x >= 0: truncation, then up */
    t->countdown = k + ((double)k < x) - 1;   /* kept one below (sampler.h) */
}

/*
 * ln(u) for u in [2^-53, 1], without libm: this and the ceil above are the
 * payload's only floating point, and libm would be one more library mapped
 * into every target (about 370 KiB of its resident set).
 *
 * u = m * 2^e with m in [sqrt(1/2), sqrt(2)); ln(m) = 2 atanh(s) with
 * s = (m - 1) / (m + 1), |s| < 0.1716, whose odd series is cut after s^23
 * (the next term is under 1e-19 of the result). Within a few ulp of libm's log
 * (tests/unit/test_sampler.c), far below what the sampling needs.
 */
double mlz_sampler_ln(double u)
{
    union { double d; uint64_t b; } v = { u };
    int e = (int)((v.b >> 52) & 0x7ff) - 1023;
    v.b = (v.b & 0x000fffffffffffffull) | 0x3ff0000000000000ull;   /* m in [1, 2) */
    double m = v.d;
    if (m > 1.4142135623730951) { m *= 0.5; e++; }
    double s = (m - 1.0) / (m + 1.0), z = s * s;
    double series = 1.0 / 23;
    for (int k = 21; k >= 1; k -= 2) series = series * z + 1.0 / k;   /* 1 + z/3 + z^2/5 + ... */
    /* ln 2 in two parts: e * LN2_HI is exact for |e| < 2^11. */
    const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
    return e * LN2_HI + (2.0 * s * series + e * LN2_LO);
}
