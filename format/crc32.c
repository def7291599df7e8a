/*
 * crc32.c - see crc32.h.
 *
 * Folding (x86_64 with PCLMULQDQ). In the reflected bit order zlib uses, a
 * 128-bit chunk x followed by D more bits of message contributes to the
 * CRC as x.lo * (x^(D+32) mod P) + x.hi * (x^(D-32) mod P), a product of
 * at most 96 bits, so a chunk can be carried forward over D bits with two
 * carry-less multiplications and added (XOR) to the chunk there. Four
 * chunks are carried over 512 bits at a time (four independent chains: a
 * multiplication's latency is hidden by the other three), then folded into
 * one over 128 bits each. The constants are those powers of x modulo the
 * gzip polynomial, bit-reflected and shifted by one as the reflected
 * product needs. What is left, 16 bytes that have the same CRC as all the
 * message folded so far, goes through zlib with the state at zero, and
 * zlib continues with the tail.
 */
#include "crc32.h"

#include <stdatomic.h>
#include <zlib.h>

/* Weak, as in codec_split.c: the payload links the format library and
 * must not depend on zlib; only codecs (which need zlib) call these. */
#pragma weak crc32

uint32_t mlz_crc32_zlib(const uint8_t *p, size_t n)
{
    uLong c = crc32(0L, Z_NULL, 0);
    /* zlib takes lengths as uInt: feed it in pieces that fit. */
    while (n > 0) {
        uInt k = n > (1u << 30) ? 1u << 30 : (uInt)n;
        c = crc32(c, p, k);
        p += k;
        n -= k;
    }
    return (uint32_t)c;
}

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define FOLD_TARGET __attribute__((target("pclmul,sse2")))

/* x carried over the distance k is made for, plus y. */
FOLD_TARGET static inline __m128i fold(__m128i x, __m128i k, __m128i y)
{
    __m128i lo = _mm_clmulepi64_si128(x, k, 0x00), hi = _mm_clmulepi64_si128(x, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), y);
}

#define LOAD(q) _mm_loadu_si128((const __m128i *)(const void *)(q))

/* n >= 64. */
FOLD_TARGET static uint32_t crc32_fold(const uint8_t *p, size_t n)
{
    const __m128i k512 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);   /* x^(512-32), x^(512+32) */
    const __m128i k128 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);   /* x^(128-32), x^(128+32) */
    /* A new CRC's state is all ones (zlib inverts it at both ends). */
    __m128i x0 = _mm_xor_si128(LOAD(p), _mm_cvtsi32_si128((int)0xFFFFFFFFu));
    __m128i x1 = LOAD(p + 16), x2 = LOAD(p + 32), x3 = LOAD(p + 48);
    p += 64, n -= 64;
    for (; n >= 64; p += 64, n -= 64) {
        x0 = fold(x0, k512, LOAD(p));
        x1 = fold(x1, k512, LOAD(p + 16));
        x2 = fold(x2, k512, LOAD(p + 32));
        x3 = fold(x3, k512, LOAD(p + 48));
    }
    __m128i x = fold(fold(fold(x0, k128, x1), k128, x2), k128, x3);
    for (; n >= 16; p += 16, n -= 16) x = fold(x, k128, LOAD(p));
    uint8_t rest[16];
    _mm_storeu_si128((__m128i *)(void *)rest, x);
    /* zlib inverts the CRC it is given: all ones is a state of zero. */
    uLong c = crc32(0xFFFFFFFFul, rest, 16);
    return (uint32_t)crc32(c, p, (uInt)n);   /* n < 16 */
}

/* cpuid itself: no libgcc state to initialise first, from any thread. */
static int have_pclmul(void)
{
    static _Atomic int have = -1;   /* every thread that asks first finds the same */
    int h = atomic_load_explicit(&have, memory_order_relaxed);
    if (h < 0) {
        unsigned a, b, c, d;
        h = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_PCLMUL) && (d & bit_SSE2);
        atomic_store_explicit(&have, h, memory_order_relaxed);
    }
    return h;
}

uint32_t mlz_crc32(const uint8_t *p, size_t n)
{
    if (n >= 64 && have_pclmul()) return crc32_fold(p, n);
    return mlz_crc32_zlib(p, n);
}

#else

uint32_t mlz_crc32(const uint8_t *p, size_t n)
{
    return mlz_crc32_zlib(p, n);
}

#endif
