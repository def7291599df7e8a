/*
 * dbg_crash.c - a target for the debugger core-file tests (gdb_core.sh,
 * lldb_*.sh): holds a known heap from distinct sites, one of them through
 * an inlined helper, then
 *   dbg_crash wait    prints "ready" and waits for standard input to close
 *   dbg_crash abort   dies of SIGABRT with the heap still live
 * held: crash_small 200 x 100 B = 20000, crash_big 5 x 200000 B = 1000000,
 *       crash_inline 30 x 3000 B = 90000 (malloc called from inl_alloc,
 *       inlined into crash_inline)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
static void *held[300];
static int nheld;
static void *volatile sink;

static inline __attribute__((always_inline)) void *inl_alloc(size_t n)
{
    void *p = malloc(n);
    sink = p;
    return p;
}

NOINLINE void crash_small(void) { held[nheld++] = sink = malloc(100); }
NOINLINE void crash_big(void) { held[nheld++] = sink = malloc(200000); }
NOINLINE void crash_inline(void) { held[nheld++] = inl_alloc(3000); }

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "wait";
    for (int i = 0; i < 200; i++) crash_small();
    for (int i = 0; i < 5; i++) crash_big();
    for (int i = 0; i < 30; i++) crash_inline();
    printf("ready\n");
    fflush(stdout);
    if (strcmp(mode, "abort") == 0) abort();
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {}
    printf("held %d\n", nheld);
    return 0;
}
