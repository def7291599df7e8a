/*
 * unwind.h - call-stack capture for the sampling path (x86_64 Linux/glibc).
 *
 * Two unwinders run inside malloc hooks of a foreign process, so everything
 * here is async-signal-safe: no malloc, no locks (not even the loader lock
 * that dl_iterate_phdr takes), no stdio, no TLS, errno untouched. The caller
 * owns all state: it keeps a mlz_stack_cache per thread (in its own TLS) and
 * refreshes the module table (modtab.h) from a background thread.
 *
 * Frame-pointer walking costs a few nanoseconds per frame but loses frames in
 * code built with -fomit-frame-pointer (glibc, most distro libraries). The
 * DWARF unwinder reads .eh_frame through .eh_frame_hdr of modules found in
 * the module table, so it recovers every frame that has CFI, at a higher
 * per-frame cost (bench/bench_unwind measures both).
 *
 * The safety guarantee shared by both: stack memory is read only inside
 * [stack_lo, stack_hi) of the thread's current stack, where stack_lo is the
 * unwinder's own stack pointer, so a garbage frame pointer or a corrupted
 * saved register can end a walk early but never fault. Frames must move
 * strictly up the stack, so every walk terminates. CFI is read only from the
 * readable segment of a module that holds its .eh_frame_hdr.
 *
 * Output: pcs[i] are raw addresses, leaf first. With skip 0, pcs[0] is the
 * return address into the function that called mlz_unwind_*(); each further
 * entry is a return address, except the entry right after a signal frame,
 * which is the exact interrupted instruction. Symbolizers should look up
 * pc-1 for return addresses.
 */
#ifndef MLZ_UNWIND_H
#define MLZ_UNWIND_H

#include <stdint.h>

/* ---- thread stack bounds (core/stackbounds.c) ---- */

/* Bounds of the mapping holding the calling thread's stack pointer, found by
 * reading /proc/self/maps with raw syscalls into an on-stack buffer (so it
 * works before, during and after malloc; pthread_getattr_np would allocate).
 * Costs one open+read of the maps file: cache the result. For the main
 * thread [stack] grows down; only *hi is stable. On an alternate signal
 * stack this returns that stack's mapping. Returns 0, or -errno (-ENOENT if
 * no mapping holds sp). */
int mlz_stack_bounds(uint64_t *lo, uint64_t *hi);

/* Per-thread cache of mlz_stack_bounds(); zero-initialise, keep in TLS. */
typedef struct mlz_stack_cache {
    uint64_t lo, hi;
} mlz_stack_cache;

/* Upper stack bound for the current stack pointer: returns c->hi if sp is in
 * [c->lo, c->hi), otherwise recomputes (growth of the main stack, first use
 * in a thread, switch to or from a sigaltstack) and updates *c. Returns 0 if
 * the bounds cannot be found; pass that on and the unwinders return 0. */
uint64_t mlz_stack_cache_hi(mlz_stack_cache *c);

/* ---- frame-pointer walking (core/unwind_fp.c) ---- */

/* Largest distance between two consecutive frame pointers. Safety comes from
 * the stack bounds; this only rejects a stale rbp that still points into the
 * stack. 1 MiB lets frames with large local buffers through (glibc's own
 * functions use up to tens of KiB) while a thread stack is 8 MiB by default. */
#define MLZ_UNWIND_FP_MAX_GAP (1u << 20)

/* Walk the rbp chain from the caller of this function, dropping the first
 * skip addresses, storing at most max into pcs. Computes the stack bounds
 * itself (one read of /proc/self/maps): use the _bounded form on hot paths.
 * Returns the number of addresses stored. */
unsigned mlz_unwind_fp(uint64_t *pcs, unsigned max, unsigned skip);

/* As mlz_unwind_fp, with stack_hi from a mlz_stack_cache (0 -> returns 0).
 * Stops at rbp 0, at a frame pointer outside [own frame, stack_hi - 16),
 * misaligned (8), not strictly above the previous one or more than
 * MLZ_UNWIND_FP_MAX_GAP above it, or at an implausible return address. */
unsigned mlz_unwind_fp_bounded(uint64_t *pcs, unsigned max, unsigned skip,
                               uint64_t stack_hi);

/* Walk a frame chain starting at frame pointer fp ([fp] = next frame pointer,
 * [fp+8] = return address), reading only inside [stack_lo, stack_hi). For
 * unwinding a captured context and for tests with fake stacks. */
unsigned mlz_unwind_fp_from(uint64_t *pcs, unsigned max, uint64_t fp,
                            uint64_t stack_lo, uint64_t stack_hi);

/* ---- DWARF CFI unwinding (core/unwind_dwarf.c) ---- */

/* DWARF register numbers for x86_64 (System V psABI, figure 3.36). */
enum {
    MLZ_REG_RAX = 0, MLZ_REG_RDX, MLZ_REG_RCX, MLZ_REG_RBX, MLZ_REG_RSI,
    MLZ_REG_RDI, MLZ_REG_RBP, MLZ_REG_RSP, MLZ_REG_R8, MLZ_REG_R9,
    MLZ_REG_R10, MLZ_REG_R11, MLZ_REG_R12, MLZ_REG_R13, MLZ_REG_R14,
    MLZ_REG_R15, MLZ_REG_RIP, MLZ_UNWIND_NREGS
};

/* A register state to start from; bit n of valid says reg[n] is known. */
typedef struct mlz_unwind_regs {
    uint64_t reg[MLZ_UNWIND_NREGS];
    uint32_t valid;
} mlz_unwind_regs;

/* Unwind the caller's stack with .eh_frame CFI, dropping the first skip
 * addresses, storing at most max. Computes the stack bounds itself (one read
 * of /proc/self/maps): use the _bounded form on hot paths. Needs a module
 * table (mlz_modtab_refresh() once before); never calls dl_iterate_phdr.
 * Returns the number of addresses stored. */
unsigned mlz_unwind_dwarf(uint64_t *pcs, unsigned max, unsigned skip);

/* As mlz_unwind_dwarf, with stack_hi from a mlz_stack_cache (0 -> returns 0).
 * Per frame: find the module (stop, counted, if none), look up the FDE in
 * .eh_frame_hdr (if none: the sigreturn trampoline by its code bytes, else
 * the frame pointer if rbp is plausible), run the CFA program, restore
 * registers from [stack lo, stack_hi). Stops at an undefined return address
 * (the outermost frame), at max, or on any validation failure. */
unsigned mlz_unwind_dwarf_bounded(uint64_t *pcs, unsigned max, unsigned skip,
                                  uint64_t stack_hi);

/* Per-thread cache of unwind rules, keyed by pc, for frames whose rule is
 * "CFA = rsp or rbp + offset; return address and callee-saved registers
 * saved at CFA + offset" (almost all compiled code), and for the outermost
 * frame (undefined return address: the walk ends there). A hit skips the module
 * lookup, the FDE search and the CFA program. Zero-initialise it; it empties
 * itself when the module table's generation changes (if anything was written
 * since it was last emptied: a fresh cache's pages stay untouched). Not
 * re-entrant: one cache per thread, never used from a signal handler that
 * may interrupt an unwind using the same cache (a torn entry gives a wrong
 * stack, never a fault). 512 entries, 16 KiB, and the last walk's frames,
 * 6.4 KiB. */
#define MLZ_UNWIND_CACHE_ENTRIES 512

typedef struct mlz_unwind_cache_entry {
    uint64_t pc;            /* lookup pc; 0: empty */
    int32_t cfa_off;
    uint8_t cfa_reg;        /* MLZ_REG_RSP or MLZ_REG_RBP; 0xff: outermost frame */
    uint8_t saved_mask;     /* bit i: saved[i] is set */
    int16_t ra_off;         /* return address at CFA + ra_off */
    int16_t saved[6];       /* rbx, rbp, r12-r15 at CFA + saved[i]; 0: unchanged */
    int16_t span_lo, span_hi; /* every read is inside [CFA + span_lo, CFA + span_hi) */
} mlz_unwind_cache_entry;

/* The cache also keeps the frames of the thread's last complete walk (the
 * stack's shadow): pc, the sp of the frame (its return address was read at
 * sp - 8) and rbp. A later walk that comes to a frame with the same pc and
 * sp (and rbp, unless the frame's CFA rule is sp + offset: then sp decides
 * where its caller's frame is) takes the frames beyond it from there, once
 * it found each one's return address still in place at its sp - 8: one
 * load per frame instead of a step. A frame whose CFA hangs on rbp (a
 * frame pointer, a VLA or alloca) needs its rbp proved too: read again
 * from where the walk read it, or kept from a frame whose rbp was proved
 * (a function with a VLA, entered at another depth, can call at the same
 * sp, above the old frames' return addresses still in its unused space).
 * Only memory is trusted, so a longjmp, an exception, a signal
 * handler or a new thread on a reused stack cost a miss, never a wrong
 * frame. Two buffers: the walk writes one while it compares with the other. */
#define MLZ_UNWIND_TAIL 136
#define MLZ_UNWIND_TAIL_IN_PLACE 1u   /* in sp's low bits: [sp - 8] held pc */
#define MLZ_UNWIND_TAIL_SP_RULE  2u   /* and the frame's CFA is sp + offset */

typedef struct mlz_unwind_frame {
    uint64_t pc, sp, bp;    /* bp: rbp, or 1 (never a frame pointer) when unknown */
    uint64_t bp_at;         /* where the step into this frame read bp: its address,
                             * MLZ_UNWIND_BP_KEPT (the frame before's, unchanged) or
                             * MLZ_UNWIND_BP_ELSEWHERE (not from memory) */
} mlz_unwind_frame;
#define MLZ_UNWIND_BP_KEPT      0u
#define MLZ_UNWIND_BP_ELSEWHERE 1u

/* Modules built with frame pointers (modtab.h: frame_pointers) that the
 * thread's walks met: their frames are stepped by rbp, before any rule is
 * looked up, except in the module's spans left to the CFI (the PLT,
 * _start). m points into the module table's snapshot of `generation`. */
#define MLZ_UNWIND_FP_MODULES 2

struct mlz_module;
typedef struct mlz_unwind_fp_module {
    uint64_t lo, hi;                /* its executable segment */
    const struct mlz_module *m;
} mlz_unwind_fp_module;

typedef struct mlz_unwind_cache {
    uint64_t generation;    /* mlz_modtab generation the entries belong to */
    uint64_t hits, misses;
    uint64_t fp_steps;      /* frames stepped by rbp in frame-pointer modules */
    mlz_unwind_fp_module fp[MLZ_UNWIND_FP_MODULES];
    uint32_t fp_next;       /* modules met so far (0: none, nothing to check) */
    uint8_t filled;         /* an entry or a module was written since the last clear */
    mlz_unwind_cache_entry e[MLZ_UNWIND_CACHE_ENTRIES];
    uint64_t tail_hits;     /* walks finished from the last walk's frames */
    uint32_t tail_n;        /* frames in tail[tail_cur]; 0: none */
    uint32_t tail_cur;
    /* Changes whenever the saved frames do. A walk that met the saved walk
     * at its first frame (same_as_saved) gave exactly the saved frames: a
     * caller that noted what it made of them at this version (the stack's
     * id, in saved_id/saved_tag) can use that again. */
    uint64_t tail_version;
    uint8_t  same_as_saved;
    uint32_t saved_id;
    uint64_t saved_version, saved_tag;
    mlz_unwind_frame tail[2][MLZ_UNWIND_TAIL];
} mlz_unwind_cache;

/* As mlz_unwind_dwarf_bounded, consulting and filling *cache (see above).
 * Same results as the uncached walk, except that a frame stepped by rbp in
 * a frame-pointer module leaves rbx and r12-r15 unknown: a later frame
 * whose CFA needs one of them (none in compiled code) ends the walk. */
unsigned mlz_unwind_dwarf_cached(uint64_t *pcs, unsigned max, unsigned skip,
                                 uint64_t stack_hi, mlz_unwind_cache *cache);

/* Unwind from a given register state (needs rip and rsp; rip is taken as an
 * exact instruction address, as in a signal context), reading the stack only
 * inside [stack_lo, stack_hi). pcs[0] is regs->reg[MLZ_REG_RIP]. */
unsigned mlz_unwind_dwarf_from(uint64_t *pcs, unsigned max,
                               const mlz_unwind_regs *regs,
                               uint64_t stack_lo, uint64_t stack_hi);

/* As mlz_unwind_dwarf_from, consulting and filling *cache, for a state at a
 * return address (looked up at rip - 1, as a caller's frame is): the
 * hooks' walk resumes at their caller's frame, found by frame pointers
 * through our own frames (payload/hooks.c), with rip, rsp and rbp known. */
unsigned mlz_unwind_dwarf_resume(uint64_t *pcs, unsigned max, const mlz_unwind_regs *regs,
                                 uint64_t stack_lo, uint64_t stack_hi, mlz_unwind_cache *cache);

/* Fill *r from a ucontext_t (the third argument of an SA_SIGINFO handler):
 * all 16 general registers and rip. */
void mlz_unwind_regs_from_ucontext(mlz_unwind_regs *r, const void *uc);

/* Why DWARF walks ended, and how often the fallbacks ran; process-wide
 * relaxed counters (one increment per walk, plus one per fallback frame).
 * Cached walks (mlz_unwind_dwarf_cached) count only failures and fallbacks:
 * their cache counts hits and misses. */
typedef struct mlz_unwind_stats {
    uint64_t walks;        /* DWARF walks started */
    uint64_t outermost;    /* reached an undefined return address (complete) */
    uint64_t full;         /* stopped at max */
    uint64_t no_module;    /* pc in no module: the module table needs a refresh */
    uint64_t no_fde;       /* no FDE and no usable frame pointer */
    uint64_t bad_frame;    /* CFA, saved register or next pc failed validation */
    uint64_t stack_switch; /* next sp left [lo, hi): sigaltstack or foreign stack */
    uint64_t unsupported;  /* CFA op, pointer encoding or expression not handled */
    uint64_t fp_fallback;  /* frames recovered through rbp for lack of an FDE */
    uint64_t signal_frames;/* signal frames crossed */
} mlz_unwind_stats;

/* Copy the counters (each read atomically, not as a consistent set). */
void mlz_unwind_get_stats(mlz_unwind_stats *out);

#endif
