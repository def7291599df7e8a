/*
 * dlsym_alloc.c - a preload shim whose dlsym allocates (as an interposer's
 * or an older libc's may). Preloaded before libmemlyze-preload.so, it makes
 * memlyze resolve the real malloc while malloc cannot be called yet, so the
 * blocks come from memlyze's boot arena. Each call frees the previous
 * call's block, and the last one is freed at exit, long after the real
 * functions are resolved: those frees must never reach the real free.
 * RTLD_NEXT lookups are answered from libc (a forwarded RTLD_NEXT would be
 * relative to this shim, not to its caller).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static void *prev;

void *dlsym(void *handle, const char *name)
{
    static void *(*real)(void *, const char *);
    static void *libc;
    if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real) real = (void *(*)(void *, const char *))dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (handle == RTLD_NEXT) {
        if (!libc) libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
        handle = libc;
    }
    void *p = malloc(40);
    if (p) memset(p, 0x5a, 40);
    free(prev);
    prev = p;
    return real(handle, name);
}

__attribute__((destructor)) static void last(void)
{
    free(prev);
    prev = NULL;
}
