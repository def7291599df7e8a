/*
 * events.c - from the hooks to the spool file.
 *
 * Each thread that samples claims a ring (single producer: that thread;
 * single consumer: the drain thread). Pushing is two relaxed loads, a copy
 * and a release store. When the ring is full:
 *   - the thread waits for the drain thread, yielding: a FREE, and in
 *     exact mode every event, for at most PUSH_WAIT_NS; a sampled ALLOC
 *     for ALLOC_WAIT_NS, the time a few rate raises take (in sampled mode
 *     a wait makes the drain thread raise the rate: raise_rate_if_behind);
 *   - an ALLOC still without room is given up (the caller cancels the
 *     sample, so no FREE will ever name it) and counted (ring_drops); a
 *     FREE is counted as lost (frees_lost): the one loss that leaves a
 *     phantom object.
 * The drain thread wakes sooner while rings fill up, and at once when one
 * is half full, so waits stay rare.
 *
 * The drain thread wakes every few milliseconds, reads D = now, then merges
 * the rings by timestamp and writes every record stamped <= D. Why that is
 * enough for a FREE never to precede its ALLOC in the spool: the ALLOC is
 * pushed before the entry is published, and the FREE's time is taken after
 * the entry was removed, so by the time any FREE with time <= D exists, its
 * ALLOC is already visible in the other ring, and its time is smaller.
 * Records stamped after D wait for the next round.
 *
 * The drain thread also writes each stack (raw PCs) the first time a record
 * names it, and the module map whenever the set of loaded modules changes.
 */
#include "payload.h"
#include "info.h"
#include "modtab.h"
#include "jsonw.h"
#include "mlz_format.h"
#include "spool_records.h"
#include "varint.h"
#include "waker.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_RINGS 1024
#define STASH_MAX 32        /* a ring's FREEs from signal handlers, waiting */
#define DRAIN_PERIOD_NS (10 * 1000 * 1000)      /* sampled mode, rings quiet */
#define DRAIN_BUSY_NS   (1000 * 1000)           /* exact mode, or rings filling */
#define FLUSH_WAIT_NS   (200 * 1000 * 1000)     /* a flush request waits at most this */
#define PUSH_WAIT_NS    (1000ull * 1000 * 1000) /* longest wait for room: a FREE, or exact mode */
#define RAISE_GAP_NS    (5ull * 1000 * 1000)    /* shortest time between two rate raises */
#define ALLOC_WAIT_NS   (4 * RAISE_GAP_NS)      /* longest wait of a sampled ALLOC */

struct mlz_ring {
    _Alignas(64) _Atomic uint64_t head;   /* written by the owner */
    /* Also the owner's alone, on its line: no counter shared by threads is
     * written per event. The drain thread adds them up (sum_counters). */
    _Atomic uint64_t in_flight;           /* the owner is inside a sample path */
    uint64_t samples, frees_tracked;
    uint32_t nstash;                      /* FREEs in stash[], pushed by the owner */
    _Alignas(64) _Atomic uint64_t tail;   /* written by the drain thread */
    _Atomic int32_t owner;                /* tid, 0 = free */
    uint32_t mask;
    mlz_rec *recs;
    /* The owner's DWARF rule cache: per thread (no locking), and it goes
     * with the ring so that exited threads' caches are reused, not leaked. */
    mlz_unwind_cache *ucache;
    /* FREEs of the owner's signal handlers, which may not push (they may
     * have interrupted a push): mlz__stash_free. */
    struct { uint64_t ts_ns, addr; } stash[STASH_MAX];
};

static mlz_ring rings[MAX_RINGS];
static _Atomic int drain_running;
/* Each drain thread runs while the generation it started with is current:
 * a detach run ON the drain thread (the injector's favourite thread to
 * borrow: it holds nothing) cannot join itself, so it lets the thread end
 * on its own, and a re-attach right after must not revive the old one. */
static _Atomic unsigned drain_gen;
static _Atomic uint32_t nrings;            /* rings ever claimed (high mark) */
static uint32_t ring_size;                 /* records per ring, power of two */

/* Rings' records and unwind caches come from chunks of RING_CHUNK rings,
 * one mapping each, so a detach unmaps a few mappings, not two per thread.
 * Each munmap waits for the process's mmap lock, which a busy allocator
 * takes all the time (glibc's arenas grow and shrink under it): under a
 * churn of 16 threads on 2 CPUs each took ~15 ms, and the borrowed thread
 * spent 0.5 s of a detach unmapping rings (2.7 s with 64 threads). A
 * chunk is mapped by the first ring that needs it; its unused pages stay
 * address space only. */
#define RING_CHUNK  32
#define RING_CHUNKS (MAX_RINGS / RING_CHUNK)
#define RING_MAX    (1u << 12)            /* records: the largest ring_size */
#define PAGE_UP(x)  (((x) + 4095) / 4096 * 4096)

/* The pieces' size is fixed, whatever the session's ring_size: a chunk
 * mapped by a thread that claimed its ring while a detach ran, and so left
 * to the next session, still has room for every ring it holds. */
typedef struct ring_chunks {
    _Atomic(uint8_t *) base[RING_CHUNKS];
    size_t each;                          /* bytes per ring, a page multiple */
} ring_chunks;

static ring_chunks rec_chunks = { .each = PAGE_UP(RING_MAX * sizeof(mlz_rec)) };
static ring_chunks ucache_chunks = { .each = PAGE_UP(sizeof(mlz_unwind_cache)) };

/* Ring i's piece of c, or NULL. */
static void *chunk_piece(ring_chunks *c, uint32_t i)
{
    _Atomic(uint8_t *) *slot = &c->base[i / RING_CHUNK];
    uint8_t *base = atomic_load_explicit(slot, memory_order_acquire);
    if (!base) {
        void *m = mmap(NULL, RING_CHUNK * c->each, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        uint8_t *none = NULL;
        if (atomic_compare_exchange_strong(slot, &none, (uint8_t *)m)) {
            base = m;
        } else {
            munmap(m, RING_CHUNK * c->each);
            base = none;
        }
    }
    return base + (size_t)(i % RING_CHUNK) * c->each;
}

static void chunks_release(ring_chunks *c)
{
    for (uint32_t k = 0; k < RING_CHUNKS; k++) {
        uint8_t *base = atomic_exchange(&c->base[k], NULL);
        if (base) munmap(base, RING_CHUNK * c->each);
    }
}

static mlz_ring *claim_ring(int32_t tid)
{
    /* Reuse a ring released by an exited thread (or by a detach), else take
     * a new one. */
    mlz_ring *r = NULL;
    uint32_t n = atomic_load_explicit(&nrings, memory_order_acquire);
    for (uint32_t i = 0; i < n && !r; i++) {
        int32_t zero = 0;
        if (atomic_load_explicit(&rings[i].owner, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&rings[i].owner, &zero, tid))
            r = &rings[i];
    }
    while (!r) {
        n = atomic_load_explicit(&nrings, memory_order_relaxed);
        if (n >= MAX_RINGS) return NULL;
        int32_t zero = 0;
        if (atomic_compare_exchange_strong(&rings[n].owner, &zero, tid) || zero == tid) r = &rings[n];
        else {
            /* Another thread is publishing rings[n]: help nrings past it. */
            uint32_t cur = n;
            atomic_compare_exchange_strong(&nrings, &cur, n + 1);
        }
    }
    if (!r->recs) {
        void *m = chunk_piece(&rec_chunks, (uint32_t)(r - rings));
        if (!m) { atomic_store(&r->owner, 0); return NULL; }
        r->recs = m;
        r->mask = ring_size - 1;
    }
    /* Published (nrings past it) before the ring is used: the drain thread
     * and detach's quiescence check see only rings below nrings, so a ring
     * beyond it would be a thread in flight that detach cannot see. */
    uint32_t idx = (uint32_t)(r - rings), cur = atomic_load(&nrings);
    while (cur <= idx && !atomic_compare_exchange_weak(&nrings, &cur, idx + 1)) {}
    return r;
}

static MLZ_COLD MLZ_NOINLINE mlz_ring *ring_first_use(mlz_tls *t)
{
    /* A thread that has only freed so far has not been through thread_init:
     * it needs its tid before it can own a ring (0 means "free ring"). */
    if (!t->tid) t->tid = (int32_t)syscall(SYS_gettid);
    mlz_ring *r = t->ring;
    if (r && atomic_load_explicit(&r->owner, memory_order_relaxed) == t->tid) return r;
    if (!ring_size) return NULL;
    return t->ring = claim_ring(t->tid);
}

/* This thread's ring, claimed on first use; NULL when none is left. The
 * claim is out of line, so that the common case needs no stack frame. */
mlz_ring *mlz__ring(void)
{
    mlz_tls *t = &mlz__tls;
    mlz_ring *r = t->ring;
    if (mlz_likely(r && t->tid && atomic_load_explicit(&r->owner, memory_order_relaxed) == t->tid)) return r;
    return ring_first_use(t);
}

/* Per-thread counters (see payload.h): this thread's ring's, or the
 * shared ones when the thread has no ring. */
_Atomic uint64_t *mlz__in_flight_slot(mlz_ring *r)
{
    return r ? &r->in_flight : &mlz__g.c.in_flight;
}

/* Counts of threads without a ring, and of rings given back (detach). */
static _Atomic uint64_t samples_shared, frees_shared;

/* Only the owner writes its ring's counts: a plain add, stored atomically
 * for the drain thread that reads them. */
static void ring_count(uint64_t *c)
{
    __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

void mlz__count_sample(mlz_ring *r)
{
    if (r) ring_count(&r->samples);
    else atomic_fetch_add_explicit(&samples_shared, 1, memory_order_relaxed);
}

void mlz__count_free(mlz_ring *r)
{
    if (r) ring_count(&r->frees_tracked);
    else atomic_fetch_add_explicit(&frees_shared, 1, memory_order_relaxed);
}

int mlz__quiescent(void)
{
    if (atomic_load(&mlz__g.c.in_flight)) return 0;
    uint32_t n = atomic_load(&nrings);
    for (uint32_t i = 0; i < n; i++)
        if (atomic_load(&rings[i].in_flight)) return 0;
    return 1;
}

/* The cumulative counters at this session's start (mlz__drain_start). */
typedef struct session_counts {
    uint64_t samples, frees_tracked, events_written, ring_drops, no_ring, frees_lost, reentrant, handler_allocs,
        spool_errors, ring_waits;
} session_counts;
static session_counts session_base;

/* The counters tools read (memlyze_info, the spool's COUNTERS): the shared
 * part plus every ring's. Rings are never freed while the drain runs, and
 * a reused ring keeps its counts (they belong to the process, not the
 * thread). */
static void sum_counters(void)
{
    uint64_t s = atomic_load(&samples_shared), f = atomic_load(&frees_shared);
    uint32_t n = atomic_load_explicit(&nrings, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        s += __atomic_load_n(&rings[i].samples, __ATOMIC_RELAXED);
        f += __atomic_load_n(&rings[i].frees_tracked, __ATOMIC_RELAXED);
    }
    atomic_store_explicit(&mlz__g.c.samples, s, memory_order_relaxed);
    atomic_store_explicit(&mlz__g.c.frees_tracked, f, memory_order_relaxed);
}

mlz_unwind_cache *mlz__unwind_cache(mlz_ring *r)
{
    if (!r) return NULL;
    if (!r->ucache) r->ucache = chunk_piece(&ucache_chunks, (uint32_t)(r - rings));
    return r->ucache;
}

/* What the drain thread sleeps on (core/waker.h): flush requests (below)
 * and a ring getting half full wake it; its flushes wake the requester. */
static mlz_waker flush_wake;

/* Records in the ring once the owner's head is h. */
static uint64_t ring_fill(mlz_ring *r, uint64_t h)
{
    return h - atomic_load_explicit(&r->tail, memory_order_acquire);
}

static MLZ_COLD MLZ_NOINLINE void wake_drain(void)
{
    mlz_waker_wake(&flush_wake);
}

/* Yields until the drain thread made room, for limit_ns at most. A
 * child of _Fork or clone (no atfork handler ran) has no drain thread:
 * it never waits. 1 = room now. */
static MLZ_COLD MLZ_NOINLINE int wait_for_room(mlz_ring *r, uint64_t h, uint64_t limit_ns)
{
    if (!atomic_load_explicit(&drain_running, memory_order_relaxed) ||
        (pid_t)syscall(SYS_getpid) != mlz__g.pid)
        return 0;
    atomic_fetch_add_explicit(&mlz__g.c.ring_waits, 1, memory_order_relaxed);
    /* Sleep rather than spin: with more busy threads than CPUs, threads
     * that only yield leave the drain thread a small share of a CPU. */
    uint64_t t0 = mlz__now_ns();
    for (unsigned i = 1;; i++) {
        if (i <= 4) {
            sched_yield();
        } else {
            struct timespec ts = { 0, 50 * 1000 };
            nanosleep(&ts, NULL);
        }
        if (ring_fill(r, h) <= r->mask) return 1;
        if (i % 16 == 0 && mlz__now_ns() - t0 > limit_ns) return 0;
    }
}

/* x86 has a prefetch for writing (PREFETCHW) on CPUs with CPUID
 * 0x80000001 ECX bit 8, AMD's since the K6 and Intel's since Broadwell;
 * GCC's write prefetch is a read prefetch there unless built for such a
 * CPU. Exact mode, 1 thread on 2 CPUs, with the plain leave() of hooks.c:
 * 6% faster than the read prefetch (11 paired runs). 8 records are 4 lines
 * ahead: a line's transfer from the other CPU outlasts one event. */
#define PREFETCH_AHEAD 8
static int have_prefetchw;

static void detect_prefetchw(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    have_prefetchw = __get_cpuid(0x80000001u, &a, &b, &c, &d) && (c & (1u << 8));
#endif
}

static inline void prefetch_for_write(const void *p)
{
#if defined(__x86_64__)
    if (have_prefetchw) {
        __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
        return;
    }
#endif
    __builtin_prefetch(p, 1);
}

static inline void put_rec(mlz_ring *r, uint64_t h, enum mlz_rec_kind kind, uint64_t ts_ns, uint64_t addr,
                           uint64_t size, uint32_t stack_id)
{
    mlz_rec *e = &r->recs[h & r->mask];
    e->ts_ns = ts_ns;
    e->addr = addr;
    e->size = size;
    e->stack_id = stack_id;
    e->type = (uint8_t)kind;
    e->rate_shift = (uint8_t)mlz__tls.s.rate_shift;   /* the rate an ALLOC was sampled at */
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
    /* The slots a few pushes on were last read by the drain thread, a
     * whole ring ago, on its own CPU: take their line for writing now,
     * while the program runs. A read prefetch left the drain thread's copy
     * in place, and the write then waited for it to be invalidated. */
    prefetch_for_write(&r->recs[(h + PREFETCH_AHEAD) & r->mask]);
}

/* No ring, a ring just half full or a full one: counted, woken, waited for. */
static MLZ_COLD MLZ_NOINLINE int push_slow(mlz_ring *r, uint64_t h, enum mlz_rec_kind kind, uint64_t ts_ns,
                                           uint64_t addr, uint64_t size, uint32_t stack_id)
{
    /* Long waits are for events whose loss would falsify the trace: a FREE
     * (its object would live on), and every event in exact mode. */
    uint64_t limit = kind == MLZ_REC_FREE || mlz__g.rate <= 1 ? PUSH_WAIT_NS : ALLOC_WAIT_NS;
    if (!r) {
        atomic_fetch_add_explicit(kind == MLZ_REC_FREE ? &mlz__g.c.frees_lost : &mlz__g.c.no_ring, 1,
                                  memory_order_relaxed);
        return 0;
    }
    uint64_t fill = ring_fill(r, h);
    /* Half full: wake the drain thread now rather than at its next period,
     * so that small rings do not make this thread wait. One system call per
     * half ring, only while events come faster than one period drains. */
    if (fill == (r->mask >> 1) + 1) wake_drain();
    if (fill > r->mask && !wait_for_room(r, h, limit)) {
        atomic_fetch_add_explicit(kind == MLZ_REC_FREE ? &mlz__g.c.frees_lost : &mlz__g.c.ring_drops, 1,
                                  memory_order_relaxed);
        return 0;
    }
    put_rec(r, h, kind, ts_ns, addr, size, stack_id);
    return 1;
}

/* The common case needs no stack frame: everything that waits or counts is
 * in push_slow (their registers cost the fast path 14 instructions). */
static inline int push(mlz_ring *r, enum mlz_rec_kind kind, uint64_t ts_ns, uint64_t addr, uint64_t size,
                       uint32_t stack_id)
{
    if (mlz_unlikely(!r)) return push_slow(r, 0, kind, ts_ns, addr, size, stack_id);
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed), fill = ring_fill(r, h);
    if (mlz_unlikely(fill == (r->mask >> 1) + 1 || fill > r->mask))
        return push_slow(r, h, kind, ts_ns, addr, size, stack_id);
    put_rec(r, h, kind, ts_ns, addr, size, stack_id);
    return 1;
}

/* Stashed FREEs go first: they were stamped before this record's push. */
int mlz__push(mlz_ring *r, enum mlz_rec_kind kind, uint64_t ts_ns, uint64_t addr, uint64_t size,
              uint32_t stack_id)
{
    if (mlz_unlikely(r && __atomic_load_n(&r->nstash, __ATOMIC_RELAXED))) mlz__stash_flush(r);
    return push(r, kind, ts_ns, addr, size, stack_id);
}

/* A handler adds at the end: entry first, then the count by CAS, so a
 * handler interrupting this one (another signal) takes the next place. */
int mlz__stash_free(mlz_ring *r, uint64_t ts_ns, uint64_t addr)
{
    if (!r) return 0;
    uint32_t n = __atomic_load_n(&r->nstash, __ATOMIC_ACQUIRE);
    while (n < STASH_MAX) {
        r->stash[n].ts_ns = ts_ns;
        r->stash[n].addr = addr;
        if (__atomic_compare_exchange_n(&r->nstash, &n, n + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return 1;
    }
    return 0;
}

int mlz__stash_pending(const mlz_ring *r)
{
    return __atomic_load_n(&r->nstash, __ATOMIC_ACQUIRE) != 0;
}

/* The owner, in a sample path: handlers only add meanwhile, so the count
 * is reset only if nothing came since it was read. */
MLZ_NOINLINE void mlz__stash_flush(mlz_ring *r)
{
    uint32_t done = 0, n;
    for (;;) {
        n = __atomic_load_n(&r->nstash, __ATOMIC_ACQUIRE);
        for (; done < n; done++)
            if (push(r, MLZ_REC_FREE, r->stash[done].ts_ns, r->stash[done].addr, 0, 0)) mlz__count_free(r);
        if (__atomic_compare_exchange_n(&r->nstash, &n, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    }
}

/* ------------------------------------------------------------ the spool */

static mlz_writer spool;
static uint8_t spool_buf[MLZ_BLOCK_SIZE] __attribute__((aligned(4096)));
static char meta_buf[16384];
static uint8_t *stack_written;             /* bitmap over stack ids */
static uint64_t modtab_gen = UINT64_MAX;
static pthread_t drain_thread;
static int spool_open;

/* Text another thread wants in the spool (the writer has one owner: the
 * drain thread). One pending note at a time is all attach needs. */
static char note_buf[MLZ_EXT_MAX];
static size_t note_len;
static unsigned note_type;
static _Atomic int note_ready;

/* Flush requests (exec.c, before an exec): the drain thread answers each
 * round by writing its buffer out. */
static _Atomic uint64_t flush_req, flush_done;

void mlz__spool_note(unsigned type, const char *text, size_t len)
{
    /* Wait (bounded) for the drain thread to take the previous note. */
    for (int i = 0; i < 50 && atomic_load(&note_ready) && atomic_load(&drain_running); i++) {
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
    }
    if (atomic_load(&note_ready)) return;
    if (len > sizeof note_buf) len = sizeof note_buf;
    memcpy(note_buf, text, len);
    note_len = len;
    note_type = type;
    atomic_store_explicit(&note_ready, 1, memory_order_release);
}

static void write_note(uint64_t t_us)
{
    if (!atomic_load_explicit(&note_ready, memory_order_acquire)) return;
    mlz_writer_ext(&spool, note_type, t_us, note_buf, note_len);
    atomic_store(&note_ready, 0);
}

static uint64_t to_us(uint64_t mono_ns)
{
    return (mono_ns + mlz__g.mono_to_real_ns) / 1000;
}

static size_t read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t n = 0;
    for (;;) {
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        n += (size_t)k;
        if (n == cap) break;
    }
    close(fd);
    return n;
}

static int same_module(const mlz_module *a, const mlz_module *b)
{
    return a->start == b->start && a->end == b->end && a->load_bias == b->load_bias &&
           a->build_id_len == b->build_id_len && !memcmp(a->build_id, b->build_id, a->build_id_len) &&
           !strcmp(a->path, b->path);
}

/* Whether `in` (count modules, sorted by start) holds the mapping m. */
static int has_module(const mlz_module *in, unsigned count, const mlz_module *m)
{
    unsigned lo = 0, hi = count;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (in[mid].start < m->start) lo = mid + 1;
        else hi = mid;
    }
    for (; lo < count && in[lo].start == m->start; lo++)
        if (same_module(&in[lo], m)) return 1;
    return 0;
}

/* The module map, as it changed: MODULE for each module not in the last
 * map written, MODULE_GONE (with the time the snapshot that missed it was
 * taken) for each that left it. Every snapshot since the last round is
 * read, so a library loaded and unloaded in between is still named; and
 * a stack is symbolized against the module at its addresses at the time
 * of its allocations, even if another library was loaded there since.
 * Snapshots stay mapped until release_all, so the last one can be read. */
static void write_modules(uint64_t now_us)
{
    static const mlz_module *last;
    static unsigned nlast;
    uint64_t gen = mlz_modtab_generation();
    if (gen == modtab_gen) return;
    if (modtab_gen == UINT64_MAX || modtab_gen > gen) nlast = 0, modtab_gen = gen - 1;  /* a new spool */
    static uint8_t p[MLZ_SPOOL_MODULE_MAX];
    for (uint64_t g = modtab_gen + 1; g <= gen; g++) {
        unsigned count;
        uint64_t stamp_ns;
        const mlz_module *mods = mlz_modtab_modules_of(g, &count, &stamp_ns);
        if (!mods) continue;
        for (unsigned i = 0; i < count; i++) {
            if (has_module(last, nlast, &mods[i])) continue;
            size_t n = mlz_spool_module(p, mods[i].start, mods[i].end - mods[i].start, mods[i].load_bias,
                                      mods[i].build_id, mods[i].build_id_len, mods[i].path);
            if (mlz_writer_ext(&spool, MLZ_EV_MODULE, now_us, p, n))
                atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
        }
        for (unsigned i = 0; i < nlast; i++) {
            if (has_module(mods, count, &last[i])) continue;
            size_t n = mlz_spool_module_gone(p, last[i].start, to_us(stamp_ns), last[i].path);
            if (mlz_writer_ext(&spool, MLZ_EV_MODULE_GONE, now_us, p, n))
                atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
        }
        last = mods;
        nlast = count;
    }
    modtab_gen = gen;
}

/* Before a dlopen of the program (the real open_fn and close_fn): 1 if
 * this is a fork child that may not walk the modules yet (core/modtab.c)
 * and file is not loaded. A dlopen that then succeeds loaded it, so it took
 * and released the lock dl_iterate_phdr takes: the caller may call
 * mlz_modtab_lock_seen. (A dlopen of a library already there takes no such
 * lock: RTLD_NOLOAD asks first.) */
int mlz__dlopen_loads_new(void *(*open_fn)(const char *, int), int (*close_fn)(void *), const char *file)
{
    if (!file || !close_fn || !mlz_modtab_walk_unsafe()) return 0;
    void *before = open_fn(file, RTLD_LAZY | RTLD_NOLOAD);
    if (before) close_fn(before);
    return !before;
}

/* After a dlopen, and around a dlclose: see mlz__dlclose_between. */
void mlz__modules_refresh(void)
{
    /* No map yet (not started) or none any more (shut down): nothing to do. */
    if (mlz_modtab_generation() && mlz_modtab_changed()) mlz_modtab_refresh();
}

/* A dlclose (both fronts): the module map is taken while the library is
 * still there (so it is named even if no drain round saw it), then again
 * once it is gone, stamped before any allocation from a library loaded at
 * its addresses next. Takes the loader lock. */
int mlz__dlclose_between(int (*close)(void *), void *handle)
{
    mlz__modules_refresh();
    int r = close(handle);
    int saved = errno;
    mlz__modules_refresh();
    errno = saved;
    return r;
}

/* The first ALLOC of a stack writes it: write_rec checks the bitmap, and
 * passes ids of the table only (1 .. MLZ_STACKTAB_DEFAULT_MAX - 1). The
 * rare path. */
static __attribute__((noinline)) void write_stack(uint32_t id, uint64_t t_us)
{
    const uint64_t *pcs;
    unsigned depth;
    if (!mlz_stacktab_get(&mlz__g.stacks, id, &pcs, &depth)) return;
    uint8_t p[MLZ_SPOOL_STACK_MAX(MLZ_MAX_FRAMES)];
    size_t n = mlz_spool_stack(p, id, pcs, depth, t_us);
    if (mlz_writer_ext(&spool, MLZ_EV_STACK_RAW, t_us, p, n) == 0)
        stack_written[id / 8] |= (uint8_t)(1u << (id % 8));
}

/* Allocations whose stack could not be kept (table full) name this spool
 * id, written once as an empty stack: every ALLOC names a STACK_RAW. */
#define SPOOL_TRUNCATED_ID MLZ_STACKTAB_DEFAULT_MAX
static int truncated_written;

/* Rate changes in the spool: before an ALLOC sampled at another rate than
 * the previous ALLOC, a MARKER naming the new rate (function id
 * RATE_MARKER_ID + shift, "memlyze:rate N" in the metadata). Threads move
 * to a raised rate one by one, so the markers may go back and forth for a
 * moment; a reader weighs each ALLOC by the last marker before it. */
#define RATE_MARKER_ID 2
static unsigned spool_shift;

/* Events written by the current drain round: added to the shared counter
 * once per round, not with a locked add per event. */
static uint64_t written_this_round;

static void write_rec(const mlz_rec *e, int32_t tid)
{
    uint64_t t = to_us(e->ts_ns);
    int rc;
    if (e->type == MLZ_REC_ALLOC && e->rate_shift != spool_shift) {
        if (mlz_writer_marker(&spool, t, RATE_MARKER_ID + e->rate_shift))
            atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
        spool_shift = e->rate_shift;
    }
    if (e->type == MLZ_REC_ALLOC) {
        uint64_t id = e->stack_id;
        if (id == MLZ_STACK_NONE || id >= MLZ_STACKTAB_DEFAULT_MAX) {
            id = SPOOL_TRUNCATED_ID;
            if (!truncated_written) {
                uint8_t p[MLZ_SPOOL_STACK_MAX(0)];
                size_t n = mlz_spool_stack(p, id, NULL, 0, t);
                truncated_written = mlz_writer_ext(&spool, MLZ_EV_STACK_RAW, t, p, n) == 0;
            }
        } else if (!(stack_written[id / 8] & (1u << (id % 8)))) {
            write_stack((uint32_t)id, t);
        }
        rc = mlz_writer_alloc(&spool, t, e->addr, e->size, id, (uint16_t)tid);
    } else {
        rc = mlz_writer_free(&spool, t, e->addr);
    }
    if (rc) atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
    else written_this_round++;
}

/* One round: merge every record stamped <= limit from all rings. Returns
 * the fullest ring's fill at the start, in records.
 *
 * Each ring's head is read once, at the start (what a ring gains during
 * the round waits for the next one; the ordering argument above holds for
 * those snapshots, all taken after D was read), and the drain's own tail
 * is published every TAIL_BATCH records: the per-record loop touches no
 * line a producer writes. */
#define TAIL_BATCH 64
static uint64_t drain_round(uint64_t limit)
{
    static uint64_t head[MAX_RINGS], tail[MAX_RINGS];
    static uint32_t active[MAX_RINGS];
    static uint8_t seen[MAX_RINGS];      /* read this round: only their tails are ours to store */
    uint32_t n = atomic_load_explicit(&nrings, memory_order_acquire), na = 0;
    uint64_t fullest = 0;
    for (uint32_t i = 0; i < n; i++) {
        seen[i] = rings[i].recs != NULL;
        if (!seen[i]) continue;
        head[i] = atomic_load_explicit(&rings[i].head, memory_order_acquire);
        tail[i] = atomic_load_explicit(&rings[i].tail, memory_order_relaxed);
        if (head[i] - tail[i] > (uint64_t)rings[i].mask + 1) {
            /* Never more records than the ring holds: a broken ring is
             * skipped (and counted), not read around forever. */
            tail[i] = head[i];
            atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
        }
        if (head[i] - tail[i] > fullest) fullest = head[i] - tail[i];
        if (head[i] != tail[i]) active[na++] = i;
    }
    for (;;) {
        /* The ring with the earliest record, and the time of the earliest
         * record of every other ring: the first ring's records up to that
         * time go out in one run. Threads take turns on the CPUs, so a
         * ring's records come in long runs, and the scan over all rings is
         * made once per run instead of once per record (8 threads of exact
         * mode on 2 CPUs: the drain thread's CPU time fell by a quarter). */
        uint32_t best = UINT32_MAX, bk = 0;
        uint64_t bts = 0, next = limit;
        for (uint32_t k = 0; k < na; k++) {
            uint32_t i = active[k];
            uint64_t ts = rings[i].recs[tail[i] & rings[i].mask].ts_ns;
            if (ts > limit) continue;
            if (best == UINT32_MAX || ts < bts) {
                if (best != UINT32_MAX && bts < next) next = bts;
                best = i; bk = k; bts = ts;
            } else if (ts < next) {
                next = ts;
            }
        }
        if (best == UINT32_MAX) break;
        mlz_ring *r = &rings[best];
        int32_t owner = atomic_load_explicit(&r->owner, memory_order_relaxed);
        do {
            mlz_rec copy = r->recs[tail[best] & r->mask];
            write_rec(&copy, owner);
            if (++tail[best] % TAIL_BATCH == 0) atomic_store_explicit(&r->tail, tail[best], memory_order_release);
            if (tail[best] == head[best]) { active[bk] = active[--na]; break; }
        } while (r->recs[tail[best] & r->mask].ts_ns <= next);
    }
    /* A ring that got its records during this round was not read: storing
     * a stale tail into it would put its tail past its head. */
    for (uint32_t i = 0; i < n; i++)
        if (seen[i]) atomic_store_explicit(&rings[i].tail, tail[i], memory_order_release);
    atomic_fetch_add_explicit(&mlz__g.c.events_written, written_this_round, memory_order_relaxed);
    written_this_round = 0;
    return fullest;
}

/* Rings of threads that have exited are emptied and handed back. */
static void reclaim_rings(void)
{
    uint32_t n = atomic_load_explicit(&nrings, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        int32_t tid = atomic_load_explicit(&rings[i].owner, memory_order_relaxed);
        if (tid <= 0) continue;
        if (syscall(SYS_tgkill, mlz__g.pid, tid, 0) == 0 || errno != ESRCH) continue;
        if (atomic_load(&rings[i].tail) != atomic_load(&rings[i].head)) continue;
        atomic_compare_exchange_strong(&rings[i].owner, &tid, 0);
    }
}

/* A long exact-mode session must not fill the disk the program itself
 * writes to. Every 16 MiB of spool, the free space of its file system is
 * looked at; below the floor, new allocations stop being recorded (frees of
 * recorded ones still are, so the trace stays consistent), once, with one
 * line on stderr and a counter that reports of the trace show. */
#define DISK_CHECK_BYTES (16u << 20)

static void check_disk_floor(void)
{
    static uint64_t checked_at = UINT64_MAX;
    uint64_t written = spool.stream_len + spool.len;
    if (!mlz__g.min_free || atomic_load(&mlz__g.c.disk_low_stops) ||
        (checked_at != UINT64_MAX && written - checked_at < DISK_CHECK_BYTES))
        return;
    checked_at = written;
    struct statvfs sv;
    if (fstatvfs(spool.fd, &sv)) return;
    /* The default is at most 5% of the file system: a small /tmp still
     * records, and a large disk keeps 512 MiB. */
    uint64_t floor = mlz__g.min_free, size = (uint64_t)sv.f_blocks * sv.f_frsize;
    if (!mlz__g.min_free_set && floor > size / 20) floor = size / 20;
    if ((uint64_t)sv.f_bavail * sv.f_frsize >= floor) return;
    atomic_store(&mlz__g.active_alloc, 0);
    atomic_store(&mlz__g.c.disk_low_stops, 1);
    mlz__err_line("memlyze: the spool's file system is almost full: new allocations are no longer recorded\n");
}

/* Overload: since the last round, a push had to wait for room or was
 * given up, so events come faster than this thread writes them. The sampling rate doubles for the rest of the session (threads
 * follow it through mlz_sampler_follow, which keeps the weights unbiased),
 * at most once per RAISE_GAP_NS so that threads take a sample each at the
 * new rate before the next look, and at most MEMLYZE_RATE_SHIFT_MAX times.
 * Exact mode never raises: every allocation is what was asked for, so its
 * threads wait instead. */
static uint64_t trouble_seen, raised_at;

static void raise_rate_if_behind(uint64_t now)
{
    uint64_t trouble = atomic_load_explicit(&mlz__g.c.ring_drops, memory_order_relaxed) +
                       atomic_load_explicit(&mlz__g.c.ring_waits, memory_order_relaxed);
    if (mlz__g.rate <= 1 || trouble == trouble_seen) return;
    trouble_seen = trouble;
    unsigned k = (unsigned)atomic_load(&mlz__g.c.rate_shift);
    if (k >= MEMLYZE_RATE_SHIFT_MAX || (raised_at && now - raised_at < RAISE_GAP_NS) ||
        mlz__g.rate > (UINT64_MAX >> (k + 1)))
        return;
    raised_at = now;
    atomic_store(&mlz__g.c.rate_shift, k + 1);
}

static void *drain_main(void *arg)
{
    unsigned gen = (unsigned)(uintptr_t)arg;
    mlz__tls.s.in_hook = MLZ_HOOK_OWN;   /* our own allocations are never sampled */
    /* Named, so the injector recognises it (info.h). */
    prctl(PR_SET_NAME, MEMLYZE_DRAIN_THREAD_NAME, 0, 0, 0);
    if (mlz__g.drain_nice_set && setpriority(PRIO_PROCESS, 0, mlz__g.drain_nice)) {}
    sigset_t all;
    sigfillset(&all);
    /* SETMASK, not BLOCK: the thread that created us may have been borrowed
     * by the injector with glibc's own signals blocked; glibc leaves those
     * (SIGCANCEL, SIGSETXID) out of a full set, so this unblocks them. */
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    unsigned round = 0;
    long period = mlz__g.rate <= 1 ? DRAIN_BUSY_NS : DRAIN_PERIOD_NS;
    uint32_t seen = mlz_waker_seen(&flush_wake);
    while (atomic_load(&drain_gen) == gen) {
        /* A sleep that a flush request (an exec waiting) or a half-full
         * ring ends at once, also one made during the last round: `seen`
         * was read before it. The check catches a request made earlier. */
        if (!period) sched_yield();
        else if (atomic_load(&flush_req) == atomic_load(&flush_done))
            mlz_waker_wait(&flush_wake, seen, period);
        seen = mlz_waker_seen(&flush_wake);      /* before this round reads the rings */
        uint64_t fr = atomic_load(&flush_req);   /* before d: covers what was pushed */
        if (atomic_load(&drain_gen) != gen) break;   /* detached while asleep: its memory may be gone */
        if (mlz_modtab_changed()) mlz_modtab_refresh();
        mlz_clock_tick(&mlz__g.clock);
        uint64_t d = mlz__now_ns();
        write_modules(to_us(d));
        write_note(to_us(d));
        /* A ring an eighth full after a period: come back sooner; half
         * full (threads may be waiting for room): at once. */
        uint64_t fullest = drain_round(d);
        sum_counters();
        raise_rate_if_behind(d);
        check_disk_floor();
        period = fullest > ring_size / 2 ? 0
               : mlz__g.rate <= 1 || fullest > ring_size / 8 ? DRAIN_BUSY_NS : DRAIN_PERIOD_NS;
        if (fr != atomic_load(&flush_done)) {
            if (mlz_writer_end_block(&spool))
                atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
            atomic_store(&flush_done, fr);
            mlz_waker_wake(&flush_wake);           /* the waiter sleeps on it too */
        }
        if (++round % 100 == 0) {
            reclaim_rings();
            /* What the process did up to a moment ago is on disk even if it
             * never reaches the destructor (killed, or exec'd while
             * attached: no exec hook then). */
            if (fr == atomic_load(&flush_done) && mlz_writer_end_block(&spool))
                atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
        }
    }
    return NULL;
}

static void build_meta(size_t *len)
{
    static char cmdline[4096], exe[4096];
    mlz_jw w;
    mlz_jw_init(&w, meta_buf, sizeof meta_buf);
    mlz_jw_obj(&w, NULL);
    mlz_jw_str(&w, "kind", "spool");
    mlz_jw_str(&w, "memlyze", "1");
    mlz_jw_u64(&w, "rate", mlz__g.rate);
    mlz_jw_i64(&w, "pid", mlz__g.pid);
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = 0;
    mlz_jw_str(&w, "exe", exe);
    size_t n = read_file("/proc/self/cmdline", cmdline, sizeof cmdline);
    mlz_jw_arr(&w, "cmdline");
    for (size_t i = 0; i < n;) {
        size_t l = strnlen(cmdline + i, n - i);
        mlz_jw_strn(&w, NULL, cmdline + i, l);
        i += l + 1;
    }
    mlz_jw_end(&w);
    mlz_jw_str(&w, "clock", "realtime");
    mlz_jw_str(&w, "unwind", mlz__g.unwinder == MLZ_UNWIND_FP ? "fp" : "dwarf");
    mlz__exec_meta(&w);
    mlz_jw_obj(&w, "stack_traces");
    mlz_jw_end(&w);
    mlz_jw_obj(&w, "files");
    mlz_jw_end(&w);
    mlz_jw_obj(&w, "functions");
    mlz_jw_idkey_str(&w, 0, "memlyze:start");
    mlz_jw_idkey_str(&w, 1, "memlyze:stop");
    for (unsigned k = 0; mlz__g.rate > 1 && k <= MEMLYZE_RATE_SHIFT_MAX; k++) {
        char name[48];
        snprintf(name, sizeof name, MLZ_RATE_MARKER "%llu", (unsigned long long)(mlz__g.rate << k));
        mlz_jw_idkey_str(&w, RATE_MARKER_ID + k, name);
    }
    mlz_jw_end(&w);
    mlz_jw_end(&w);
    *len = mlz_jw_ok(&w) == 0 ? w.len : 0;
}

int mlz__drain_start(void)
{
    /* Pages of a ring become resident as it wraps: 128 KiB per sampling
     * thread, 64 KiB per thread in exact mode, where the push that makes a
     * ring half full wakes the drain (rings of 8192 records kept 2 MB
     * resident over 8 threads, for no speed). */
    ring_size = mlz__g.rate <= 1 ? RING_MAX / 2 : RING_MAX;
    detect_prefetchw();
    atomic_store(&mlz__g.c.rate_shift, 0);
    /* Counters count for the process (memlyze_info); a trace reports its
     * own session's, from here on (write_counters). The disk check starts
     * over with the session. */
    sum_counters();
    atomic_store(&mlz__g.c.disk_low_stops, 0);
    session_base = (session_counts){
        atomic_load(&mlz__g.c.samples), atomic_load(&mlz__g.c.frees_tracked),
        atomic_load(&mlz__g.c.events_written), atomic_load(&mlz__g.c.ring_drops),
        atomic_load(&mlz__g.c.no_ring), atomic_load(&mlz__g.c.frees_lost),
        atomic_load(&mlz__g.c.reentrant), atomic_load(&mlz__g.c.handler_allocs), atomic_load(&mlz__g.c.spool_errors),
        atomic_load(&mlz__g.c.ring_waits),
    };
    spool_shift = 0;
    trouble_seen = atomic_load(&mlz__g.c.ring_drops) + atomic_load(&mlz__g.c.ring_waits);
    raised_at = 0;
    if (!stack_written) {
        void *m = mmap(NULL, MLZ_STACKTAB_DEFAULT_MAX / 8, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return -1;
        stack_written = m;
    }
    memset(stack_written, 0, MLZ_STACKTAB_DEFAULT_MAX / 8);
    modtab_gen = UINT64_MAX;
    size_t ml;
    build_meta(&ml);
    if (!ml) return -1;
    uint64_t now = mlz__now_ns();
    mlz_writer_opts o = { .start_us = to_us(now), .meta = meta_buf, .meta_len = ml, .mode = 0600,
                          .buf = spool_buf, .buf_size = sizeof spool_buf, .replace = 1,
                          .keep_on_error = 1 };   /* a full disk keeps what was written */
    if (mlz_writer_open(&spool, mlz__g.spool_path, &o)) return -1;
    truncated_written = 0;
    spool_open = 1;
    write_modules(o.start_us);
    mlz_writer_marker(&spool, o.start_us, 0);
    unsigned gen = atomic_fetch_add(&drain_gen, 1) + 1;
    /* The drain thread's own start-up allocates (its stack bookkeeping):
     * the guard makes those pass through. */
    uint32_t g = mlz__tls.s.in_hook;
    mlz__tls.s.in_hook = MLZ_HOOK_OWN;
    /* Born with every signal blocked: with the creator's mask, a signal the
     * program blocks in its threads (for sigwait, signalfd) could be
     * delivered to the new thread before it blocks them itself, and kill. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&drain_thread, NULL, drain_main, (void *)(uintptr_t)gen);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    mlz__tls.s.in_hook = g;
    if (rc) { mlz_writer_abort(&spool); spool_open = 0; return -2; }
    atomic_store(&drain_running, 1);
    return 0;
}

/* The payload's statistics, as a JSON object in a COUNTERS record at the
 * end of the spool; finalize puts it into the trace's metadata. Those the
 * process accumulates over sessions count since this session's start. */
static void write_counters(uint64_t t_us)
{
    static char buf[2048];
    mlz_jw w;
    mlz_jw_init(&w, buf, sizeof buf);
    mlz_jw_obj(&w, NULL);
#define C(name, v) mlz_jw_u64(&w, name, (uint64_t)(v))
#define S(name) mlz_jw_u64(&w, #name, (uint64_t)(atomic_load(&mlz__g.c.name) - session_base.name))
    S(samples);
    S(frees_tracked);
    S(events_written);
    S(ring_drops);
    S(no_ring);
    S(frees_lost);
    S(reentrant);
    S(handler_allocs);
    S(spool_errors);
    C("disk_low_stops", mlz__g.c.disk_low_stops);
    S(ring_waits);
    C("rate_shift", mlz__g.c.rate_shift);
    C("map_capacity", mlz__g.map.mask + 1);
    C("map_full_drops", mlz__g.map.full_drops);
    C("map_death_during_birth", mlz__g.map.death_during_birth);
    C("map_stale_replaced", mlz__g.map.stale_replaced);
    C("map_max_probe", mlz__g.map.max_probe);
    mlz_stacktab_stats ss;
    mlz_stacktab_get_stats(&mlz__g.stacks, &ss);
    C("stacks", ss.ids);
    C("stacks_truncated", ss.truncated);
    C("stack_bytes", ss.bytes_used);
    C("bloom_saturation_permille", (uint64_t)(mlz_bloom_saturation(&mlz__g.bloom) * 1000));
    C("bloom_stuck_cells", mlz__g.bloom.stuck);
    mlz_unwind_stats us;
    mlz_unwind_get_stats(&us);
    C("unwind_dwarf_walks", us.walks);
    C("unwind_no_module", us.no_module);
    C("unwind_bad_frame", us.bad_frame);
#undef C
#undef S
    mlz_jw_end(&w);
    if (mlz_jw_ok(&w) == 0) mlz_writer_ext(&spool, MLZ_EV_COUNTERS, t_us, buf, w.len);
}

/* A detach often runs on the drain thread itself (the injector borrows it
 * idle: events.c's loop is not mid-round) and waits there for the threads
 * still in a sample path, one of which may wait for room in its ring:
 * nobody else would empty it, and that thread would stall for a second
 * and lose its event. */
void mlz__drain_assist(void)
{
    if (spool_open && atomic_load(&drain_running) && pthread_equal(pthread_self(), drain_thread))
        drain_round(mlz__now_ns());
}

void mlz__drain_stop(void)
{
    if (atomic_exchange(&drain_running, 0)) {
        atomic_fetch_add(&drain_gen, 1);
        if (pthread_equal(pthread_self(), drain_thread)) pthread_detach(drain_thread);
        else pthread_join(drain_thread, NULL);
    }
    if (!spool_open) return;
    /* A library loaded since the last round (the drain looks every 10 ms):
     * finalize can name the pcs in it. */
    if (mlz_modtab_changed()) mlz_modtab_refresh();
    uint64_t d = mlz__now_ns();
    write_modules(to_us(d));
    drain_round(UINT64_MAX);
    write_note(to_us(d));
    sum_counters();
    write_counters(to_us(d));
    mlz_writer_marker(&spool, to_us(d), 1);
    if (mlz_writer_close(&spool))
        atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
    spool_open = 0;
}

int mlz__drain_flush(void)
{
    if (!atomic_load(&drain_running)) return -1;
    uint64_t want = atomic_fetch_add(&flush_req, 1) + 1;
    mlz_waker_wake(&flush_wake);
    /* Bounded by time, not by wake-ups: pushes of busy threads wake this
     * word too. */
    uint64_t t0 = mlz__now_ns();
    while (atomic_load(&flush_done) < want && atomic_load(&drain_running) &&
           mlz__now_ns() - t0 < FLUSH_WAIT_NS) {
        uint32_t seen = mlz_waker_seen(&flush_wake);
        if (atomic_load(&flush_done) < want) mlz_waker_wait(&flush_wake, seen, 1000000);
    }
    return atomic_load(&flush_done) >= want ? 0 : -1;
}

void mlz__drain_forget(void)
{
    /* In a fork child the drain thread does not exist; the parent owns the
     * spool (our copy of its descriptor is closed without sealing). */
    atomic_store(&drain_running, 0);
    if (spool_open) { mlz_writer_forget(&spool); spool_open = 0; }
    for (uint32_t i = 0; i < atomic_load(&nrings); i++) {
        atomic_store(&rings[i].owner, 0);
        atomic_store(&rings[i].head, 0);
        atomic_store(&rings[i].tail, 0);
        /* Threads that were inside a sample path at the fork are not here. */
        atomic_store(&rings[i].in_flight, 0);
    }
    atomic_store(&mlz__g.c.in_flight, 0);
}

void mlz__drain_release(void)
{
    /* No ring is claimed from now on (ring_first_use): a hook reached
     * after the detach through a pointer the program kept would map a new
     * chunk nobody releases. */
    ring_size = 0;
    /* Every ring, not only those below nrings: one claimed while a detach
     * ran must not keep an owner into the next session. */
    chunks_release(&rec_chunks);
    chunks_release(&ucache_chunks);
    for (uint32_t i = 0; i < MAX_RINGS; i++) {
        rings[i].recs = NULL;
        rings[i].ucache = NULL;
        /* The process's totals stay (counters are cumulative). */
        atomic_fetch_add(&samples_shared, rings[i].samples);
        atomic_fetch_add(&frees_shared, rings[i].frees_tracked);
        rings[i].samples = rings[i].frees_tracked = 0;
        rings[i].nstash = 0;
        atomic_store(&rings[i].owner, 0);
        atomic_store(&rings[i].head, 0);
        atomic_store(&rings[i].tail, 0);
    }
    atomic_store(&nrings, 0);
    if (stack_written) munmap(stack_written, MLZ_STACKTAB_DEFAULT_MAX / 8);
    stack_written = NULL;
    /* The spool buffer's pages are ours alone again: hand them back too. */
    madvise(spool_buf, sizeof spool_buf, MADV_DONTNEED);
}
