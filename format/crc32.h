/*
 * crc32.h - CRC-32 as zlib's crc32() computes it (the gzip polynomial,
 * reflected), for the split-stream blocks' checksums.
 *
 * Every block read is checked in full, so on x86_64 CPUs with PCLMULQDQ
 * the bulk of a buffer is folded 64 bytes at a time by carry-less
 * multiplication; the last 16 folded bytes and any tail go through zlib.
 * Elsewhere (or for short buffers) it is zlib's crc32() alone. Both give
 * the same value: tests/unit/test_crc32.c checks them against each other.
 */
#ifndef MLZ_CRC32_H
#define MLZ_CRC32_H

#include <stddef.h>
#include <stdint.h>

uint32_t mlz_crc32(const uint8_t *p, size_t n);

/* zlib's crc32() alone: the reference the folded path must match. */
uint32_t mlz_crc32_zlib(const uint8_t *p, size_t n);

#endif
