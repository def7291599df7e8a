/*
 * hooks.c - the allocation hooks. The hot path is the first few lines of
 * each hook: a thread-local countdown decrement and a branch for
 * allocations, a Bloom-filter test for frees. Everything else is in the
 * noinline sample paths below them. They are not marked cold: exact mode
 * runs them at every call, and GCC compiles cold functions for size,
 * without inlining what they call (44 more instructions per malloc+free;
 * the hot halves' branches say `unlikely` themselves).
 *
 * Ordering rules the drain thread relies on (events.c): an ALLOC record is
 * pushed before its heap-map entry is published, with a timestamp taken
 * before the slot is reserved; a FREE record's timestamp is taken after
 * the entry was removed. So a FREE always carries a later time than the
 * ALLOC it ends.
 *
 * The recursion guard (mlz__tls.s.in_hook) is set on every sample path:
 * if anything we call allocates, that allocation passes straight through.
 */
#include "payload.h"
#include "info.h"
#include "modtab.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

__thread mlz_tls mlz__tls __attribute__((tls_model("initial-exec")));

/* No process check on these paths (a getpid per event cost a third of
 * exact mode). A fork child runs the atfork handler (control.c) before it
 * can allocate; a vfork child borrows the memory and the TLS of a parent
 * thread that stays suspended until the child execs or exits, so what it
 * does to our structures is what that thread would do: its allocations are
 * real blocks in the parent's heap, and the rings, map and filter stay
 * consistent. Only a wait for the drain thread checks the process (a
 * child of _Fork/clone has no drain thread): events.c. */

/* A sample path is entered by announcing it (in_flight, the thread's own
 * counter: events.c) BEFORE looking at the flags; detach clears the flags,
 * then waits until every thread's in_flight is zero (mlz__quiescent). With
 * both sides sequentially consistent, either the hook sees the flag off, or
 * detach sees the hook in flight: detach never frees memory a hook is
 * still using. Returns the counter to leave() with, or NULL. */
static _Atomic uint64_t *enter(_Atomic int *flag, mlz_ring *ring)
{
    _Atomic uint64_t *f = mlz__in_flight_slot(ring);
    atomic_fetch_add(f, 1);
    if (atomic_load(flag)) return f;
    atomic_fetch_sub(f, 1);
    return NULL;
}

/* A ring's counter has one writer, its thread, so a store ends the path:
 * a locked subtract waited for the path's stores to the ring, whose lines
 * the drain thread on the other CPU had been reading (exact mode, 1 thread
 * on 2 CPUs: 8% of the time, 15 paired runs). Threads without a ring share
 * the global counter, which needs the subtract. release: detach, seeing 0,
 * sees the path's accesses done. */
static void leave(_Atomic uint64_t *f)
{
    if (mlz_unlikely(f == &mlz__g.c.in_flight)) {
        atomic_fetch_sub_explicit(f, 1, memory_order_release);
        return;
    }
    atomic_store_explicit(f, atomic_load_explicit(f, memory_order_relaxed) - 1, memory_order_release);
}

/* Pushes the FREEs a signal handler stashed in the thread's ring
 * (interrupted_free) that no record of the path took along, as a sample
 * path (a handler arriving meanwhile stashes too). 0 if detached. */
static MLZ_NOINLINE int flush_stash(mlz_tls *t)
{
    t->s.in_hook = MLZ_HOOK_SAMPLING;
    _Atomic uint64_t *f = enter(&mlz__g.active_free, t->ring);
    if (!f) {
        t->s.in_hook = MLZ_HOOK_OUT;
        return 0;
    }
    mlz__stash_flush(t->ring);
    leave(f);
    return 1;
}

/* The end of a stretch in our code (in_hook set). The stash is looked at
 * after the flag is down: a handler that comes later records its own. */
static inline void leave_hook(mlz_tls *t)
{
    do __atomic_store_n(&t->s.in_hook, MLZ_HOOK_OUT, __ATOMIC_RELEASE);
    while (mlz_unlikely(t->ring && mlz__stash_pending(t->ring)) && flush_stash(t));
}

static MLZ_COLD MLZ_NOINLINE void thread_init(mlz_tls *t)
{
    static _Atomic uint64_t ordinal;
    t->s.rate_shift = (uint32_t)atomic_load_explicit(&mlz__g.c.rate_shift, memory_order_relaxed);
    t->tid = (int32_t)syscall(SYS_gettid);
    uint64_t seed;
    if (mlz__g.seed)   /* reproducible: the n-th thread to sample gets the n-th stream */
        seed = mlz_sampler_seed_for_thread(mlz__g.seed, atomic_fetch_add(&ordinal, 1), 0, 0);
    else
        seed = mlz_sampler_seed_for_thread(mlz_sampler_global_entropy(), (uint64_t)mlz__g.pid,
                                           (uint64_t)t->tid, mlz__now_ns());
    mlz_sampler_thread_init(&t->s, mlz__g.rate << t->s.rate_shift, seed);
}

/* The program's frame that called the hook, found by following frame
 * pointers through ours: every function of the payload keeps them
 * (-fno-omit-frame-pointer), so the first return address outside our code
 * is the hook's, with the caller's sp just above it and its rbp saved
 * below. The DWARF walk starts there instead of stepping through our three
 * or four frames, half of exact mode's walk. rbx and r12-r15 stay unknown:
 * CFA rules of compiled code use sp or rbp (a rule needing another register
 * ends the walk). 0 when in doubt (a frame outside the stack, a chain that
 * does not rise): the caller then walks the whole way. */
static int program_frame(uint64_t hi, mlz_unwind_regs *r)
{
    uint64_t fp = (uint64_t)(uintptr_t)__builtin_frame_address(0), lo = fp;
    for (int i = 0; i < 8; i++) {
        if (fp < lo || hi < 16 || fp > hi - 16 || (fp & 7)) return 0;
        uint64_t next = ((const uint64_t *)(uintptr_t)fp)[0], ra = ((const uint64_t *)(uintptr_t)fp)[1];
        if (ra < mlz__g.self_lo || ra >= mlz__g.self_hi) {
            r->reg[MLZ_REG_RIP] = ra;
            r->reg[MLZ_REG_RSP] = fp + 16;
            r->reg[MLZ_REG_RBP] = next;
            r->valid = 1u << MLZ_REG_RIP | 1u << MLZ_REG_RSP | 1u << MLZ_REG_RBP;
            return 1;
        }
        if (next <= fp) return 0;
        fp = next;
    }
    return 0;
}

#define CAPTURE_MAX (MLZ_MAX_FRAMES + 8)   /* room for our own frames */

/* Walks the caller's stack into raw[CAPTURE_MAX], our own frames
 * included. cache: the thread's DWARF rule cache, or NULL. Returns the
 * number of frames. */
static unsigned walk_stack(mlz_tls *t, mlz_unwind_cache *cache, uint64_t *raw)
{
    uint64_t hi = mlz_stack_cache_hi(&t->stack);
    mlz_unwind_regs r;
    if (mlz__g.unwinder == MLZ_UNWIND_FP)
        return mlz_unwind_fp_bounded(raw, CAPTURE_MAX, 0, hi);
    if (cache && program_frame(hi, &r))
        return mlz_unwind_dwarf_resume(raw, CAPTURE_MAX, &r,
                                       (uint64_t)(uintptr_t)__builtin_frame_address(0), hi, cache);
    if (cache)
        return mlz_unwind_dwarf_cached(raw, CAPTURE_MAX, 0, hi, cache);
    return mlz_unwind_dwarf_bounded(raw, CAPTURE_MAX, 0, hi);
}

/* The program's frames of a walk of n frames: *pcs is set to the first
 * that is not ours (no copy). Returns how many there are. */
static unsigned program_frames(const uint64_t *raw, unsigned n, const uint64_t **pcs)
{
    unsigned i = 0;
    /* A walk that ran off the end can finish on a stale value below every
     * module (0x186a0 was seen): not a frame. Addresses above the lowest
     * module stay, even in no module: JIT code, or a library loaded since
     * the module table was last refreshed (finalize still resolves it). */
    unsigned nmods;
    uint64_t gen;
    const mlz_module *mods = mlz_modtab_modules(&nmods, &gen, NULL);
    while (n > 0 && nmods && raw[n - 1] < mods[0].start) n--;
    while (i < n && raw[i] >= mlz__g.self_lo && raw[i] < mlz__g.self_hi) i++;
    *pcs = raw + i;
    return n - i < MLZ_MAX_FRAMES ? n - i : MLZ_MAX_FRAMES;
}

/* The id of the caller's stack. A walk that gave exactly the frames the
 * unwinder had saved (it met them at its first frame) has the id noted for
 * them, if it was noted at their version and in this session: a loop that
 * allocates from one place interns nothing (no hash, no probe of the
 * shared table: 185 of 2327 instructions per malloc+free of exact mode on
 * the churn, callgrind), and does not trim the frames either. */
static uint32_t stack_id(mlz_tls *t, mlz_ring *ring)
{
    uint64_t raw[CAPTURE_MAX];
    const uint64_t *pcs;
    mlz_unwind_cache *c = mlz__g.unwinder == MLZ_UNWIND_FP ? NULL : mlz__unwind_cache(ring);
    uint64_t v0 = c ? c->tail_version : 0;
    if (c) c->same_as_saved = 0;
    unsigned n = walk_stack(t, c, raw);
    if (c && c->same_as_saved && c->saved_id && c->saved_version == c->tail_version &&
        c->saved_tag == mlz__g.session)
        return c->saved_id;
    unsigned depth = program_frames(raw, n, &pcs);
    uint32_t id = mlz_stacktab_intern(&mlz__g.stacks, pcs, depth);
    /* These frames are the saved ones now (a new walk saved, or the same
     * again): note their id. */
    if (c && (c->tail_version != v0 || c->same_as_saved) && id != MLZ_STACK_TRUNCATED) {
        c->saved_id = id;
        c->saved_version = c->tail_version;
        c->saved_tag = mlz__g.session;
    }
    return id;
}

/* The sampled allocation: reserve, record, publish. An ALLOC that could
 * not be recorded is no sample at all (the reservation is given back), so
 * no FREE can ever be recorded for it.
 *
 * At the default rate a sample comes every thousand or so allocations,
 * long enough for the program to push the map slot and the filter's cells
 * it will write out of the cache. So both are fetched first and the stack
 * is walked while they arrive (on the churn, a sampled allocation's median
 * cost went from 1683 to 1548 cycles). */
static void record_alloc(mlz_tls *t, mlz_ring *ring, void *p, size_t n, uint64_t ts)
{
    mlz_heapmap_prefetch(&mlz__g.map, (uint64_t)p);
    if (mlz__g.rate > 1) mlz_bloom_prefetch(&mlz__g.bloom, (uint64_t)p);
    uint32_t id = stack_id(t, ring);
    int64_t slot = mlz_heapmap_reserve(&mlz__g.map, (uint64_t)p);
    if (slot < 0) return;                       /* map full: counted there */
    if (!mlz__push(ring, MLZ_REC_ALLOC, ts, (uint64_t)p, n, id)) {
        mlz_heapmap_cancel(&mlz__g.map, slot);
        return;
    }
    if (mlz__g.rate > 1) mlz_bloom_add(&mlz__g.bloom, (uint64_t)p);   /* exact: saturated (state.c) */
    /* Per thread, not a shared counter: at 8 threads one cache line
     * bouncing between cores on every sample. */
    uint64_t seq = ++t->births;
    uint32_t tid_shift = ((uint32_t)t->tid & MEMLYZE_TID_MASK) | t->s.rate_shift << MEMLYZE_TID_SHIFT_POS;
    mlz_heapmap_publish(&mlz__g.map, slot, (uint64_t)p, n, id, tid_shift, ts, seq);
    mlz__count_sample(ring);
}

/* A sample point that an allocation not to be recorded here reached: a
 * fresh draw, not 0 (a countdown of 0 would make the program's next
 * allocation a sure sample, weighed as a random one). */
void mlz__sample_pass(mlz_tls *t)
{
    if (t->s.initialized) mlz_sampler_rearm(&t->s, mlz__g.rate << t->s.rate_shift);
    else t->s.countdown = 0;
}

/* Called when the countdown ran out (or on a thread's first allocation).
 * The allocation itself has been made by the caller. */
MLZ_NOINLINE void mlz__sample_slow(void *p, size_t n, uint64_t ts)
{
    mlz_tls *t = &mlz__tls;
    if (t->s.in_hook | t->in_named) {
        /* Our own code allocating, or a named allocator taking memory from
         * the one below it: not an allocation of the program's. Or a signal
         * handler's, made while this thread was in a sample path, which
         * cannot be recorded (the ring and the unwinder are half-way
         * through): sampled mode draws the next sample point afresh,
         * exact mode loses it, and says so. */
        if (t->s.in_hook == MLZ_HOOK_SAMPLING && mlz__g.rate <= 1 && !t->s.rate_shift && p)
            atomic_fetch_add_explicit(&mlz__g.c.handler_allocs, 1, memory_order_relaxed);
        else if (t->s.in_hook)
            atomic_fetch_add_explicit(&mlz__g.c.reentrant, 1, memory_order_relaxed);
        mlz__sample_pass(t);
        return;
    }
    if (!t->s.initialized) {
        t->s.in_hook = MLZ_HOOK_OWN;   /* pthread_getattr_np and the like allocate */
        thread_init(t);
        leave_hook(t);
        /* This allocation takes its chance against the fresh countdown. */
        if (!mlz_sampler_should_sample(&t->s, n)) return;
    }
    /* Has the drain thread raised the rate (overload, events.c) since this
     * thread last looked? Then this point was drawn at the old one. */
    unsigned shift = (unsigned)atomic_load_explicit(&mlz__g.c.rate_shift, memory_order_relaxed);
    int keep = mlz_sampler_follow(&t->s, shift);
    mlz_sampler_rearm(&t->s, mlz__g.rate << t->s.rate_shift);
    if (!p || !keep) return;
    t->s.in_hook = MLZ_HOOK_SAMPLING;
    mlz_ring *ring = mlz__ring();
    _Atomic uint64_t *f = enter(&mlz__g.active_alloc, ring);
    if (f) {
        record_alloc(t, ring, p, n, ts);
        leave(f);
    }
    leave_hook(t);
}

/* The two halves of a tracked free, shared by free and realloc. The
 * caller has entered the free side (enter(&mlz__g.active_free)).
 * untrack: p leaves the map; 1 = it was a sample (old gets its entry). A
 * Bloom false positive costs no write: remove only reads until it finds p. */
static int untrack(void *p, mlz_heap_entry *old)
{
    return mlz_heapmap_remove(&mlz__g.map, (uint64_t)p, old);
}

/* After untrack: p's cells leave the filter. born: the entry was
 * published (time_ns != 0); unknown in exact mode, whose filter is
 * saturated and never cleared. An insert that died during birth (time 0)
 * may not have added its counts yet: taking them out could hide another
 * sample. */
static void filter_forget(void *p, int born)
{
    if (born && mlz__g.rate > 1) mlz_bloom_remove(&mlz__g.bloom, (uint64_t)(uintptr_t)p);
}

/* record_free: after untrack, once p is really gone. Its time is taken
 * now, after the removal (see the ordering rules above). */
static void record_free(mlz_ring *ring, void *p, int born)
{
    filter_forget(p, born);
    if (mlz__push(ring, MLZ_REC_FREE, mlz__now_ns(), (uint64_t)p, 0, 0)) mlz__count_free(ring);
}

/* A removed entry's fields, for realloc to put back if the real call
 * fails. Not an mlz_heap_entry: its cache-line alignment made realloc's
 * hook realign its stack, and program_frame then took a copy of the
 * return address for the caller's, so frameless callers unwound wrong. */
typedef struct kept_entry { uint64_t size, time_ns, seq; uint32_t stack_id, tid; } kept_entry;

static MLZ_NOINLINE int untrack_kept(void *p, kept_entry *k)
{
    mlz_heap_entry old;
    if (!untrack(p, &old)) return 0;
    *k = (kept_entry){ old.size, old.time_ns, old.seq, old.stack_id, old.tid };
    return 1;
}

/* A free (or realloc) while the thread is in our code (in_hook set): a
 * signal handler's, which must not push to the thread's ring (the path it
 * interrupted may be half-way through a push), or our own code's, whose
 * blocks are never in the map. The entry goes now (the
 * map and the filter are lock-free: safe here), before the handler's real
 * free, and the FREE, stamped now, waits in the ring's stash: the path
 * pushes it before its own record (so it keeps its place among the other
 * threads' events: an ALLOC reusing the address comes after it) or when it
 * ends. Without a stash (no ring yet, or full), the FREE is lost and
 * counted, which the trace's readers report. Before, the entry stayed and
 * the freed block looked live everywhere. */
static void interrupted_free(mlz_tls *t, void *p)
{
    _Atomic uint64_t *f = enter(&mlz__g.active_free, t->ring);
    if (!f) return;
    mlz_heap_entry old;
    if (untrack(p, &old)) {
        filter_forget(p, old.time_ns != 0);
        if (!mlz__stash_free(t->ring, mlz__now_ns(), (uint64_t)(uintptr_t)p))
            atomic_fetch_add_explicit(&mlz__g.c.frees_lost, 1, memory_order_relaxed);
    }
    leave(f);
}

/* Sampled pointer (maybe) freed: remove before the real free, so the
 * address cannot be handed out again while its entry still exists. */
MLZ_NOINLINE void mlz__free_slow(void *p)
{
    mlz_tls *t = &mlz__tls;
    if (t->s.in_hook) {
        interrupted_free(t, p);
        return;
    }
    t->s.in_hook = MLZ_HOOK_SAMPLING;
    mlz_ring *ring = mlz__ring();
    _Atomic uint64_t *f = enter(&mlz__g.active_free, ring);
    if (f) {
        /* Only the filter needs the entry's copy (exact mode: 19 of its
         * instructions per free, callgrind). */
        mlz_heap_entry old, *o = mlz__g.rate > 1 ? &old : NULL;
        if (untrack(p, o)) record_free(ring, p, o && o->time_ns);
        leave(f);
    }
    leave_hook(t);
}

/* ------------------------------------------------------------------ hooks */

/* The hooks' ways out (their hot halves: payload.h). The sample
 * timestamp is taken right after the real call: before the reservation
 * (the ordering rules above), and after the block could be handed out.
 * Taken before the call, it could precede the FREE of the block's previous
 * owner at the same address (another thread freed it while we waited in
 * malloc), and the trace would end the new block. */
/* The real call runs with in_real set: when the program's own malloc
 * (inline-hooked) is built on a --hook allocator, that allocator's hook
 * leaves the block to this one (hooks_named.c), so it is counted once, at
 * the level the program asked for it. Only here, on the sample path: the
 * hot path has no room for it, so at a sampling rate the allocator below
 * still draws its own samples. The standard hooks record what they see
 * meanwhile: a signal handler's allocation, made while the real malloc
 * ran (in_named here, it was neither recorded nor counted in exact mode). */
static MLZ_NOINLINE void *sample1(void *(*real)(size_t), size_t a, size_t n)
{
    mlz__tls.in_real++;
    void *p = real(a);
    mlz__tls.in_real--;
    mlz__sample_slow(p, n, mlz__now_ns());
    return p;
}

static MLZ_NOINLINE void *sample2(void *(*real)(size_t, size_t), size_t a, size_t b, size_t n)
{
    mlz__tls.in_real++;
    void *p = real(a, b);
    mlz__tls.in_real--;
    mlz__sample_slow(p, n, mlz__now_ns());
    return p;
}

MLZ_NOINLINE void *mlz__sample_malloc(size_t n)
{
    return sample1(mlz__g.real.malloc, n, n);
}

/* A block of the preload library's boot arena (preload.c; the filter
 * holds them all) is never the real free's. In exact mode every cell is
 * set (state.c): the rest of the test is skipped. */
MLZ_NOINLINE void mlz__free_then_real(void *p)
{
    if (p && (mlz__g.rate <= 1 || mlz_bloom_rest(&mlz__g.bloom, (uint64_t)p))) {
        mlz__free_slow(p);
        if (&mlz__boot_block && mlz__boot_block(p)) return;
    }
    mlz__g.real.free(p);
}

MLZ_HOT_ALIGN void *mlz_hook_malloc(size_t n) { return mlz__malloc_hot(n); }
MLZ_HOT_ALIGN void mlz_hook_free(void *p) { mlz__free_hot(p); }

void *mlz_hook_calloc(size_t n, size_t m)
{
    size_t total;
    if (__builtin_mul_overflow(n, m, &total)) return mlz__g.real.calloc(n, m);
    if (MLZ_SAMPLES(total)) return sample2(mlz__g.real.calloc, n, m, total);
    return mlz__g.real.calloc(n, m);
}

void *mlz_hook_memalign(size_t align, size_t n)
{
    if (MLZ_SAMPLES(n)) return sample2(mlz__g.real.memalign, align, n, n);
    return mlz__g.real.memalign(align, n);
}

void *mlz_hook_aligned_alloc(size_t align, size_t n)
{
    if (MLZ_SAMPLES(n)) return sample2(mlz__g.real.aligned_alloc, align, n, n);
    return mlz__g.real.aligned_alloc(align, n);
}

void *mlz_hook_valloc(size_t n)
{
    if (MLZ_SAMPLES(n)) return sample1(mlz__g.real.valloc, n, n);
    return mlz__g.real.valloc(n);
}

/* pvalloc's request is whole pages (at least one): what it allocates, and
 * so what a profile counts. A size past the last page stays as it is (it
 * fails). */
void *mlz_hook_pvalloc(size_t n)
{
    static size_t page;
    if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
    size_t whole = n > SIZE_MAX - page ? n : n ? (n + page - 1) & ~(page - 1) : page;
    if (MLZ_SAMPLES(whole)) return sample1(mlz__g.real.pvalloc, n, whole);
    return mlz__g.real.pvalloc(n);
}

int mlz_hook_posix_memalign(void **out, size_t align, size_t n)
{
    mlz_tls *t = &mlz__tls;
    if (mlz_likely(!mlz_sampler_should_sample(&t->s, n)))
        return mlz__g.real.posix_memalign(out, align, n);
    int rc = mlz__g.real.posix_memalign(out, align, n);
    uint64_t ts = mlz__now_ns();
    mlz__sample_slow(rc == 0 ? *out : NULL, n, ts);
    return rc;
}

/* realloc: the old block leaves the map (its FREE is recorded), the new one
 * may be sampled like any allocation. If the real realloc fails the old
 * block is still live, so its entry is put back. */
void *mlz__realloc_common(void *p, size_t n, size_t m, void *(*call)(const void *, void *, size_t, size_t),
                          const void *ctx)
{
    mlz_tls *t = &mlz__tls;
    kept_entry old;
    int had = 0;
    _Atomic uint64_t *entered = NULL;
    mlz_ring *ring = NULL;
    if (p && mlz_unlikely(mlz_bloom_maybe(&mlz__g.bloom, (uint64_t)p))) {
        if (t->s.in_hook) {
            interrupted_free(t, p);   /* a handler's realloc */
        } else {
            t->s.in_hook = MLZ_HOOK_SAMPLING;
            ring = mlz__ring();
            /* Stay entered until the outcome is known: the entry may go back. */
            if ((entered = enter(&mlz__g.active_free, ring)))
                had = untrack_kept(p, &old);
            leave_hook(t);
        }
    }
    size_t total = n * m;
    int count = mlz_sampler_should_sample(&t->s, total);
    uint64_t ts = count ? mlz__now_ns() : 0;
    void *q = call(ctx, p, n, m);
    if (entered && !had) leave(entered);
    if (had) {
        t->s.in_hook = MLZ_HOOK_SAMPLING;
        if (!q && total != 0) {
            /* Failed: p is untouched and still ours to track. */
            int64_t slot = mlz_heapmap_reserve(&mlz__g.map, (uint64_t)p);
            if (slot >= 0)
                mlz_heapmap_publish(&mlz__g.map, slot, (uint64_t)p, old.size, old.stack_id, old.tid,
                                    old.time_ns, old.seq);
        } else {
            record_free(ring, p, old.time_ns != 0);
        }
        leave(entered);
        leave_hook(t);
    }
    if (count) mlz__sample_slow(q, total, ts);
    return q;
}

static void *call_realloc(const void *ctx, void *p, size_t n, size_t m)
{
    (void)ctx, (void)m;
    return mlz__g.real.realloc(p, n);
}

void *mlz_hook_realloc(void *p, size_t n)
{
    return mlz__realloc_common(p, n, 1, call_realloc, NULL);
}

/* What glibc's reallocarray is, done here: its realloc call goes through
 * the PLT, into our realloc, and the block was recorded twice. */
void *mlz_hook_reallocarray(void *p, size_t n, size_t m)
{
    size_t total;
    if (__builtin_mul_overflow(n, m, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return mlz__realloc_common(p, total, 1, call_realloc, NULL);
}
