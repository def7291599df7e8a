/*
 * sampler_weights.c - the Horvitz-Thompson weights of Poisson byte samples
 * and their variances (declared in sampler.h). Used by the readers and the
 * tests; the payload only draws (sampler.c).
 */
#include "sampler.h"

#include <math.h>

/*
 * Weights. With q = e^(-(req+1)/rate) the chance an allocation is NOT
 * sampled, p = 1 - q is computed as -expm1(-(req+1)/rate) so a 16-byte
 * request at a 512 KiB rate (p ~ 3e-5) keeps full precision.
 */
double mlz_sample_prob(uint64_t req, uint64_t rate)
{
    if (rate <= 1) return 1.0;
    return -expm1(-((double)req + 1.0) / (double)rate);
}

static double miss_prob(uint64_t req, uint64_t rate)
{
    if (rate <= 1) return 0.0;
    return exp(-((double)req + 1.0) / (double)rate);
}

/* The sampled case (rate > 1): sampler.h answers rate <= 1 inline. */
double mlz__weight_bytes(uint64_t req, uint64_t rate)
{
    return (double)req / mlz_sample_prob(req, rate);
}

double mlz__weight_count(uint64_t req, uint64_t rate)
{
    return 1.0 / mlz_sample_prob(req, rate);
}

double mlz__var_bytes(uint64_t req, uint64_t rate)
{
    double p = mlz_sample_prob(req, rate), r = (double)req;
    return r * r * miss_prob(req, rate) / (p * p);
}

double mlz__var_count(uint64_t req, uint64_t rate)
{
    double p = mlz_sample_prob(req, rate);
    return miss_prob(req, rate) / (p * p);
}
