/*
 * unwind_fp.c - frame-pointer stack walking.
 *
 * With frame pointers every frame starts with the record {saved rbp, return
 * address} at rbp, so a walk is two loads per frame. Code built without them
 * (glibc, most distro libraries) leaves rbp holding either an older frame's
 * record (we silently skip frames) or arbitrary data (we must stop). Each
 * record is therefore validated before it is read, in the spirit of
 * gperftools' generic fp walker and jemalloc's stack-range check:
 *
 *   - inside [lo, hi - 16): lo is our own frame, hi the top of the thread's
 *     stack mapping, so a read can never touch an unmapped page;
 *   - 8-byte aligned (the ABI gives 16 after `push %rbp`, but hand-written
 *     code and some compilers only keep 8; both are safe to read);
 *   - strictly above the previous record and at most MLZ_UNWIND_FP_MAX_GAP
 *     above it, so the walk terminates and a stale rbp is caught early;
 *   - a return address that could be user code: above the first page and
 *     below the top of the canonical user half.
 */
#include "unwind.h"

#define USER_VA_END (1ull << 47)    /* 4-level paging; 5-level kernels map users above only on request */
#define MIN_PC 4096

/* Stack reads are validated against the thread's own bounds, but under ASan
 * they may land in another frame's redzone: not a bug here. */
__attribute__((no_sanitize_address)) static uint64_t peek(uint64_t addr)
{
    return *(const uint64_t *)(uintptr_t)addr;
}

static unsigned fp_walk(uint64_t *pcs, unsigned max, unsigned skip, uint64_t fp,
                        uint64_t lo, uint64_t hi)
{
    unsigned n = 0;

    if (hi < lo + 16)
        return 0;
    while (n < max) {
        if (fp < lo || fp > hi - 16 || (fp & 7))
            break;
        uint64_t ra = peek(fp + 8), next = peek(fp);
        if (ra < MIN_PC || ra >= USER_VA_END)
            break;
        if (skip)
            skip--;
        else
            pcs[n++] = ra;
        if (next <= fp || next - fp > MLZ_UNWIND_FP_MAX_GAP)
            break;
        fp = next;
    }
    return n;
}

unsigned mlz_unwind_fp_from(uint64_t *pcs, unsigned max, uint64_t fp,
                            uint64_t stack_lo, uint64_t stack_hi)
{
    return fp_walk(pcs, max, 0, fp, stack_lo, stack_hi);
}

/* __builtin_frame_address(0) makes GCC give this function a frame record
 * even under -fomit-frame-pointer. The asm after the call keeps it from
 * becoming a tail call, which would pop the record we are about to read. */
__attribute__((noinline)) unsigned mlz_unwind_fp_bounded(uint64_t *pcs, unsigned max,
                                                         unsigned skip, uint64_t stack_hi)
{
    uint64_t fp = (uint64_t)(uintptr_t)__builtin_frame_address(0);
    unsigned n = fp_walk(pcs, max, skip, fp, fp, stack_hi);
    __asm__ volatile("" : "+r"(n) : : "memory");
    return n;
}

__attribute__((noinline)) unsigned mlz_unwind_fp(uint64_t *pcs, unsigned max, unsigned skip)
{
    uint64_t fp = (uint64_t)(uintptr_t)__builtin_frame_address(0), lo, hi;
    if (mlz_stack_bounds(&lo, &hi) < 0)
        return 0;
    unsigned n = fp_walk(pcs, max, skip, fp, fp, hi);
    __asm__ volatile("" : "+r"(n) : : "memory");
    return n;
}
