/* benchlib.c - one of the 50 tiny libraries of bench_gotpatch (-DIDX=n). */
#include <stdlib.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

__attribute__((visibility("default"))) void *CAT(benchlib_, IDX)(size_t n)
{
    void *p = malloc(n);
    void *q = calloc(1, n);
    __asm__ volatile("" : : "r"(q) : "memory");   /* keep the calloc/free pair */
    p = realloc(p, n * 2);
    free(q);
    return p;
}
