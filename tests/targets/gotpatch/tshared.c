/* tshared.c - a shared library that allocates through its own GOT/PLT. */
#include <stdlib.h>

__attribute__((visibility("default"))) unsigned long tshared_work(int n)
{
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        char *p = malloc((size_t)i + 8);
        __asm__ volatile("" : : "r"(p) : "memory");
        p[0] = (char)i;
        sum += (unsigned char)p[0];
        free(p);
    }
    return sum;
}

/* An absolute R_X86_64_64 data slot naming malloc (in .data.rel.ro, so under
 * RELRO), and one with an addend, which is not a pointer to malloc and must
 * be left alone. */
__attribute__((visibility("default"))) void *(*const tshared_alloc_tbl[1])(size_t) = { malloc };
__attribute__((visibility("default"))) const char *const tshared_odd = (const char *)malloc + 16;

__attribute__((visibility("default"))) unsigned long tshared_via_table(int n)
{
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        void *(*volatile f)(size_t) = tshared_alloc_tbl[0];
        unsigned char *p = f(24);
        p[0] = 5;
        sum += p[0];
        free(p);
    }
    return sum;
}
