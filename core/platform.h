/*
 * platform.h - the few compiler and OS helpers every core/ file shares.
 *
 * Everything in core/ runs inside malloc/free hooks of a foreign process, so
 * the only memory source is a raw anonymous mmap: it never re-enters the
 * allocator we are hooking and works before, during and after libc's own
 * malloc initialisation.
 */
#ifndef MLZ_PLATFORM_H
#define MLZ_PLATFORM_H

#include <stdint.h>

#include <stddef.h>
#include <sys/mman.h>

/* Branch hints: comments for humans; keep them only where bench/ shows a win. */
#define mlz_likely(x)   __builtin_expect(!!(x), 1)
#define mlz_unlikely(x) __builtin_expect(!!(x), 0)

/* The calling thread's thread pointer (x86_64: the fs base), from which
 * initial-exec TLS lies at the same offset in every thread. */
static inline uintptr_t mlz_thread_pointer(void) { return (uintptr_t)__builtin_thread_pointer(); }

/* Objects are built with -fvisibility=hidden; only hooks and control entry
 * points of libmemlyze.so are marked with this. */
#define MLZ_EXPORT   __attribute__((visibility("default")))
#define MLZ_COLD     __attribute__((cold))
/* The malloc and free hooks start a 64-byte line each: their fast paths
 * then sit in as few lines as they can, whatever code comes before them
 * (a 32-byte shift of unchanged hooks measured 2% slower). */
#define MLZ_HOT_ALIGN __attribute__((aligned(64)))
#define MLZ_NOINLINE __attribute__((noinline))
#define MLZ_UNUSED   __attribute__((unused))

#define MLZ_CACHELINE 64

/* The MurmurHash3 64-bit finalizer: a strong, cheap mix for hash tables. */
static inline uint64_t mlz_fmix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 33;
    return h;
}

/* Anonymous private mapping of `bytes`, zero-filled; NULL on failure. */
static inline void *mlz_map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* A large virtual reservation that costs RSS only for the pages touched:
 * tables that grow in place (stack records, frame arena) use it so their
 * addresses never move and an outside reader can follow them. */
static inline void *mlz_map_noreserve(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static inline void mlz_unmap(void *p, size_t bytes)
{
    if (p) munmap(p, bytes);
}

#endif
