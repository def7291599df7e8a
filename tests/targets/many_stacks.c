/*
 * many_stacks.c - allocations from tens of thousands of distinct stacks
 * that share a handful of return addresses: each call chain is a random
 * walk of depth 1..12 through four functions. A trace's stacks then hold
 * ~50 distinct pcs in ~500k frames.
 *   many_stacks N      N allocations (the last 4096 stay live), then exit
 */
#include <stdlib.h>

static unsigned state = 12345;
static void *keep[4096];

static unsigned next(void)
{
    state = state * 1103515245u + 12345u;
    return state >> 8;
}

__attribute__((noinline)) void *walk_a(int depth);
__attribute__((noinline)) void *walk_b(int depth);
__attribute__((noinline)) void *walk_c(int depth);
__attribute__((noinline)) void *walk_d(int depth);

static void *step(int depth)
{
    if (depth <= 0) return malloc(32 + next() % 64);
    switch ((next() >> 10) & 3) {
    case 0: return walk_a(depth - 1);
    case 1: return walk_b(depth - 1);
    case 2: return walk_c(depth - 1);
    default: return walk_d(depth - 1);
    }
}

/* The empty asm keeps each call a real call, not a tail jump. */
void *walk_a(int depth) { void *p = step(depth); __asm__ volatile(""); return p; }
void *walk_b(int depth) { void *p = step(depth); __asm__ volatile(""); return p; }
void *walk_c(int depth) { void *p = step(depth); __asm__ volatile(""); return p; }
void *walk_d(int depth) { void *p = step(depth); __asm__ volatile(""); return p; }

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 20000;
    for (long i = 0; i < n; i++) {
        unsigned k = next() % 4096;
        free(keep[k]);
        keep[k] = step(1 + (int)(next() % 12));
    }
    return 0;
}
