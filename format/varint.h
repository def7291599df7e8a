/*
 * varint.h - protobuf-style unsigned varints and little-endian fixed fields.
 *
 * 7 data bits per byte, low group first, high bit set on every byte but the
 * last. A uint64_t needs at most 10 bytes. The decoder is strict: it rejects
 * truncated input, encodings longer than 10 bytes, a 10th byte carrying more
 * than the one remaining bit, and overlong (non-minimal) encodings such as
 * 0x80 0x00, so that every value has exactly one encoding and a dump/undump
 * round trip is byte-identical.
 */
#ifndef MLZ_VARINT_H
#define MLZ_VARINT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MLZ_VARINT_MAX 10

/* Writes v at p (room for MLZ_VARINT_MAX bytes needed); returns bytes used. */
static inline size_t mlz_varint_put(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static inline size_t mlz_varint_len(uint64_t v)
{
    /* 7 bits per byte: ceil(b / 7) for b significant bits, at least 1.
     * (9b + 64) / 64 equals it for every b in 1..64 (test_varint checks
     * all), with a shift instead of a division: the split-stream decoder
     * sums these for every event. */
    unsigned b = 64u - (unsigned)__builtin_clzll(v | 1);
    return (size_t)((9u * b + 64u) >> 6);
}

/* v1 bytes of an ALLOC (type, delta, address u64, size, stack, thread u16)
 * and of a FREE (type, delta, address u64), from their fields. */
static inline size_t mlz_v1_alloc_len(uint64_t delta, uint64_t size, uint64_t stack)
{
    return 1 + mlz_varint_len(delta) + 8 + mlz_varint_len(size) + mlz_varint_len(stack) + 2;
}

static inline size_t mlz_v1_free_len(uint64_t delta)
{
    return 1 + mlz_varint_len(delta) + 8;
}

enum {
    MLZ_VARINT_OK = 0,
    MLZ_VARINT_TRUNCATED = -1,  /* input ended inside the varint */
    MLZ_VARINT_TOO_LONG = -2,   /* more than 10 bytes, or overflows 64 bits */
    MLZ_VARINT_OVERLONG = -3,   /* valid value but not the minimal encoding */
};

/* Decodes one varint from [p, end). On success stores the value and the
 * number of bytes consumed; otherwise returns one of the negative codes. */
static inline int mlz_varint_get(const uint8_t *p, const uint8_t *end,
                                 uint64_t *v, size_t *used)
{
    uint64_t x = 0;
    for (size_t i = 0; i < MLZ_VARINT_MAX; i++) {
        if (p + i >= end) return MLZ_VARINT_TRUNCATED;
        uint8_t b = p[i];
        if (i == 9 && b > 1) return MLZ_VARINT_TOO_LONG;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (i > 0 && b == 0) return MLZ_VARINT_OVERLONG;
            *v = x;
            *used = i + 1;
            return MLZ_VARINT_OK;
        }
    }
    return MLZ_VARINT_TOO_LONG;
}

/* Little-endian fixed fields. On a little-endian host each is one load or
 * store (a memcpy of constant size compiles to a mov): GCC did not merge
 * the byte loop of mlz_put_u64 when it could not rule out aliasing with
 * the writer's own fields, and that loop was 48 of the 81 instructions the
 * payload's drain thread spent writing an ALLOC. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define MLZ_LITTLE_ENDIAN 1
#else
#define MLZ_LITTLE_ENDIAN 0
#endif

static inline void mlz_put_u16(uint8_t *p, uint16_t v)
{
    if (MLZ_LITTLE_ENDIAN) { memcpy(p, &v, 2); return; }
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8);
}
static inline void mlz_put_u32(uint8_t *p, uint32_t v)
{
    if (MLZ_LITTLE_ENDIAN) { memcpy(p, &v, 4); return; }
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void mlz_put_u64(uint8_t *p, uint64_t v)
{
    if (MLZ_LITTLE_ENDIAN) { memcpy(p, &v, 8); return; }
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t mlz_get_u16(const uint8_t *p)
{
    uint16_t v;
    if (MLZ_LITTLE_ENDIAN) { memcpy(&v, p, 2); return v; }
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t mlz_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    if (MLZ_LITTLE_ENDIAN) { memcpy(&v, p, 4); return v; }
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t mlz_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    if (MLZ_LITTLE_ENDIAN) { memcpy(&v, p, 8); return v; }
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
