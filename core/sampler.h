/*
 * sampler.h - Poisson byte sampling: which allocations get recorded, and
 * what each recorded one stands for.
 *
 * Every allocation of `req` bytes is treated as req+1 "units" of a byte
 * stream (the +1 lets zero-byte requests be sampled). Sample points fall on
 * that stream as a Poisson process of mean spacing `rate`. Each thread keeps
 * a countdown to its next sample point; the hot path only subtracts.
 *
 * After a sample the countdown is re-drawn fresh from the start of the next
 * allocation (the rest of the sampled block is not carried over). Because
 * the exponential is memoryless this makes every allocation an independent
 * Bernoulli trial with
 *
 *     p(req) = 1 - exp(-(req+1)/rate)
 *
 * so the Horvitz-Thompson weight req/p(req) is an exactly unbiased estimate
 * of its bytes, for every size, including sizes far above `rate` (where the
 * "each sample is worth `rate` bytes" rule of the design seed underestimates:
 * see tests/unit/test_sampler.c for the numbers).
 *
 * Usage by the hooks (the TLS instance lives in the payload):
 *
 *     if (mlz_unlikely(mlz_sampler_should_sample(&tls, req)))
 *         slow_path(req);          // noinline, cold
 *
 * A zero-filled mlz_sampler_tls has countdown 0, so a thread's very first
 * allocation lands in the slow path without any extra check on the fast path.
 * The slow path then sees !initialized, calls mlz_sampler_thread_init() and
 * re-applies should_sample() to that first request with the fresh countdown
 * (so the first allocation is not sampled with probability 1). After a real
 * sample it calls mlz_sampler_rearm().
 */
#ifndef MLZ_SAMPLER_H
#define MLZ_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "platform.h"

#define MLZ_SAMPLER_DEFAULT_RATE (512u * 1024u) /* bytes between samples */

typedef struct mlz_sampler_tls {
    int64_t countdown;    /* units left before the next sample point, minus 1 */
    uint64_t prng[2];     /* xoroshiro128++ state, never all zero */
    uint32_t in_hook;     /* recursion guard, owned by the payload */
    uint32_t initialized; /* set by mlz_sampler_thread_init() */
    uint32_t rate_shift;  /* the thread samples at rate << rate_shift (mlz_sampler_follow) */
} mlz_sampler_tls;

/* Hot path: req+1 units off the countdown, and a sign test. The countdown
 * is kept one below the units left, so that the point is reached when it
 * goes negative rather than at <= 0: the compiler then does the update and
 * the test with one add to thread-local memory and a js (6 instructions in
 * the malloc hook instead of 8: load, add, store, test). Unsigned
 * arithmetic, so a nonsense size wraps instead of being UB; and a request
 * of 2^63 bytes or more (malloc fails it), which would move the countdown
 * up by 2^64 - 1 - req and blind the thread for that long (exact mode
 * too), is a sample point itself: the slow path draws a fresh countdown.
 * That test comes first, on the register: the update stays one add to
 * memory (tested after it, the compiler split it into load, add, store). */
static inline int mlz_sampler_should_sample(mlz_sampler_tls *t, size_t req)
{
    if (mlz_unlikely((int64_t)req < 0)) return 1;
    t->countdown = (int64_t)((uint64_t)t->countdown + ~(uint64_t)req);   /* - req - 1 */
    return mlz_unlikely(t->countdown < 0);
}

/* Seed the PRNG from `seed` (expanded with splitmix64) and draw the first
 * countdown for mean `rate`. */
void mlz_sampler_thread_init(mlz_sampler_tls *t, uint64_t rate, uint64_t seed);

/* Per-thread seed: a strong mix of the process-wide seed and the thread's
 * identity, so threads, fork children and simultaneously started workers
 * get uncorrelated streams. */
uint64_t mlz_sampler_seed_for_thread(uint64_t global_seed, uint64_t pid,
                                     uint64_t tid, uint64_t time_ns);

/* 64 bits of entropy: getrandom(2), then /dev/urandom (raw open/read), then
 * clocks mixed with pid and an ASLR'd address. Callers with a seed from the
 * environment (deterministic tests) skip this. */
uint64_t mlz_sampler_global_entropy(void);

/* Next countdown: ceil of an exponential draw of mean `rate`; rate <= 1 is
 * exact mode (countdown 1: every allocation is sampled). */
void mlz_sampler_rearm(mlz_sampler_tls *t, uint64_t rate);
/* Natural log of u in [2^-53, 1] (the draw's; no libm). */
double mlz_sampler_ln(double u);

/* One raw 64-bit PRNG output (tests, jitter). */
uint64_t mlz_sampler_rand(mlz_sampler_tls *t);

/* Rate raises (the payload doubles its rate d times under overload). Call
 * at each sample point with the process-wide shift d, before rearming at
 * rate << d. When d is larger than the thread's shift, the point was drawn
 * at the old rate: it is kept with probability 2^-(d - shift). Thinning a
 * Poisson process of mean interval R that way leaves one of mean R * 2^k,
 * and the countdowns after it are drawn at the new rate, so every point
 * from the one the thread sees the change at weighs as one at the new rate:
 * the estimates stay unbiased. A smaller d (a new session) is taken as is.
 * Sets t->rate_shift = d; 1 = keep the point. */
int mlz_sampler_follow(mlz_sampler_tls *t, unsigned d);

/* Weights, shared with the reader: pure functions of (req, rate).
 * p = P(an allocation of req bytes is sampled); 1.0 when rate <= 1. */
double mlz_sample_prob(uint64_t req, uint64_t rate);
/* Per-sample terms of the unbiased Horvitz-Thompson variance estimate:
 * Var(sum) ~= sum over samples of these. A 95% interval for a total is
 * est +- 1.96 * sqrt(sum var).
 * Exact traces (rate <= 1) are answered inline: the readers' replays ask
 * for every event. sampler_weights.c computes the sampled case. */
double mlz__weight_bytes(uint64_t req, uint64_t rate);
double mlz__weight_count(uint64_t req, uint64_t rate);
double mlz__var_bytes(uint64_t req, uint64_t rate);
double mlz__var_count(uint64_t req, uint64_t rate);

static inline double mlz_weight_bytes(uint64_t req, uint64_t rate)   /* req / p */
{
    return rate <= 1 ? (double)req : mlz__weight_bytes(req, rate);
}

static inline double mlz_weight_count(uint64_t req, uint64_t rate)   /* 1 / p */
{
    return rate <= 1 ? 1.0 : mlz__weight_count(req, rate);
}

static inline double mlz_var_bytes(uint64_t req, uint64_t rate)      /* req^2 (1-p) / p^2 */
{
    return rate <= 1 ? 0.0 : mlz__var_bytes(req, rate);
}

static inline double mlz_var_count(uint64_t req, uint64_t rate)      /* (1-p) / p^2 */
{
    return rate <= 1 ? 0.0 : mlz__var_count(req, rate);
}

#endif
