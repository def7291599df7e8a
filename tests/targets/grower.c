/*
 * grower.c - a target for the diff flame graph test: holds a known heap and
 * changes it on command, so two snapshots differ in a known way.
 *   start:        site_leak 10 x 4096, site_steady 50 x 1000, site_shrink 40 x 2048
 *   on each line: site_leak +100 x 4096, site_shrink frees 20 of its blocks
 * Prints "ready" when the start heap is held and "step N" after each change.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))
static void *leak[10000], *steady[50], *shrink[40];
static int nleak, nshrink;
static void *volatile sink;

NOINLINE void site_leak(void) { leak[nleak++] = sink = malloc(4096); }
NOINLINE void site_steady(int i) { steady[i] = sink = malloc(1000); }
NOINLINE void site_shrink(void) { shrink[nshrink++] = sink = malloc(2048); }

int main(void)
{
    char line[64];
    for (int i = 0; i < 10; i++) site_leak();
    for (int i = 0; i < 50; i++) site_steady(i);
    for (int i = 0; i < 40; i++) site_shrink();
    printf("ready\n");
    fflush(stdout);
    for (int step = 1; fgets(line, sizeof line, stdin); step++) {
        for (int i = 0; i < 100 && nleak < 10000; i++) site_leak();
        for (int i = 0; i < 20 && nshrink > 0; i++) free(shrink[--nshrink]);
        printf("step %d\n", step);
        fflush(stdout);
    }
    printf("done %d\n", nleak);
    return 0;
}
