/*
 * bypass.c - libbypass.so, built with -Wl,-Bsymbolic: it defines malloc and
 * free itself (a static bump allocator), and its own calls to them are bound
 * at link time into direct calls that no GOT slot sees. The capstone scan
 * must report them. Loaded only RTLD_LOCAL (as a dependency of libuser.so,
 * dlopen'ed with RTLD_DEEPBIND), so it never becomes the process's malloc.
 */
#include <stddef.h>
#include <stdint.h>

static unsigned char arena[1 << 20];
static size_t used;

__attribute__((visibility("default"))) void *malloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > sizeof arena - used) return NULL;
    void *p = arena + used;
    used += n;
    return p;
}

__attribute__((visibility("default"))) void free(void *p)
{
    (void)p;
}

__attribute__((visibility("default"))) unsigned long bypass_work(int n)
{
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        unsigned char *p = malloc(16);
        __asm__ volatile("" : : "r"(p) : "memory");
        p[0] = 1;
        sum += p[0];
        free(p);
    }
    return sum;
}

__attribute__((visibility("default"))) size_t bypass_used(void)
{
    return used;
}
