/*
 * dbg_work.c - the target of the attach/detach round trip (gdb_attach.sh):
 * one line "work" on standard input allocates at known sites and prints a
 * checksum; end of input prints a summary and exits. The output depends on
 * nothing but the input, so a profiled run must print exactly what a plain
 * run prints.
 *   per "work": work_keep 10 x 1000 B kept, work_temp 100 x 64 B freed
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))
static void *kept[10000];
static int nkept;

static void *volatile sink;
NOINLINE void *work_keep(void) { void *p = malloc(1000); sink = p; return p; }
NOINLINE void *work_temp(void) { void *p = malloc(64); sink = p; return p; }

int main(void)
{
    char line[256];
    int rounds = 0;
    unsigned long sum = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "work", 4)) continue;
        for (int i = 0; i < 10 && nkept < 10000; i++) {
            unsigned char *p = work_keep();
            memset(p, i, 1000);
            sum += p[999];
            kept[nkept++] = p;
        }
        for (int i = 0; i < 100; i++) {
            unsigned char *p = work_temp();
            p[0] = (unsigned char)i;
            sum += p[0];
            free(p);
        }
        printf("work %d sum %lu\n", ++rounds, sum);
    }
    printf("done kept %d\n", nkept);
    return 0;
}
