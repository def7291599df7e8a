/*
 * hooks_named.c - hooks for allocators known by name at run time: the
 * prefixed entry points of jemalloc, tcmalloc and mimalloc (je_malloc,
 * tc_free, mi_calloc...) sitting next to glibc's malloc, and the functions
 * a user names with --hook SYMBOL=KIND.
 *
 * The standard hooks (hooks.c) forward to the one real function of their
 * name (mlz__g.real). A named allocator needs its own original, so each
 * gets a slot: slot k's hooks forward to first[k].real, which gotpatch
 * fills with the definition (GOT mode) or the inline hook's trampoline.
 * The slots' functions are generated below, one per kind per slot; a slot
 * uses the one of its kind.
 *
 * While a named allocator runs, its own calls into the allocator below it
 * (a pool carving chunks it took from malloc) are not samples: in_named
 * makes mlz__sample_slow pass them, so a block is counted once, at the
 * level the program asked for it. Frees are still tracked at every level.
 */
#include "payload.h"
#include "gotpatch.h"
#include "info.h"

#include <string.h>

static struct mlz_got_hook *named;   /* slot k's original: named[k].real */

void mlz__named_bind(struct mlz_got_hook *first)
{
    named = first;
}

int mlz__kind_of(const char *word, size_t len)
{
    static const char *const names[] = MEMLYZE_HOOK_KINDS;
    /* Their hooks, by the arguments: aligned_alloc takes memalign's. */
    static const int kinds[] = { MLZ_KIND_MALLOC, MLZ_KIND_FREE, MLZ_KIND_CALLOC, MLZ_KIND_REALLOC,
                                 MLZ_KIND_MEMALIGN, MLZ_KIND_MEMALIGN, MLZ_KIND_POSIX_MEMALIGN };
    _Static_assert(sizeof names / sizeof *names == sizeof kinds / sizeof *kinds, "a hook for every kind");
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (strlen(names[k]) == len && !memcmp(word, names[k], len)) return kinds[k];
    return -1;
}

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef void *(*memalign_fn)(size_t, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);

/* The allocation hooks: the original runs with in_named set (its own
 * calls into the allocator below are not samples); the sample, if the
 * countdown ran out for SIZE bytes, is taken after it, as in hooks.c,
 * unless a standard hook's real call made this one (in_real: the
 * program's malloc built on this allocator samples the block itself, and
 * this sample point is drawn afresh).
 * The countdown comes back as it was after SIZE: the allocator's own
 * calls below (a pool's 1 MiB chunks) would use it up, and the program's
 * next blocks be sampled early: +39% on a pool of 16 B objects. */
#define NAMED_ALLOC(type, result, call, size, ok)                          \
    do {                                                                   \
        mlz_tls *t_ = &mlz__tls;                                           \
        int s_ = mlz_sampler_should_sample(&t_->s, (size));                \
        int64_t c_ = t_->s.countdown;                                      \
        t_->in_named++;                                                    \
        type r_ = (call);                                                  \
        t_->in_named--;                                                    \
        t_->s.countdown = c_;                                              \
        if (mlz_unlikely(s_)) {                                            \
            if (t_->in_real) mlz__sample_pass(t_);                         \
            else mlz__sample_slow((ok) ? (result) : NULL, (size), mlz__now_ns()); \
        }                                                                  \
        return r_;                                                         \
    } while (0)

static void *named_malloc(int k, size_t n)
{
    NAMED_ALLOC(void *, r_, ((malloc_fn)named[k].real)(n), n, 1);
}

static void *named_calloc(int k, size_t n, size_t m)
{
    size_t total;
    if (__builtin_mul_overflow(n, m, &total)) return ((calloc_fn)named[k].real)(n, m);
    NAMED_ALLOC(void *, r_, ((calloc_fn)named[k].real)(n, m), total, 1);
}

static void *named_memalign(int k, size_t align, size_t n)
{
    NAMED_ALLOC(void *, r_, ((memalign_fn)named[k].real)(align, n), n, 1);
}

static int named_posix_memalign(int k, void **out, size_t align, size_t n)
{
    NAMED_ALLOC(int, *out, ((posix_memalign_fn)named[k].real)(out, align, n), n, r_ == 0);
}

static void named_free(int k, void *p)
{
    if (p && mlz_unlikely(mlz_bloom_maybe(&mlz__g.bloom, (uint64_t)p))) mlz__free_slow(p);
    mlz__tls.in_named++;
    ((free_fn)named[k].real)(p);
    mlz__tls.in_named--;
}

static void *call_named_realloc(const void *ctx, void *p, size_t n, size_t m)
{
    (void)m;
    int64_t c = mlz__tls.s.countdown;   /* as in NAMED_ALLOC */
    mlz__tls.in_named++;
    void *q = ((realloc_fn)((const struct mlz_got_hook *)ctx)->real)(p, n);
    mlz__tls.in_named--;
    mlz__tls.s.countdown = c;
    return q;
}

static void *named_realloc(int k, void *p, size_t n)
{
    /* Under a standard hook's real call, as in NAMED_ALLOC: in_named makes
     * the new block's sample point pass (frees are tracked all the same). */
    int nested = mlz__tls.in_real != 0;
    mlz__tls.in_named += (uint32_t)nested;
    void *q = mlz__realloc_common(p, n, 1, call_named_realloc, &named[k]);
    mlz__tls.in_named -= (uint32_t)nested;
    return q;
}

/* Slot k's functions, one per kind, in enum mlz_alloc_kind order. */
#define SLOT(k)                                                                                  \
    static void *malloc_##k(size_t n) { return named_malloc(k, n); }                             \
    static void free_##k(void *p) { named_free(k, p); }                                          \
    static void *calloc_##k(size_t n, size_t m) { return named_calloc(k, n, m); }                \
    static void *realloc_##k(void *p, size_t n) { return named_realloc(k, p, n); }               \
    static void *memalign_##k(size_t a, size_t n) { return named_memalign(k, a, n); }            \
    static int posix_memalign_##k(void **o, size_t a, size_t n) { return named_posix_memalign(k, o, a, n); }
#define ROW(k) { (void *)malloc_##k, (void *)free_##k, (void *)calloc_##k, (void *)realloc_##k, \
                 (void *)memalign_##k, (void *)posix_memalign_##k },

SLOT(0) SLOT(1) SLOT(2) SLOT(3) SLOT(4) SLOT(5) SLOT(6) SLOT(7)
SLOT(8) SLOT(9) SLOT(10) SLOT(11) SLOT(12) SLOT(13) SLOT(14) SLOT(15)

static void *const slot_fns[MLZ_NAMED_HOOKS][MLZ_NKINDS] = {
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
    ROW(8) ROW(9) ROW(10) ROW(11) ROW(12) ROW(13) ROW(14) ROW(15)
};
_Static_assert(MLZ_NAMED_HOOKS == 16 && MLZ_NAMED_HOOKS == MEMLYZE_NAMED_HOOKS_MAX, "one SLOT and ROW per named hook");

void *mlz__named_hook(int slot, int kind)
{
    return slot >= 0 && slot < MLZ_NAMED_HOOKS && kind >= 0 && kind < MLZ_NKINDS ? slot_fns[slot][kind] : NULL;
}
