/*
 * floor.c - the floor of any malloc interposer: an LD_PRELOAD library that
 * only forwards every allocator call to glibc through a function pointer
 * (the same indirect call memlyze's hooks make). bench/compare.sh measures
 * memlyze against it: what memlyze adds beyond this is its own cost.
 */
#define _GNU_SOURCE
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

/* glibc's own entry points: no dlsym bootstrap needed. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static void *(*volatile real_malloc)(size_t) = __libc_malloc;
static void (*volatile real_free)(void *) = __libc_free;
static void *(*volatile real_calloc)(size_t, size_t) = __libc_calloc;
static void *(*volatile real_realloc)(void *, size_t) = __libc_realloc;
static void *(*volatile real_memalign)(size_t, size_t) = __libc_memalign;

EXPORT void *malloc(size_t n) { return real_malloc(n); }
EXPORT void free(void *p) { real_free(p); }
EXPORT void *calloc(size_t n, size_t m) { return real_calloc(n, m); }
EXPORT void *realloc(void *p, size_t n) { return real_realloc(p, n); }
EXPORT void *memalign(size_t a, size_t n) { return real_memalign(a, n); }
EXPORT void *aligned_alloc(size_t a, size_t n) { return real_memalign(a, n); }
EXPORT void *valloc(size_t n) { return __libc_valloc(n); }
EXPORT void *pvalloc(size_t n) { return __libc_pvalloc(n); }
EXPORT int posix_memalign(void **out, size_t a, size_t n)
{
    if (a < sizeof(void *) || (a & (a - 1))) return 22;   /* EINVAL */
    void *p = real_memalign(a, n);
    if (!p) return 12;                                     /* ENOMEM */
    *out = p;
    return 0;
}
