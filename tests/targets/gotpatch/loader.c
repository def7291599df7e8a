/* loader.c - libloader.so: RUNPATH $ORIGIN/lp; dlopens a plugin that only
 * its own RUNPATH finds. The caller glibc must see is this library, not the
 * executable and not the payload. */
#include <dlfcn.h>

__attribute__((visibility("default"))) void *loader_open(const char *name)
{
    /* not a tail call: glibc takes the caller from dlopen's return address,
     * which a `jmp dlopen` would leave pointing into our caller */
    void *h = dlopen(name, RTLD_NOW);
    __asm__ volatile("" : : "r"(h) : "memory");
    return h;
}
