/*
 * test_crc32.c - the folded CRC-32 gives zlib's value for every length
 * around the fold's boundaries (16 and 64 bytes), at every alignment, on a
 * whole 1 MiB block, and on the standard check string.
 */
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "crc32.h"

static void test_check_value(void)
{
    const char *s = "123456789";
    CHECK_EQ_U64(mlz_crc32((const uint8_t *)s, 9), 0xCBF43926u);
    CHECK_EQ_U64(mlz_crc32(NULL, 0), 0);
    /* 64 bytes or more take the folded path where the CPU has one. */
    uint8_t zeros[200] = { 0 };
    CHECK_EQ_U64(mlz_crc32(zeros, sizeof zeros), mlz_crc32_zlib(zeros, sizeof zeros));
}

static void test_every_length_and_alignment(void)
{
    enum { MAX = 700 };
    uint8_t *buf = malloc(MAX + 16);
    REQUIRE(buf);
    uint64_t s = 3;
    for (int i = 0; i < MAX + 16; i++) buf[i] = (uint8_t)check_rng(&s);
    int bad = 0;
    for (int off = 0; off < 16; off++)
        for (size_t n = 0; n <= MAX; n++) bad += mlz_crc32(buf + off, n) != mlz_crc32_zlib(buf + off, n);
    CHECK_EQ_U64(bad, 0);
    /* All ones: the state's start and every bit of the fold's products set. */
    memset(buf, 0xFF, MAX + 16);
    for (size_t n = 0; n <= MAX; n++) bad += mlz_crc32(buf, n) != mlz_crc32_zlib(buf, n);
    CHECK_EQ_U64(bad, 0);
    free(buf);
}

static void test_whole_block(void)
{
    size_t n = 1u << 20;
    uint8_t *buf = malloc(n + 37);
    REQUIRE(buf);
    uint64_t s = 9;
    for (size_t i = 0; i < n + 37; i++) buf[i] = (uint8_t)(check_rng(&s) >> 13);
    CHECK_EQ_U64(mlz_crc32(buf, n), mlz_crc32_zlib(buf, n));
    CHECK_EQ_U64(mlz_crc32(buf + 1, n + 36), mlz_crc32_zlib(buf + 1, n + 36));
    /* One flipped bit anywhere changes it. */
    uint32_t c = mlz_crc32(buf, n);
    buf[n / 3] ^= 0x10;
    CHECK(mlz_crc32(buf, n) != c);
    free(buf);
}

int main(void)
{
    RUN(test_check_value);
    RUN(test_every_length_and_alignment);
    RUN(test_whole_block);
    CHECK_EXIT();
}
