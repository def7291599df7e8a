/*
 * test_sampler.c - Poisson byte sampling: the countdown's distribution, the
 * hot path's counting rule, the weights, and whether the 95% intervals the
 * reader will print actually cover the truth 95% of the time.
 *
 * All randomness is seeded: every run is the same run.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "../check.h"
#include "sampler.h"

#define RATE (512u * 1024u)

/* The test's own generator for choosing sizes and orders (splitmix64),
 * independent of the sampler's PRNG. */
static uint64_t trng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t draw(mlz_sampler_tls *t, uint64_t rate)
{
    mlz_sampler_rearm(t, rate);
    return (uint64_t)t->countdown + 1;   /* the units to the point (sampler.h) */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Kolmogorov-Smirnov distance between sorted samples x[] and Exp(mean). */
static double ks_exp(double *x, size_t n, double mean)
{
    qsort(x, n, sizeof *x, cmp_double);
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double f = -expm1(-x[i] / mean);
        double lo = f - (double)i / (double)n, hi = (double)(i + 1) / (double)n - f;
        if (lo > d) d = lo;
        if (hi > d) d = hi;
    }
    return d;
}

static void test_mean_interval(void)
{
    mlz_sampler_tls t = {0};
    mlz_sampler_thread_init(&t, RATE, 12345);
    const int n = 1000000;
    double sum = 0, sum2 = 0;
    for (int i = 0; i < n; i++) {
        double c = (double)draw(&t, RATE);
        sum += c;
        sum2 += c * c;
    }
    double mean = sum / n, sd = sqrt(sum2 / n - mean * mean);
    /* Standard error of the mean is 0.1% here: 1% is a 10-sigma band. */
    CHECK(fabs(mean / RATE - 1.0) < 0.01);
    CHECK(fabs(sd / RATE - 1.0) < 0.01); /* exponential: sd == mean */
}

static void test_ks_exponential(void)
{
    mlz_sampler_tls t = {0};
    mlz_sampler_thread_init(&t, RATE, 777);
    const size_t n = 200000;
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    REQUIRE(x && y);
    for (size_t i = 0; i < n; i++) {
        x[i] = (double)draw(&t, RATE);
        y[i] = x[i] * 1.03;
    }
    double crit = 1.628 / sqrt((double)n); /* 1% critical value, large n */
    double d = ks_exp(x, n, RATE);
    CHECK(d < crit);
    /* The statistic has power: a 3% wrong scale is rejected. */
    CHECK(ks_exp(y, n, RATE) > crit);
    free(x);
    free(y);
}

static void test_chi_square_20_bins(void)
{
    mlz_sampler_tls t = {0};
    mlz_sampler_thread_init(&t, RATE, 4242);
    const int n = 1000000, bins = 20;
    long count[20] = {0};
    for (int i = 0; i < n; i++) {
        double f = -expm1(-(double)draw(&t, RATE) / RATE); /* CDF: uniform if exponential */
        int b = (int)(f * bins);
        count[b < bins ? b : bins - 1]++;
    }
    double e = (double)n / bins, chi2 = 0;
    for (int b = 0; b < bins; b++) chi2 += (count[b] - e) * (count[b] - e) / e;
    CHECK(chi2 < 36.19); /* chi-square, 19 degrees of freedom, 1% */
}

/* The hot path counts req+1 units and fires when the countdown, kept one
 * below the units left, goes negative. */
static void test_countdown_rule(void)
{
    mlz_sampler_tls t = {0};
    /* A zero TLS fires on the first request: the payload's init hook. */
    CHECK(mlz_sampler_should_sample(&t, 1000));
    t = (mlz_sampler_tls){0};
    CHECK(mlz_sampler_should_sample(&t, 0));   /* ... even a zero-byte one */
    t.countdown = 99;                          /* 100 units left */
    CHECK(!mlz_sampler_should_sample(&t, 98)); /* 99 units: 1 left */
    CHECK_EQ_U64(t.countdown, 0);
    CHECK(mlz_sampler_should_sample(&t, 0));   /* a zero-byte request is one unit */
    t.countdown = 99;
    CHECK(mlz_sampler_should_sample(&t, 99));  /* 100 units: the point itself */
    t.countdown = 4;
    CHECK(mlz_sampler_should_sample(&t, (size_t)1 << 62));
    /* Requests of 2^63 bytes and more (malloc fails them all) wrap around
     * instead of being signed overflow (UBSan would trap here), and are
     * sample points: the countdown they moved up is drawn again. */
    t.countdown = 4;
    CHECK(mlz_sampler_should_sample(&t, SIZE_MAX));
    t.countdown = 4;
    CHECK(mlz_sampler_should_sample(&t, (size_t)-1 << 30));
    t.countdown = 4;
    CHECK(mlz_sampler_should_sample(&t, (size_t)1 << 63));
    t.countdown = 4;
    CHECK(!mlz_sampler_should_sample(&t, 3));   /* ordinary sizes as before */
}

/* The draw's own log (the payload has no libm) against libm's, and the
 * draw itself against ceil(-rate * log(u)) for the same u. */
static void test_ln(void)
{
    CHECK(mlz_sampler_ln(1.0) == 0.0);
    double worst = 0;
    uint64_t seed = 7;
    const double edges[] = { 0x1.0p-53, 0x1.0p-52, 0.5, 0.7071067811865475, 0.7071067811865476,
                             0.9999999999999999, 1.0 - 0x1.0p-30, 0x1.6a09e667f3bcdp-1, 0.25 };
    for (int i = 0; i < 1000000 + (int)(sizeof edges / sizeof edges[0]); i++) {
        double u = i < (int)(sizeof edges / sizeof edges[0]) ? edges[i]
                 : (double)((trng(&seed) >> 11) + 1) * 0x1.0p-53;
        double want = log(u), got = mlz_sampler_ln(u);
        double err = want == 0 ? fabs(got) : fabs(got - want) / fabs(want);
        if (err > worst) worst = err;
    }
    CHECK(worst < 1e-15);     /* a few ulp (4.7e-16 seen) */
    /* The countdown is ceil(-rate ln u) of the generator's u. */
    for (uint64_t rate = 2; rate < (1ull << 40); rate = rate * 7 + 1) {
        mlz_sampler_tls a, b;
        mlz_sampler_thread_init(&a, rate, 99 + rate);
        mlz_sampler_thread_init(&b, rate, 99 + rate);
        for (int i = 0; i < 1000; i++) {
            double u = (double)((mlz_sampler_rand(&b) >> 11) + 1) * 0x1.0p-53;
            double want = ceil(-(double)rate * log(u));
            int64_t got = (int64_t)draw(&a, rate);
            /* A different last bit of the log may move a draw that is within
             * an ulp of an integer to the next one: never further. */
            CHECK(llabs(got - (int64_t)want) <= 1);
        }
    }
}

static void test_exact_mode(void)
{
    mlz_sampler_tls t = {0};
    uint64_t s = 99;
    mlz_sampler_thread_init(&t, 1, 1);
    int missed = 0;
    for (int i = 0; i < 100000; i++) {
        size_t req = (size_t)(trng(&s) % 5000);
        if (i % 7 == 0) req = 0;
        if (mlz_sampler_should_sample(&t, req)) mlz_sampler_rearm(&t, 1);
        else missed++;
    }
    CHECK_EQ_U64(missed, 0);
    CHECK(mlz_sample_prob(123, 1) == 1.0);
    CHECK(mlz_sample_prob(0, 0) == 1.0);
    CHECK(mlz_weight_bytes(123, 1) == 123.0);
    CHECK(mlz_weight_count(123, 1) == 1.0);
    CHECK(mlz_var_bytes(123, 1) == 0.0);
    CHECK(mlz_var_count(123, 1) == 0.0);
}

static void test_weights(void)
{
    /* Small req/rate: 1 - exp(-x) computed naively loses ~all digits at
     * x = 2^-40; expm1 keeps them. Reference: x - x^2/2. */
    uint64_t big = 1ull << 40;
    double x = 1.0 / (double)big;
    CHECK(fabs(mlz_sample_prob(0, big) / (x - x * x / 2) - 1) < 1e-12);
    double p = mlz_sample_prob(16, RATE);
    CHECK(fabs(p - (1 - exp(-17.0 / RATE))) < 1e-15);
    CHECK(fabs(mlz_weight_bytes(16, RATE) - 16 / p) < 1e-6);
    CHECK(fabs(mlz_weight_count(16, RATE) - 1 / p) < 1e-9);
    CHECK(fabs(mlz_var_bytes(16, RATE) - 256 * (1 - p) / (p * p)) / mlz_var_bytes(16, RATE) < 1e-9);
    CHECK(fabs(mlz_var_count(16, RATE) - (1 - p) / (p * p)) / mlz_var_count(16, RATE) < 1e-9);
    /* Huge allocations: sampled for sure, weight = size, no variance. */
    CHECK(mlz_sample_prob(1ull << 40, RATE) == 1.0);
    CHECK(mlz_weight_bytes(1ull << 40, RATE) == (double)(1ull << 40));
    CHECK(mlz_var_bytes(1ull << 40, RATE) == 0.0);
}

/* Each allocation is sampled independently with p(req): check the sampled
 * fraction of two interleaved sizes against it (5-sigma bands). */
static void test_per_size_probability(void)
{
    mlz_sampler_tls t = {0};
    mlz_sampler_thread_init(&t, RATE, 31337);
    const size_t sizes[2] = {100 * 1024, 3000};
    const long n = 400000;
    long hits[2] = {0, 0}, seen[2] = {0, 0};
    uint64_t s = 5;
    for (long i = 0; i < 2 * n; i++) {
        int k = (int)(trng(&s) & 1);
        if (seen[k] == n) k ^= 1;
        seen[k]++;
        if (mlz_sampler_should_sample(&t, sizes[k])) {
            hits[k]++;
            mlz_sampler_rearm(&t, RATE);
        }
    }
    for (int k = 0; k < 2; k++) {
        double p = mlz_sample_prob(sizes[k], RATE);
        double sd = sqrt(p * (1 - p) / n);
        CHECK(fabs((double)hits[k] / n - p) < 5 * sd);
    }
}

/*
 * Calibration of the Horvitz-Thompson estimate and its 95% interval.
 * Five allocation sites, their allocations shuffled into one stream and run
 * through the real countdown, 50 seeds. For every (site, run) the interval
 * est +- 1.96 sqrt(var) must contain the true bytes in >= 90% of the 250
 * cases (95% expected; 90% allows for the normal approximation with ~50
 * samples per site).
 *
 * Measured with these seeds: 243/250 covered (97.2%). Mean estimate/true
 * per site, HT: 1.017 0.994 0.987 0.989 1.000; the original sampling design's estimator
 * (each sample worth `rate` bytes): 1.081 0.995 0.945 0.427 0.125. It is
 * biased low wherever allocations are not small against the rate, because
 * it assumes p = size/rate: 2 for a 1 MiB block (really 0.86), 8 for 4 MiB
 * (really ~1), 0.08 for 40 KiB (really 0.074). It is also ~6% high for
 * 16-byte blocks, where each request counts req+1 = 17 units.
 */
#define NSITES 5
#define NRUNS 50

static size_t site_size(int site, uint64_t *s)
{
    switch (site) {
    case 0: return 16;
    case 1: return 64 + trng(s) % 961;                  /* 64 B .. 1 KiB */
    case 2: return 16384 + trng(s) % (49152 + 1);       /* 16 .. 64 KiB */
    case 3: return 1u << 20;                            /* 1 MiB */
    default: return 4u << 20;                           /* 4 MiB */
    }
}

static void test_calibration(void)
{
    const long count[NSITES] = {1500000, 60000, 1500, 40, 8};
    long total = 0;
    for (int k = 0; k < NSITES; k++) total += count[k];
    unsigned char *order = malloc((size_t)total);
    REQUIRE(order);

    int covered = 0;
    double ht_ratio[NSITES] = {0}, seed_ratio[NSITES] = {0};
    for (int run = 0; run < NRUNS; run++) {
        uint64_t s = 1000 + (uint64_t)run;
        long at = 0;
        for (int k = 0; k < NSITES; k++)
            for (long i = 0; i < count[k]; i++) order[at++] = (unsigned char)k;
        for (long i = total - 1; i > 0; i--) { /* Fisher-Yates */
            long j = (long)(trng(&s) % (uint64_t)(i + 1));
            unsigned char tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }

        mlz_sampler_tls t = {0};
        mlz_sampler_thread_init(&t, RATE, mlz_sampler_seed_for_thread(run, 1, 2, 3));
        double truth[NSITES] = {0}, est[NSITES] = {0}, var[NSITES] = {0};
        long nsamp[NSITES] = {0};
        for (long i = 0; i < total; i++) {
            int k = order[i];
            size_t req = site_size(k, &s);
            truth[k] += (double)req;
            if (mlz_sampler_should_sample(&t, req)) {
                est[k] += mlz_weight_bytes(req, RATE);
                var[k] += mlz_var_bytes(req, RATE);
                nsamp[k]++;
                mlz_sampler_rearm(&t, RATE);
            }
        }
        for (int k = 0; k < NSITES; k++) {
            double half = 1.96 * sqrt(var[k]);
            if (fabs(est[k] - truth[k]) <= half) covered++;
            ht_ratio[k] += est[k] / truth[k] / NRUNS;
            seed_ratio[k] += (double)nsamp[k] * RATE / truth[k] / NRUNS;
        }
    }
    free(order);
    printf("  calibration: %d/%d intervals cover the truth\n", covered, NSITES * NRUNS);
    printf("  mean est/true  HT:  ");
    for (int k = 0; k < NSITES; k++) printf(" %.3f", ht_ratio[k]);
    printf("\n  mean est/true  n*rate:");
    for (int k = 0; k < NSITES; k++) printf(" %.3f", seed_ratio[k]);
    printf("\n");

    CHECK(covered >= NSITES * NRUNS * 90 / 100);
    for (int k = 0; k < NSITES; k++) CHECK(fabs(ht_ratio[k] - 1) < 0.05);
    /* The fixed-weight estimator misses most of the big blocks' bytes. */
    CHECK(seed_ratio[3] < 0.6);
    CHECK(seed_ratio[4] < 0.2);
}

/* A raise under overload: 1 MiB of 1 KiB blocks at a 4 KiB rate, then the
 * process-wide shift goes to 4 (64 KiB) and 1 MiB more follows. With each
 * sample weighed at the rate it was taken at, the estimate of the 2 MiB
 * must be unbiased. Without the thinning in mlz_sampler_follow, the first
 * point after the change (drawn at 4 KiB, kept for sure) would weigh 66 KiB:
 * +3% (about 35 standard errors of the mean over these runs). */
static void test_rate_raise_unbiased(void)
{
    enum { N = 2000, RUNS = 20000, SWITCH = N / 2 };
    const uint64_t r0 = 4096, size = 1024;
    double sum = 0, sum2 = 0;
    long thinned = 0, kept_first = 0;
    for (int run = 0; run < RUNS; run++) {
        mlz_sampler_tls t = {0};
        mlz_sampler_thread_init(&t, r0, mlz_sampler_seed_for_thread(77, (uint64_t)run, 5, 6));
        double est = 0;
        for (int i = 0; i < N; i++) {
            unsigned d = i < SWITCH ? 0 : 4;
            if (!mlz_sampler_should_sample(&t, size)) continue;
            unsigned before = t.rate_shift;
            int keep = mlz_sampler_follow(&t, d);
            if (before != t.rate_shift) { thinned++; kept_first += keep; }
            mlz_sampler_rearm(&t, r0 << t.rate_shift);
            if (keep) est += mlz_weight_bytes(size, r0 << t.rate_shift);
        }
        sum += est;
        sum2 += est * est;
    }
    double truth = (double)N * size, mean = sum / RUNS, sd = sqrt(sum2 / RUNS - mean * mean), se = sd / sqrt(RUNS);
    printf("  rate raise: mean estimate %.0f of %.0f (se %.0f); first point after it kept %ld of %ld\n",
           mean, truth, se, kept_first, thinned);
    CHECK(fabs(mean - truth) < 4.5 * se);
    CHECK(thinned == RUNS);                                     /* every run saw the change once */
    CHECK(kept_first > RUNS / 16 * 0.8 && kept_first < RUNS / 16 * 1.2);   /* 2^-4 of them */
    /* A smaller shift is a new session: taken as is, nothing thinned. */
    mlz_sampler_tls t = {0};
    t.rate_shift = 4;
    CHECK(mlz_sampler_follow(&t, 0) == 1 && t.rate_shift == 0);
}

static void test_seeding(void)
{
    uint64_t a = mlz_sampler_seed_for_thread(1, 100, 100, 5);
    uint64_t b = mlz_sampler_seed_for_thread(1, 100, 101, 5);
    uint64_t c = mlz_sampler_seed_for_thread(1, 101, 100, 5);
    uint64_t d = mlz_sampler_seed_for_thread(2, 100, 100, 5);
    CHECK(a != b && a != c && a != d && b != c);
    /* A one-bit change in tid flips about half the output bits. */
    int flips = __builtin_popcountll(a ^ b);
    CHECK(flips > 16 && flips < 48);

    mlz_sampler_tls x = {0}, y = {0}, z = {0};
    mlz_sampler_thread_init(&x, RATE, 7);
    mlz_sampler_thread_init(&y, RATE, 7);
    mlz_sampler_thread_init(&z, RATE, 8);
    CHECK(x.initialized == 1);
    int same = 1, differ = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t vx = mlz_sampler_rand(&x), vy = mlz_sampler_rand(&y), vz = mlz_sampler_rand(&z);
        same &= vx == vy;
        differ += vx != vz;
    }
    CHECK(same);
    CHECK(differ == 100);

    /* Seed 0 still gives a working (non-zero state) generator. */
    mlz_sampler_thread_init(&x, RATE, 0);
    CHECK((x.prng[0] | x.prng[1]) != 0);
    CHECK(mlz_sampler_rand(&x) != mlz_sampler_rand(&x));

    uint64_t e1 = mlz_sampler_global_entropy(), e2 = mlz_sampler_global_entropy();
    CHECK(e1 != e2);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_countdown_rule);
    RUN(test_exact_mode);
    RUN(test_ln);
    RUN(test_weights);
    RUN(test_mean_interval);
    RUN(test_ks_exponential);
    RUN(test_chi_square_20_bins);
    RUN(test_per_size_probability);
    RUN(test_seeding);
    RUN(test_rate_raise_unbiased);
    RUN(test_calibration);
    CHECK_EXIT();
}
