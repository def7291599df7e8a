/*
 * preload.c - the LD_PRELOAD front end (built into libmemlyze-preload.so
 * only): exported malloc, free, ... that the dynamic linker binds every
 * module to, each a tail call into the hooks.
 *
 * The real functions come from dlsym(RTLD_NEXT), resolved at the first
 * allocation. dlsym may itself allocate; while it runs, those requests are
 * served from a small static arena whose blocks are never freed. Each is
 * kept in the Bloom filters (mlz__bloom_keep, state.c), so a free of one
 * takes the hooks' slow path, which keeps it from the real
 * free (mlz__boot_block): the exported free itself tests nothing (a load
 * and a branch there cost 2-3% of a malloc/free pair).
 */
#include "payload.h"
#include "modtab.h"
#include "gotpatch.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const int mlz__preload_build = 1;

#define ARENA_SIZE (64 * 1024)
static alignas(64) unsigned char arena[ARENA_SIZE];
static _Atomic size_t arena_used;
static _Atomic int resolving;

static void *arena_alloc(size_t n, size_t align)
{
    if (align < 16) align = 16;
    for (;;) {
        size_t off = atomic_load(&arena_used);
        size_t start = (off + align - 1) & ~(align - 1);
        if (start + n > ARENA_SIZE || start + n < start) return NULL;
        if (atomic_compare_exchange_weak(&arena_used, &off, start + n)) {
            mlz__bloom_keep((uint64_t)(uintptr_t)(arena + start));
            return arena + start;
        }
    }
}

int mlz__boot_block(const void *p)
{
    return (const unsigned char *)p >= arena && (const unsigned char *)p < arena + ARENA_SIZE;
}

static void resolve_all(void)
{
    if (atomic_exchange(&resolving, 1)) return;
    mlz_real_fns r;
    r.malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    r.free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    r.calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
    r.realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
    r.posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
    r.aligned_alloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
    r.memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
    r.valloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "valloc");
    r.pvalloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "pvalloc");
    if (!r.malloc || !r.free || !r.calloc || !r.realloc) {
        static const char msg[] = "memlyze: cannot find the real malloc (static binary?); aborting\n";
        if (write(2, msg, sizeof msg - 1)) {}
        abort();
    }
    mlz__g.real = r;
}

/* Until resolved, the hooks call these: state.c points mlz__g.real at them
 * statically (weak references), so even the loader's first malloc works. */
void *mlz__boot_malloc(size_t n)
{
    if (atomic_load(&resolving) && mlz__g.real.malloc == mlz__boot_malloc) return arena_alloc(n, 16);
    resolve_all();
    return mlz__g.real.malloc(n);
}
void *mlz__boot_calloc(size_t n, size_t m)
{
    size_t t;
    if (atomic_load(&resolving) && mlz__g.real.calloc == mlz__boot_calloc)
        return __builtin_mul_overflow(n, m, &t) ? NULL : arena_alloc(t, 16);  /* .bss is zeroed */
    resolve_all();
    return mlz__g.real.calloc(n, m);
}
void mlz__boot_free(void *p)
{
    if (!p || mlz__boot_block(p)) return;
    resolve_all();
    mlz__g.real.free(p);
}
void *mlz__boot_realloc(void *p, size_t n)
{
    resolve_all();
    return mlz__g.real.realloc(p, n);
}
int mlz__boot_posix_memalign(void **o, size_t a, size_t n) { resolve_all(); return mlz__g.real.posix_memalign(o, a, n); }
void *mlz__boot_aligned_alloc(size_t a, size_t n) { resolve_all(); return mlz__g.real.aligned_alloc(a, n); }
void *mlz__boot_memalign(size_t a, size_t n) { resolve_all(); return mlz__g.real.memalign(a, n); }
void *mlz__boot_valloc(size_t n) { resolve_all(); return mlz__g.real.valloc(n); }
void *mlz__boot_pvalloc(size_t n) { resolve_all(); return mlz__g.real.pvalloc(n); }

/* The exports. */
MLZ_EXPORT MLZ_HOT_ALIGN void *malloc(size_t n) { return mlz__malloc_hot(n); }
MLZ_EXPORT MLZ_HOT_ALIGN void free(void *p) { mlz__free_hot(p); }
MLZ_EXPORT void *calloc(size_t n, size_t m) { return mlz_hook_calloc(n, m); }
MLZ_EXPORT void *realloc(void *p, size_t n)
{
    if (mlz_unlikely(atomic_load_explicit(&arena_used, memory_order_relaxed)) && mlz__boot_block(p)) {
        void *q = mlz_hook_malloc(n);      /* arena blocks move out, never back */
        if (q && p) memcpy(q, p, n < ARENA_SIZE - (size_t)((unsigned char *)p - arena) ? n : ARENA_SIZE - (size_t)((unsigned char *)p - arena));
        return q;
    }
    return mlz_hook_realloc(p, n);
}
MLZ_EXPORT int posix_memalign(void **o, size_t a, size_t n) { return mlz_hook_posix_memalign(o, a, n); }
MLZ_EXPORT void *aligned_alloc(size_t a, size_t n) { return mlz_hook_aligned_alloc(a, n); }
MLZ_EXPORT void *memalign(size_t a, size_t n) { return mlz_hook_memalign(a, n); }
MLZ_EXPORT void *valloc(size_t n) { return mlz_hook_valloc(n); }
MLZ_EXPORT void *pvalloc(size_t n) { return mlz_hook_pvalloc(n); }
MLZ_EXPORT void *reallocarray(void *p, size_t n, size_t m) { return mlz_hook_reallocarray(p, n, m); }

/* dlopen and dlclose are exported for one reason: the module map is
 * retaken as soon as a library comes (so its allocations unwind through it
 * at once, not from the drain's next round) and around its unload; the
 * attached front does the same in its hooks. The name is resolved as the
 * caller would have (its RUNPATH, $ORIGIN): to glibc, we are the caller. */
/* The next definition of name, by its glibc versions first: dlvsym, as
 * an interposed dlsym may itself call dlopen (tests/targets/dlsym_alloc.c
 * does), which would come back here before we know where to go. */
static void *next_fn(const char *name)
{
    void *f = dlvsym(RTLD_NEXT, name, "GLIBC_2.34");
    if (!f) f = dlvsym(RTLD_NEXT, name, "GLIBC_2.2.5");
    return f ? f : dlsym(RTLD_NEXT, name);
}

MLZ_EXPORT void *dlopen(const char *file, int mode)
{
    static void *(*_Atomic real)(const char *, int);
    void *(*f)(const char *, int) = atomic_load(&real);
    if (!f) atomic_store(&real, f = (void *(*)(const char *, int))next_fn("dlopen"));
    if (!f) return NULL;
    static int (*_Atomic real_close)(void *);
    int (*c)(void *) = atomic_load(&real_close);
    if (!c) atomic_store(&real_close, c = (int (*)(void *))next_fn("dlclose"));
    char path[PATH_MAX];
    const char *use = file && mlz_got_dlopen_path(file, __builtin_return_address(0), path, sizeof path) == 1 ? path : file;
    int fresh = mlz__dlopen_loads_new(f, c, use);
    void *h = f(use, mode);
    if (h && fresh) mlz_modtab_lock_seen();
    int saved = errno;
    if (h) mlz__modules_refresh();
    errno = saved;
    return h;
}

MLZ_EXPORT int dlclose(void *handle)
{
    static int (*_Atomic real)(void *);
    int (*f)(void *) = atomic_load(&real);
    if (!f) atomic_store(&real, f = (int (*)(void *))next_fn("dlclose"));
    if (!f) return -1;
    return mlz__dlclose_between(f, handle);
}
