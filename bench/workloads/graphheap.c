/*
 * graphheap.c - a large heap of known shape for bench_heapdump.sh: N objects
 * of SIZE bytes in a binary tree (object i points to 2i+1 and 2i+2) hanging
 * off the global g_tree_root, the rest of each object filled with integers
 * that are not addresses; every 100th object is left out of the tree (leaked).
 * One thread counts loop iterations so the benchmark sees the pause.
 *   graphheap N SIZE
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

void **g_tree_root;
static void **objs;

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000, size = argc > 2 ? atol(argv[2]) : 1024;
    if (n < 1 || size < 24) return 2;
    objs = malloc((size_t)n * sizeof *objs);
    for (long i = 0; i < n; i++) {
        uint64_t *o = malloc((size_t)size);
        for (long w = 2; w < size / 8; w++) o[w] = (uint64_t)(i * 131 + w);
        objs[i] = o;
    }
    for (long i = 0; i < n; i++) {
        void **o = objs[i];
        o[0] = 2 * i + 1 < n && (2 * i + 1) % 100 ? objs[2 * i + 1] : NULL;
        o[1] = 2 * i + 2 < n && (2 * i + 2) % 100 ? objs[2 * i + 2] : NULL;
    }
    g_tree_root = objs[0];
    free(objs);   /* only the tree keeps them now */
    objs = NULL;
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {}
    return 0;
}
