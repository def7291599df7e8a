/*
 * inline.h - inline hooks (x86_64): a 5-byte `jmp rel32` written over the
 * first whole instructions of a function, those instructions relocated into
 * a trampoline mapped within reach of the function.
 *
 * For allocators the GOT never sees: an allocator linked into the
 * executable, direct calls. Three steps, so that the bytes can also be
 * written by someone who has stopped every thread (an injector):
 *   mlz_inline_prepare  decode with capstone, refuse with a reason, build the
 *                       trampoline (call it for the original function) and
 *                       the relay to the hook; writes nothing in the function;
 *   mlz_inline_install  write the jump (the bytes must still be the ones
 *                       prepare read);
 *   mlz_inline_remove   put the original bytes back, only if they still hold
 *                       our jump.
 * Trampolines and relays are never unmapped: a thread may still be running
 * in one, and pointers to the trampoline may have been copied.
 *
 * Writing the jump in a live process (install/remove): the page is made
 * writable (keeping exec), the bytes are replaced with one atomic
 * compare-and-swap of the aligned 8- or 16-byte word holding them, so a
 * thread fetching the entry sees all old or all new bytes. That does not help
 * a thread whose PC is already past the entry inside the overwritten range:
 * callers install only while no other thread can be there (process start, or
 * every thread stopped and checked). Nothing here calls malloc.
 */
#ifndef MLZ_INLINE_H
#define MLZ_INLINE_H

#include <stddef.h>
#include <stdint.h>

#define MLZ_INLINE_MAX_PATCH 16   /* bytes overwritten at most (whole instructions) */
#define MLZ_INLINE_WHY 96

enum { MLZ_INLINE_PREPARED = 1, MLZ_INLINE_INSTALLED = 2 };

typedef struct mlz_inline {
    uintptr_t fn;                  /* the function */
    uintptr_t at;                  /* where the jump goes: fn, or fn + 4 after endbr64 */
    uint8_t len;                   /* bytes of whole instructions moved to the trampoline */
    uint8_t jmp_len;               /* bytes of the jump actually written (5) */
    uint8_t orig[MLZ_INLINE_MAX_PATCH];   /* the bytes at `at` before */
    uint8_t jmp[MLZ_INLINE_MAX_PATCH];    /* the jump */
    void *trampoline;              /* the original function, callable */
    uintptr_t relay;               /* near `jmp *hook` (the hook may be out of rel32 reach) */
    uint8_t rip_fixups;            /* relocated RIP-relative operands */
    uint8_t branch_fixups;         /* relocated relative branches */
    int state;                     /* 0, MLZ_INLINE_PREPARED or MLZ_INLINE_INSTALLED */
    char why[MLZ_INLINE_WHY];      /* why prepare/install/remove refused */
} mlz_inline;

/*
 * Prepare a hook of `fn` (code bytes readable for `fn_size`, the symbol's
 * size; 0 = unknown, then at most 64 bytes are examined and the branch-into-
 * range check covers only those). Refuses (returns < 0, reason in h->why):
 * a function too short for the jump, one that ends or loops (loop/jrcxz)
 * inside the range, an entry that is already a jump, a branch anywhere in
 * the function targeting inside the range, a RIP-relative operand or branch
 * target the trampoline cannot reach. Takes the gotpatch lock; loads
 * libcapstone with dlopen. Returns 0 or an MLZ_GOT_E* / -1 (refused).
 */
int mlz_inline_prepare(void *fn, size_t fn_size, void *hook, mlz_inline *h);

/* 0, or -1 with h->why (bytes changed since prepare, mprotect failed). */
int mlz_inline_install(mlz_inline *h);

/* 0 restored; 1 left alone (the bytes no longer hold our jump: someone else
 * patched over us; reason in h->why); -1 the page could not be written. */
int mlz_inline_remove(mlz_inline *h);

/* Relocation alone, for tests and for building a trampoline elsewhere:
 * decode the instructions at `code` (an image of the function at address
 * `fn`), write the trampoline for address `tramp` into out (cap bytes).
 * Fills h->at, len, orig, rip_fixups, branch_fixups. Returns the trampoline
 * length, or -1 with h->why. `cs` is an open capstone_dl handle with detail. */
struct mlz__cs;
int mlz__inline_relocate(struct mlz__cs *cs, const uint8_t *code, size_t code_size, uintptr_t fn,
                         uintptr_t tramp, uint8_t *out, size_t cap, mlz_inline *h);

#endif
