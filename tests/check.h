/*
 * check.h - the tiny test harness every C test in tests/unit uses.
 *
 * A test file defines `static void test_x(void)` functions and a main() that
 * calls RUN(test_x) for each. Every RUN prints one line, "PASS: name" or
 * "FAIL: name", which tests/run.sh counts into the final "N passed, N failed"
 * line. CHECK() records a failure with file:line and keeps going, so one run
 * shows every broken expectation; REQUIRE() returns from the test at once.
 *
 * We write this (40 lines) instead of depending on cmocka because our tests
 * span C programs, shell scripts driving real processes, and sanitizer
 * builds; one line format for all of them keeps the runner trivial.
 */
#ifndef MLZ_TESTS_CHECK_H
#define MLZ_TESTS_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failed_;       /* failures in the running test */
static int check_total_failed_; /* tests that failed in this binary */

static void check_fail_(const char *file, int line, const char *what)
{
    fprintf(stderr, "  %s:%d: check failed: %s\n", file, line, what);
    check_failed_++;
}

#define CHECK(c) do { if (!(c)) check_fail_(__FILE__, __LINE__, #c); } while (0)
#define REQUIRE(c) do { if (!(c)) { check_fail_(__FILE__, __LINE__, #c); return; } } while (0)
#define CHECK_EQ_U64(a, b) do { uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b); \
    if (a_ != b_) { char m_[256]; snprintf(m_, sizeof m_, "%s == %s (%" PRIu64 " != %" PRIu64 ")", \
        #a, #b, a_, b_); check_fail_(__FILE__, __LINE__, m_); } } while (0)

/* splitmix64: reproducible pseudo-random numbers for tests, from a seed. */
static inline uint64_t check_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Run one test unless argv names others (tests can be run one by one). */
static int check_argc_;
static char **check_argv_;
#define CHECK_MAIN_INIT(argc, argv) (check_argc_ = (argc), check_argv_ = (argv))

static void check_run_(const char *name, void (*fn)(void))
{
    if (check_argc_ > 1) {
        int wanted = 0;
        for (int i = 1; i < check_argc_; i++)
            if (strcmp(check_argv_[i], name) == 0) wanted = 1;
        if (!wanted) return;
    }
    check_failed_ = 0;
    fn();
    printf("%s: %s\n", check_failed_ ? "FAIL" : "PASS", name);
    fflush(stdout);
    if (check_failed_) check_total_failed_++;
}
#define RUN(fn) check_run_(#fn, fn)
#define CHECK_EXIT() return check_total_failed_ ? 1 : 0

/* A whole file in memory (malloc'd; *n its length), or NULL. */
static inline void *check_slurp(const char *path, size_t *n)
{
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(len > 0 ? (size_t)len : 1);
    *n = b ? fread(b, 1, (size_t)len, f) : 0;
    fclose(f);
    return b;
}

/* 1 if both files exist and hold the same bytes. */
static inline int check_same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    void *x = check_slurp(a, &na), *y = check_slurp(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

#endif
