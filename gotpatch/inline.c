/*
 * inline.c - trampoline memory near a function, and writing the jump.
 *
 * Trampolines and relays live in 64 KiB slabs mapped in a free gap of the
 * address space within ~1 GiB of the function, so the jump from the entry
 * (rel32) and the relocated RIP-relative operands reach. A slab is R-X; a
 * new trampoline is written with the page briefly R-W-X (threads running
 * other trampolines of the slab keep executing). Slabs are never unmapped.
 *
 * Each slab chunk: [relay: jmp *0(%rip); .quad hook][pad][trampoline].
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "capstone_dl.h"
#include "got_internal.h"
#include "inline.h"

#define SLAB_SIZE ((size_t)64 << 10)
#define CHUNK 128                       /* relay (16) + trampoline (<= 112) */
#define REACH ((uintptr_t)1 << 30)      /* slab within 1 GiB of the function */
#define MAX_SLABS 32

static struct slab { uintptr_t lo; size_t used; } slabs[MAX_SLABS];
static size_t nslabs;
static mlz__maps maps;

static uintptr_t dist(uintptr_t a, uintptr_t b) { return a > b ? a - b : b - a; }

/* A free gap of SLAB_SIZE near `near` (from /proc/self/maps), mapped with
 * MAP_FIXED_NOREPLACE so a racing mmap cannot be overwritten. */
static uintptr_t map_slab_near(uintptr_t near)
{
    if (mlz__maps_load(&maps)) return 0;
    uintptr_t best = 0;
    uintptr_t prev_hi = 0x10000;   /* stay off the lowest pages */
    for (size_t i = 0; i <= maps.n; i++) {
        uintptr_t lo = prev_hi, hi = i < maps.n ? maps.r[i].lo : (uintptr_t)0x7ffffffff000;
        if (i < maps.n) prev_hi = maps.r[i].hi;
        if (hi <= lo || hi - lo < SLAB_SIZE) continue;
        /* the candidate closest to `near` inside [lo, hi - SLAB_SIZE] */
        uintptr_t c = near < lo ? lo : near > hi - SLAB_SIZE ? hi - SLAB_SIZE : near;
        c &= ~(uintptr_t)(SLAB_SIZE - 1);
        if (c < lo) c += SLAB_SIZE;
        if (c + SLAB_SIZE > hi) continue;
        if (!best || dist(c, near) < dist(best, near)) best = c;
    }
    if (!best || dist(best, near) > REACH) return 0;
    void *p = mmap((void *)best, SLAB_SIZE, PROT_READ | PROT_EXEC,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED) return 0;
    if ((uintptr_t)p != best) { munmap(p, SLAB_SIZE); return 0; }   /* kernels before 4.17 */
    return best;
}

static uintptr_t chunk_near(uintptr_t fn)
{
    for (size_t i = 0; i < nslabs; i++)
        if (slabs[i].used + CHUNK <= SLAB_SIZE && dist(slabs[i].lo, fn) < REACH) {
            uintptr_t c = slabs[i].lo + slabs[i].used;
            slabs[i].used += CHUNK;
            return c;
        }
    if (nslabs == MAX_SLABS) return 0;
    uintptr_t lo = map_slab_near(fn);
    if (!lo) return 0;
    slabs[nslabs] = (struct slab){ lo, CHUNK };
    nslabs++;
    return lo;
}

static int page_prot(uintptr_t a)
{
    if (!maps.loaded || mlz__maps_prot(&maps, a) < 0) mlz__maps_load(&maps);
    return mlz__maps_prot(&maps, a);
}

/* Write n bytes at dst in code pages: the page(s) made writable (exec kept),
 * one atomic compare-and-swap from `expect` to `want` of the aligned 8- or
 * 16-byte word around them (so a thread fetching them sees old or new),
 * protections put back. Returns 0, 1 if the bytes were not `expect`, -1 if
 * mprotect failed. */
static int swap_code(uintptr_t dst, const uint8_t *expect, const uint8_t *want, size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t p0 = dst & ~(uintptr_t)(pg - 1), p1 = (dst + n - 1) & ~(uintptr_t)(pg - 1);
    int prot0 = page_prot(p0), prot1 = page_prot(p1);
    if (prot0 < 0 || prot1 < 0) return -1;
    if (mprotect((void *)p0, p1 + pg - p0, PROT_READ | PROT_WRITE | PROT_EXEC)) return -1;
    int rc = 1;
    uintptr_t w8 = dst & ~(uintptr_t)7, w16 = dst & ~(uintptr_t)15;
    if (dst + n <= w8 + 8) {
        uint64_t old, neu;
        memcpy(&old, (void *)w8, 8);
        memcpy((uint8_t *)&old + (dst - w8), expect, n);
        neu = old;
        memcpy((uint8_t *)&neu + (dst - w8), want, n);
        if (__atomic_compare_exchange_n((uint64_t *)w8, &old, neu, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) rc = 0;
    } else if (dst + n <= w16 + 16) {
        uint64_t old[2], neu[2];
        memcpy(old, (void *)w16, 16);
        memcpy((uint8_t *)old + (dst - w16), expect, n);
        memcpy(neu, old, 16);
        memcpy((uint8_t *)neu + (dst - w16), want, n);
        uint8_t ok;
        __asm__ volatile("lock cmpxchg16b %1; sete %0"
                         : "=q"(ok), "+m"(*(volatile uint64_t(*)[2])w16), "+a"(old[0]), "+d"(old[1])
                         : "b"(neu[0]), "c"(neu[1])
                         : "memory", "cc");
        if (ok) rc = 0;
    } else if (memcmp((void *)dst, expect, n) == 0) {
        /* not inside one 16-byte word: plain copy (callers guarantee no
         * other thread runs here) */
        memcpy((void *)dst, want, n);
        rc = 0;
    }
    __builtin___clear_cache((char *)dst, (char *)dst + n);
    if (mprotect((void *)p0, pg, prot0) || (p1 != p0 && mprotect((void *)p1, pg, prot1))) {
        /* the bytes are right, only the protection stays wider */
    }
    return rc;
}

/* Bytes at fn that are safe to read: up to the end of its mapping. */
static size_t readable_from(uintptr_t fn, size_t want)
{
    mlz__maps_load(&maps);
    for (size_t i = 0; i < maps.n; i++) {
        if (fn < maps.r[i].lo || fn >= maps.r[i].hi) continue;
        if (!(maps.r[i].prot & PROT_EXEC) || !(maps.r[i].prot & PROT_READ)) return 0;
        uintptr_t end = maps.r[i].hi;
        /* the next mapping may continue it (same file, adjacent) */
        if (i + 1 < maps.n && maps.r[i + 1].lo == end && (maps.r[i + 1].prot & PROT_READ)) end = maps.r[i + 1].hi;
        return end - fn < want ? end - fn : want;
    }
    return 0;
}

int mlz_inline_prepare(void *fnp, size_t fn_size, void *hook, mlz_inline *h)
{
    uintptr_t fn = (uintptr_t)fnp;
    memset(h, 0, sizeof *h);
    if (!fn || !hook) return MLZ_GOT_EINVAL;
    mlz__cs cs;
    int rc = mlz__cs_load(&cs);
    if (rc) {
        mlz__cs_unload(&cs);
        snprintf(h->why, sizeof h->why, "libcapstone not found");
        return rc;
    }
    rc = mlz__lock();
    if (rc) { mlz__cs_unload(&cs); return rc; }
    size_t size = readable_from(fn, fn_size ? fn_size : 64);
    uintptr_t chunk = 0;
    if (!size) {
        snprintf(h->why, sizeof h->why, "not in executable memory");
        rc = -1;
    } else if (!(chunk = chunk_near(fn))) {
        snprintf(h->why, sizeof h->why, "no free address space within 1 GiB for the trampoline");
        rc = MLZ_GOT_ENOMEM;
    } else if ((rc = mlz__cs_begin(&cs, 1)) == 0) {
        uint8_t tr[CHUNK - 16];
        int n = mlz__inline_relocate(&cs, (const uint8_t *)fn, fn_size ? size : 0, fn, chunk + 16,
                                     tr, sizeof tr, h);
        if (n < 0) {
            rc = -1;   /* the chunk stays unused: slabs are not reclaimed */
        } else {
            uint8_t relay[16] = { 0xff, 0x25, 0, 0, 0, 0 };
            memcpy(relay + 6, &hook, 8);
            relay[14] = relay[15] = 0xcc;
            size_t pg = (size_t)sysconf(_SC_PAGESIZE);
            uintptr_t page = chunk & ~(uintptr_t)(pg - 1);
            if (mprotect((void *)page, pg, PROT_READ | PROT_WRITE | PROT_EXEC) == 0) {
                memcpy((void *)chunk, relay, 16);
                memcpy((void *)(chunk + 16), tr, (size_t)n);
                mprotect((void *)page, pg, PROT_READ | PROT_EXEC);
                __builtin___clear_cache((char *)chunk, (char *)chunk + CHUNK);
                h->relay = chunk;
                h->trampoline = (void *)(chunk + 16);
                int32_t d = (int32_t)((intptr_t)h->relay - (intptr_t)(h->at + 5));
                h->jmp[0] = 0xe9;
                memcpy(h->jmp + 1, &d, 4);
                h->jmp_len = 5;
                h->state = MLZ_INLINE_PREPARED;
                rc = 0;
            } else {
                snprintf(h->why, sizeof h->why, "mprotect of the trampoline failed (errno %d)", errno);
                rc = MLZ_GOT_EPROT;
            }
        }
    }
    mlz__cs_end(&cs);
    mlz__unlock();
    mlz__cs_unload(&cs);
    return rc;
}

int mlz_inline_install(mlz_inline *h)
{
    if (h->state != MLZ_INLINE_PREPARED) return -1;
    int rc = swap_code(h->at, h->orig, h->jmp, h->jmp_len);
    if (rc == 0) { h->state = MLZ_INLINE_INSTALLED; return 0; }
    snprintf(h->why, sizeof h->why, rc > 0 ? "the entry bytes changed since they were read" : "mprotect of the code failed");
    return -1;
}

int mlz_inline_remove(mlz_inline *h)
{
    if (h->state != MLZ_INLINE_INSTALLED) return 1;
    int rc = swap_code(h->at, h->jmp, h->orig, h->jmp_len);
    if (rc == 0) { h->state = MLZ_INLINE_PREPARED; return 0; }
    if (rc > 0) {
        snprintf(h->why, sizeof h->why, "the entry no longer holds our jump: left as found");
        h->state = MLZ_INLINE_PREPARED;
        return 1;
    }
    snprintf(h->why, sizeof h->why, "mprotect of the code failed");
    return -1;
}
