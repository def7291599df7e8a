/*
 * own_alloc.c - a complete malloc family defined in the executable (linked
 * with sites.c): a lock-free size-class allocator over one mmap'd region,
 * with a header holding the size, free lists per 64-byte class under
 * spinlocks. calloc and realloc use the internal
 * functions, never the public malloc, as real allocators do (otherwise one
 * calloc would pass two hooks).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define REGION ((size_t)1 << 30)
#define HDR 16
static char *base;
static _Atomic size_t used;
static void *freelist[64];             /* per 64-byte class up to 4 KiB: user pointers, linked through their first word */
static atomic_flag lock[64];

static void take(int c) { while (atomic_flag_test_and_set_explicit(&lock[c], memory_order_acquire)) {} }
static void give(int c) { atomic_flag_clear_explicit(&lock[c], memory_order_release); }

static int cls(size_t n) { return n <= 4096 - HDR ? (int)((n + HDR + 63) / 64) : -1; }

static inline __attribute__((always_inline)) void *alloc_impl(size_t n, size_t align)
{
    if (!base) {
        char *b = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (b == MAP_FAILED) return NULL;
        char *expect = NULL;
        if (!__atomic_compare_exchange_n(&base, &expect, b, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) munmap(b, REGION);
    }
    if (align < HDR) align = HDR;
    int c = align == HDR ? cls(n) : -1;
    size_t total = c > 0 ? (size_t)c * 64 : n + align + HDR;
    if (c > 0) {
        take(c);
        void *p = freelist[c];
        if (p) freelist[c] = *(void **)p;
        give(c);
        if (p) { ((size_t *)p)[-1] = n; return p; }
    }
    size_t off = atomic_fetch_add(&used, total);
    if (off + total > REGION) { errno = ENOMEM; return NULL; }
    char *p = base + off;
    uintptr_t user = ((uintptr_t)p + HDR + align - 1) & ~(uintptr_t)(align - 1);
    size_t *h = (size_t *)(user - HDR);
    h[0] = (size_t)c;          /* class, or (size_t)-1 for big/aligned blocks (never reused) */
    h[1] = n;
    return (void *)user;
}

static inline __attribute__((always_inline)) void free_impl(void *p)
{
    if (!p) return;
    size_t *h = (size_t *)((char *)p - HDR);
    long c = (long)h[0];
    if (c <= 0 || c >= 64) return;
    take((int)c);
    *(void **)p = freelist[c];
    freelist[c] = p;
    give((int)c);
}

void *malloc(size_t n) { return alloc_impl(n, HDR); }
void free(void *p) { free_impl(p); }
void *calloc(size_t a, size_t b)
{
    size_t t;
    if (__builtin_mul_overflow(a, b, &t)) { errno = ENOMEM; return NULL; }
    void *p = alloc_impl(t, HDR);
    if (p) memset(p, 0, t);
    return p;
}
void *realloc(void *p, size_t n)
{
    if (!p) return alloc_impl(n, HDR);
    size_t old = ((size_t *)((char *)p - HDR))[1];
    void *q = alloc_impl(n, HDR);
    if (q) { memcpy(q, p, old < n ? old : n); free_impl(p); }
    return q;
}
int posix_memalign(void **out, size_t a, size_t n) { void *p = alloc_impl(n, a); if (!p) return ENOMEM; *out = p; return 0; }
void *aligned_alloc(size_t a, size_t n) { return alloc_impl(n, a); }
void *memalign(size_t a, size_t n) { return alloc_impl(n, a); }
void *valloc(size_t n) { return alloc_impl(n, 4096); }
void *pvalloc(size_t n) { return alloc_impl((n + 4095) & ~(size_t)4095, 4096); }
size_t malloc_usable_size(void *p) { return p ? ((size_t *)((char *)p - HDR))[1] : 0; }
