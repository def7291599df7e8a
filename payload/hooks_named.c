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
    /* --hook's kinds, then those only families.c names. */
    static const char *const names[] = { MEMLYZE_HOOK_KIND_NAMES, "new", "delete", "catch" };
    /* Their hooks, by the arguments: aligned_alloc takes memalign's. */
    static const int kinds[] = { MLZ_KIND_MALLOC, MLZ_KIND_FREE, MLZ_KIND_CALLOC, MLZ_KIND_REALLOC,
                                 MLZ_KIND_MEMALIGN, MLZ_KIND_MEMALIGN, MLZ_KIND_POSIX_MEMALIGN,
                                 MLZ_KIND_NEW, MLZ_KIND_DELETE, MLZ_KIND_CATCH };
    _Static_assert(sizeof names / sizeof *names == sizeof kinds / sizeof *kinds, "a hook for every kind");
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (strlen(names[k]) == len && !memcmp(word, names[k], len)) return kinds[k];
    return -1;
}

typedef void *(*malloc_fn)(size_t);
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

/* free, and C++'s delete in every form (kind "delete"): the pointer
 * first, whatever follows it (size, alignment, nothrow tag) passed on as
 * it came; free takes none (an extra register argument is harmless). */
typedef void (*delete_fn)(void *, uintptr_t, uintptr_t);

void mlz__cxx_delete(void *real, void *p, uintptr_t a, uintptr_t b)
{
    if (p && mlz_unlikely(mlz_bloom_maybe(&mlz__g.bloom, (uint64_t)p))) mlz__free_slow(p);
    mlz__tls.in_named++;
    ((delete_fn)real)(p, a, b);
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

/* C++'s operator new, when an allocator replaces it (jemalloc's calls its
 * own aligned_alloc through the GOT: in_named keeps that from counting the
 * block twice). new may throw (bad_alloc): the exception crosses this frame
 * without running anything of ours (the payload has no unwinding
 * personality: it would need libgcc_s), so in_named stays set until the
 * exception is caught: mlz__cxx_catch, hooked on __cxa_begin_catch. */
typedef void *(*new_fn)(size_t, uintptr_t, uintptr_t);

/* A catch __cxa_begin_catch did not see (a module with libstdc++ linked in
 * statically calls its own): the new hook that set in_named is gone when
 * a later one runs above its frame. (Only a signal handler on an
 * alternate stack above the thread's could be wrong here, and then one
 * nested block is counted at its own level as well.) */
static inline void named_stale(mlz_tls *t, uintptr_t frame)
{
    if (mlz_unlikely(t->named_frame) && frame > t->named_frame) {
        t->in_named = 0;
        t->named_frame = 0;
    }
}
void *mlz__cxx_new(void *real, size_t n, uintptr_t a, uintptr_t b)
{
    mlz_tls *t = &mlz__tls;
    uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
    named_stale(t, frame);
    uintptr_t outer = t->named_frame;
    uint32_t depth = t->in_named;
    if (!depth) t->named_frame = frame;
    int s = mlz_sampler_should_sample(&t->s, n);
    int64_t c = t->s.countdown;
    t->in_named = depth + 1;
    void *r = ((new_fn)real)(n, a, b);
    /* As it was: a new hook below that threw, caught between, left its own. */
    t->in_named = depth;
    t->named_frame = outer;
    t->s.countdown = c;
    if (mlz_unlikely(s)) {
        if (t->in_real) mlz__sample_pass(t);
        else mlz__sample_slow(r, n, mlz__now_ns());
    }
    return r;
}

/* Every frame below the catching one's is gone: an operator new hook
 * among them (its frame below our caller's stack pointer, our CFA) was
 * left by the exception now caught. One caught inside the allocator (a
 * nothrow new built on the throwing one) is below the hook: kept. */
void *mlz__cxx_catch(void *real, void *exception)
{
    mlz_tls *t = &mlz__tls;
    uintptr_t caller_sp = (uintptr_t)__builtin_frame_address(0) + 2 * sizeof(void *);
    if (mlz_unlikely(t->named_frame) && t->named_frame < caller_sp) {
        t->in_named = 0;
        t->named_frame = 0;
    }
    return ((void *(*)(void *))real)(exception);
}

/* Slot k's functions, one per kind, in enum mlz_alloc_kind order. */
/* Slot numbers are pasted digit pairs 10..17, 20..27, ... 60..67: IDX
 * makes them 0..47. */
#define IDX(k) ((k) / 10 * 8 + (k) % 10 - 8)
#define SLOT(k)                                                                                  \
    static void *malloc_##k(size_t n) { return named_malloc(IDX(k), n); }                             \
    static void free_##k(void *p) { mlz__cxx_delete(named[IDX(k)].real, p, 0, 0); }                  \
    static void *calloc_##k(size_t n, size_t m) { return named_calloc(IDX(k), n, m); }                \
    static void *realloc_##k(void *p, size_t n) { return named_realloc(IDX(k), p, n); }               \
    static void *memalign_##k(size_t a, size_t n) { return named_memalign(IDX(k), a, n); }            \
    static int posix_memalign_##k(void **o, size_t a, size_t n) { return named_posix_memalign(IDX(k), o, a, n); } \
    static void *new_##k(size_t n, uintptr_t a, uintptr_t b) { return mlz__cxx_new(named[IDX(k)].real, n, a, b); } \
    static void delete_##k(void *p, uintptr_t a, uintptr_t b) { mlz__cxx_delete(named[IDX(k)].real, p, a, b); } \
    static void *catch_##k(void *e) { return mlz__cxx_catch(named[IDX(k)].real, e); }
#define ROW(k) { (void *)malloc_##k, (void *)free_##k, (void *)calloc_##k, (void *)realloc_##k, \
                 (void *)memalign_##k, (void *)posix_memalign_##k, (void *)new_##k, (void *)delete_##k, \
                 (void *)catch_##k },
#define SLOT8(k) SLOT(k##0) SLOT(k##1) SLOT(k##2) SLOT(k##3) SLOT(k##4) SLOT(k##5) SLOT(k##6) SLOT(k##7)
#define ROW8(k) ROW(k##0) ROW(k##1) ROW(k##2) ROW(k##3) ROW(k##4) ROW(k##5) ROW(k##6) ROW(k##7)

SLOT8(1) SLOT8(2) SLOT8(3) SLOT8(4) SLOT8(5) SLOT8(6)

static void *const slot_fns[MLZ_NAMED_HOOKS][MLZ_NKINDS] = {
    ROW8(1) ROW8(2) ROW8(3) ROW8(4) ROW8(5) ROW8(6)
};
_Static_assert(MLZ_NAMED_HOOKS == 48 && MLZ_NAMED_HOOKS >= MEMLYZE_NAMED_HOOKS_MAX, "one SLOT and ROW per named hook");

void *mlz__named_hook(int slot, int kind)
{
    return slot >= 0 && slot < MLZ_NAMED_HOOKS && kind >= 0 && kind < MLZ_NKINDS ? slot_fns[slot][kind] : NULL;
}
