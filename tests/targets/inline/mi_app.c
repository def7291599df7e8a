/*
 * mi_app.c - a program linked with mimalloc's shared library that calls its
 * prefixed entry points (mi_malloc, mi_calloc, mi_free) directly, next to
 * plain malloc/free (which mimalloc also provides, as aliases). Each block
 * must be counted once, at the site that asked for it. Declared here:
 * libmimalloc-dev (mimalloc.h) need not be installed.
 *   site_mi          100 x mi_malloc(1000)       kept: 100000 B
 *   site_mi_calloc    50 x mi_calloc(10, 10)     kept:   5000 B
 *   site_plain       100 x malloc(500)           kept:  50000 B
 *   site_mi_temp     100 x mi_malloc(64), each mi_free'd:    0 B
 * Waits for a line on stdin first ("ready"), prints "done", exits at EOF.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *mi_malloc(size_t n);
void *mi_calloc(size_t n, size_t m);
void mi_free(void *p);

#define NOINLINE __attribute__((noinline))
static void *keep[300];
static int nkeep;
NOINLINE void site_mi(void) { keep[nkeep] = mi_malloc(1000); memset(keep[nkeep++], 1, 1000); }
NOINLINE void site_mi_calloc(void) { keep[nkeep++] = mi_calloc(10, 10); }
NOINLINE void site_plain(void) { keep[nkeep] = malloc(500); memset(keep[nkeep++], 2, 500); }
NOINLINE void site_mi_temp(void) { void *p = mi_malloc(64); memset(p, 3, 64); mi_free(p); }

int main(void)
{
    char buf[64];
    printf("ready\n");
    fflush(stdout);
    if (read(0, buf, sizeof buf) <= 0) return 1;
    for (int i = 0; i < 100; i++) site_mi();
    for (int i = 0; i < 50; i++) site_mi_calloc();
    for (int i = 0; i < 100; i++) site_plain();
    for (int i = 0; i < 100; i++) site_mi_temp();
    printf("done\n");
    fflush(stdout);
    while (read(0, buf, sizeof buf) > 0) {}
    printf("data ok\n");
    return 0;
}
