/*
 * events.c - from the hooks to the spool file.
 *
 * Each thread that samples claims a ring (single producer: that thread;
 * single consumer: the drain thread). Pushing is two relaxed loads, a copy
 * and a release store; a full ring drops the event and counts it, so a
 * target thread never waits for I/O.
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

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_RINGS 1024
#define DRAIN_PERIOD_NS (10 * 1000 * 1000)

typedef struct mlz_ring {
    _Alignas(64) _Atomic uint64_t head;   /* written by the owner */
    _Alignas(64) _Atomic uint64_t tail;   /* written by the drain thread */
    _Atomic int32_t owner;                /* tid, 0 = free */
    uint32_t mask;
    mlz_rec *recs;
    /* The owner's DWARF rule cache: per thread (no locking), and it goes
     * with the ring so that exited threads' caches are reused, not leaked. */
    mlz_unwind_cache *ucache;
} mlz_ring;

static mlz_ring rings[MAX_RINGS];
static _Atomic int drain_running;
/* Each drain thread runs while the generation it started with is current:
 * a detach run ON the drain thread (the injector's favourite thread to
 * borrow: it holds nothing) cannot join itself, so it lets the thread end
 * on its own, and a re-attach right after must not revive the old one. */
static _Atomic unsigned drain_gen;
static _Atomic uint32_t nrings;            /* rings ever claimed (high mark) */
static uint32_t ring_size;                 /* records per ring, power of two */

static mlz_ring *claim_ring(int32_t tid)
{
    /* Reuse a ring released by an exited thread, else take a new one. */
    uint32_t n = atomic_load_explicit(&nrings, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        int32_t zero = 0;
        if (atomic_load_explicit(&rings[i].owner, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&rings[i].owner, &zero, tid))
            return &rings[i];
    }
    for (;;) {
        n = atomic_load_explicit(&nrings, memory_order_relaxed);
        if (n >= MAX_RINGS) return NULL;
        mlz_ring *r = &rings[n];
        int32_t zero = 0;
        if (!atomic_compare_exchange_strong(&r->owner, &zero, tid)) continue;
        if (!r->recs) {
            void *m = mmap(NULL, (size_t)ring_size * sizeof(mlz_rec), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) { atomic_store(&r->owner, 0); return NULL; }
            r->recs = m;
            r->mask = ring_size - 1;
        }
        /* Publish the ring to the drain thread only once it is usable. */
        uint32_t want = n;
        atomic_compare_exchange_strong_explicit(&nrings, &want, n + 1, memory_order_release,
                                                memory_order_relaxed);
        return r;
    }
}

/* This thread's ring, claimed on first use; NULL when none is left. */
static mlz_ring *my_ring(mlz_tls *t)
{
    mlz_ring *r = t->ring;
    /* A thread that has only freed so far has not been through thread_init:
     * it needs its tid before it can own a ring (0 means "free ring"). */
    if (mlz_unlikely(!t->tid)) t->tid = (int32_t)syscall(SYS_gettid);
    if (mlz_likely(r && atomic_load_explicit(&r->owner, memory_order_relaxed) == t->tid)) return r;
    if (!ring_size) return NULL;
    return t->ring = claim_ring(t->tid);
}

mlz_unwind_cache *mlz__unwind_cache(void)
{
    mlz_ring *r = my_ring(&mlz__tls);
    if (!r) return NULL;
    if (!r->ucache) {
        void *m = mmap(NULL, sizeof(mlz_unwind_cache), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return NULL;
        r->ucache = m;
    }
    return r->ucache;
}

void mlz__push(uint8_t type, uint64_t ts_ns, uint64_t addr, uint64_t size, uint32_t stack_id)
{
    mlz_tls *t = &mlz__tls;
    mlz_ring *r = my_ring(t);
    if (mlz_unlikely(!r)) {
        atomic_fetch_add_explicit(&mlz__g.c.no_ring, 1, memory_order_relaxed);
        return;
    }
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (h - atomic_load_explicit(&r->tail, memory_order_acquire) > r->mask) {
        /* Sampled mode drops (the thread must not wait). Exact mode promises
         * every event, so it yields to the drain thread for a bounded time. */
        int spins = mlz__g.rate <= 1 && atomic_load_explicit(&drain_running, memory_order_relaxed) ? 200000 : 0;
        while (spins-- > 0 && h - atomic_load_explicit(&r->tail, memory_order_acquire) > r->mask)
            sched_yield();
        if (h - atomic_load_explicit(&r->tail, memory_order_acquire) > r->mask) {
            atomic_fetch_add_explicit(&mlz__g.c.ring_drops, 1, memory_order_relaxed);
            return;
        }
    }
    mlz_rec *e = &r->recs[h & r->mask];
    e->ts_ns = ts_ns;
    e->addr = addr;
    e->size = size;
    e->stack_id = stack_id;
    e->type = type;
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
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

static void write_modules(uint64_t now_us)
{
    unsigned count;
    uint64_t gen;
    const mlz_module *mods = mlz_modtab_modules(&count, &gen);
    if (gen == modtab_gen) return;
    modtab_gen = gen;
    for (unsigned i = 0; i < count; i++) {
        static uint8_t p[MLZ_SPOOL_MODULE_MAX];
        size_t n = mlz_spool_module(p, mods[i].start, mods[i].end - mods[i].start, mods[i].load_bias,
                                  mods[i].build_id, mods[i].build_id_len, mods[i].path);
        if (mlz_writer_ext(&spool, MLZ_EV_MODULE, now_us, p, n))
            atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
    }
}

static void write_stack(uint32_t id, uint64_t t_us)
{
    if (id == MLZ_STACK_NONE || id == MLZ_STACK_TRUNCATED || id >= MLZ_STACKTAB_DEFAULT_MAX) return;
    if (stack_written[id / 8] & (1u << (id % 8))) return;
    const uint64_t *pcs;
    unsigned depth;
    if (!mlz_stacktab_get(&mlz__g.stacks, id, &pcs, &depth)) return;
    uint8_t p[MLZ_SPOOL_STACK_MAX(MLZ_MAX_FRAMES)];
    size_t n = mlz_spool_stack(p, id, pcs, depth);
    if (mlz_writer_ext(&spool, MLZ_EV_STACK_RAW, t_us, p, n) == 0)
        stack_written[id / 8] |= (uint8_t)(1u << (id % 8));
}

/* Allocations whose stack could not be kept (table full) name this spool
 * id, written once as an empty stack: every ALLOC names a STACK_RAW. */
#define SPOOL_TRUNCATED_ID MLZ_STACKTAB_DEFAULT_MAX
static int truncated_written;

static void write_rec(const mlz_rec *e, int32_t tid)
{
    uint64_t t = to_us(e->ts_ns);
    int rc;
    if (e->type == 0) {
        uint64_t id = e->stack_id;
        if (id == MLZ_STACK_NONE || id >= MLZ_STACKTAB_DEFAULT_MAX) {
            id = SPOOL_TRUNCATED_ID;
            if (!truncated_written) {
                uint8_t p[MLZ_SPOOL_STACK_MAX(0)];
                size_t n = mlz_spool_stack(p, id, NULL, 0);
                truncated_written = mlz_writer_ext(&spool, MLZ_EV_STACK_RAW, t, p, n) == 0;
            }
        } else {
            write_stack((uint32_t)id, t);
        }
        rc = mlz_writer_alloc(&spool, t, e->addr, e->size, id, (uint16_t)tid);
    } else {
        rc = mlz_writer_free(&spool, t, e->addr);
    }
    if (rc) atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
    else atomic_fetch_add_explicit(&mlz__g.c.events_written, 1, memory_order_relaxed);
}

/* One round: merge every record stamped <= limit from all rings. */
static void drain_round(uint64_t limit)
{
    uint32_t n = atomic_load_explicit(&nrings, memory_order_acquire);
    for (;;) {
        mlz_ring *best = NULL;
        const mlz_rec *be = NULL;
        for (uint32_t i = 0; i < n; i++) {
            mlz_ring *r = &rings[i];
            if (!r->recs) continue;
            uint64_t tl = atomic_load_explicit(&r->tail, memory_order_relaxed);
            if (tl == atomic_load_explicit(&r->head, memory_order_acquire)) continue;
            const mlz_rec *e = &r->recs[tl & r->mask];
            if (e->ts_ns <= limit && (!be || e->ts_ns < be->ts_ns)) { best = r; be = e; }
        }
        if (!best) return;
        mlz_rec copy = *be;
        write_rec(&copy, atomic_load_explicit(&best->owner, memory_order_relaxed));
        atomic_store_explicit(&best->tail, atomic_load_explicit(&best->tail, memory_order_relaxed) + 1,
                              memory_order_release);
    }
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

static void *drain_main(void *arg)
{
    unsigned gen = (unsigned)(uintptr_t)arg;
    mlz__tls.s.in_hook = 1;     /* our own allocations are never sampled */
    /* Named, so the injector recognises it (info.h). */
    prctl(PR_SET_NAME, MEMLYZE_DRAIN_THREAD_NAME, 0, 0, 0);
    sigset_t all;
    sigfillset(&all);
    /* SETMASK, not BLOCK: the thread that created us may have been borrowed
     * by the injector with glibc's own signals blocked; glibc leaves those
     * (SIGCANCEL, SIGSETXID) out of a full set, so this unblocks them. */
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    unsigned round = 0;
    while (atomic_load(&drain_gen) == gen) {
        struct timespec ts = { 0, mlz__g.rate <= 1 ? DRAIN_PERIOD_NS / 10 : DRAIN_PERIOD_NS };
        nanosleep(&ts, NULL);
        if (atomic_load(&drain_gen) != gen) break;   /* detached while asleep: its memory may be gone */
        if (mlz_modtab_changed()) mlz_modtab_refresh();
        uint64_t d = mlz__now_ns();
        write_modules(to_us(d));
        write_note(to_us(d));
        drain_round(d);
        if (++round % 100 == 0) reclaim_rings();
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
    mlz_jw_obj(&w, "stack_traces");
    mlz_jw_end(&w);
    mlz_jw_obj(&w, "files");
    mlz_jw_end(&w);
    mlz_jw_obj(&w, "functions");
    mlz_jw_idkey_str(&w, 0, "memlyze:start");
    mlz_jw_idkey_str(&w, 1, "memlyze:stop");
    mlz_jw_end(&w);
    mlz_jw_end(&w);
    *len = mlz_jw_ok(&w) == 0 ? w.len : 0;
}

int mlz__drain_start(void)
{
    ring_size = mlz__g.rate <= 1 ? 1u << 16 : 1u << 10;
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
                          .buf = spool_buf, .buf_size = sizeof spool_buf, .replace = 1 };
    if (mlz_writer_open(&spool, mlz__g.spool_path, &o)) return -1;
    truncated_written = 0;
    spool_open = 1;
    write_modules(o.start_us);
    mlz_writer_marker(&spool, o.start_us, 0);
    unsigned gen = atomic_fetch_add(&drain_gen, 1) + 1;
    /* The drain thread's own start-up allocates (its stack bookkeeping):
     * the guard makes those pass through. */
    uint32_t g = mlz__tls.s.in_hook;
    mlz__tls.s.in_hook = 1;
    int rc = pthread_create(&drain_thread, NULL, drain_main, (void *)(uintptr_t)gen);
    mlz__tls.s.in_hook = g;
    if (rc) { mlz_writer_abort(&spool); spool_open = 0; return -1; }
    atomic_store(&drain_running, 1);
    return 0;
}

/* The payload's statistics, as a JSON object in a COUNTERS record at the
 * end of the spool; finalize puts it into the trace's metadata. */
static void write_counters(uint64_t t_us)
{
    static char buf[2048];
    mlz_jw w;
    mlz_jw_init(&w, buf, sizeof buf);
    mlz_jw_obj(&w, NULL);
#define C(name, v) mlz_jw_u64(&w, name, (uint64_t)(v))
    C("samples", mlz__g.c.samples);
    C("frees_tracked", mlz__g.c.frees_tracked);
    C("events_written", mlz__g.c.events_written);
    C("ring_drops", mlz__g.c.ring_drops);
    C("no_ring", mlz__g.c.no_ring);
    C("reentrant", mlz__g.c.reentrant);
    C("spool_errors", mlz__g.c.spool_errors);
    C("map_capacity", mlz__g.map.mask + 1);
    C("map_inserts", mlz__g.map.inserts);
    C("map_removes", mlz__g.map.removes);
    C("map_full_drops", mlz__g.map.full_drops);
    C("map_death_during_birth", mlz__g.map.death_during_birth);
    C("map_tombstones_recycled", mlz__g.map.tombstones_recycled);
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
    mlz_jw_end(&w);
    if (mlz_jw_ok(&w) == 0) mlz_writer_ext(&spool, MLZ_EV_COUNTERS, t_us, buf, w.len);
}

void mlz__drain_stop(void)
{
    if (atomic_exchange(&drain_running, 0)) {
        atomic_fetch_add(&drain_gen, 1);
        if (pthread_equal(pthread_self(), drain_thread)) pthread_detach(drain_thread);
        else pthread_join(drain_thread, NULL);
    }
    if (!spool_open) return;
    uint64_t d = mlz__now_ns();
    write_modules(to_us(d));
    drain_round(UINT64_MAX);
    write_note(to_us(d));
    write_counters(to_us(d));
    mlz_writer_marker(&spool, to_us(d), 1);
    if (mlz_writer_close(&spool))
        atomic_fetch_add_explicit(&mlz__g.c.spool_errors, 1, memory_order_relaxed);
    spool_open = 0;
}

void mlz__drain_forget(void)
{
    /* In a fork child the drain thread does not exist; the parent owns the
     * spool (our copy of its descriptor is closed without sealing). */
    atomic_store(&drain_running, 0);
    if (spool_open) { close(spool.fd); spool.fd = -1; spool_open = 0; }
    for (uint32_t i = 0; i < atomic_load(&nrings); i++) {
        atomic_store(&rings[i].owner, 0);
        atomic_store(&rings[i].head, 0);
        atomic_store(&rings[i].tail, 0);
    }
}

void mlz__drain_release(void)
{
    uint32_t n = atomic_load(&nrings);
    for (uint32_t i = 0; i < n; i++) {
        if (rings[i].recs) munmap(rings[i].recs, (size_t)(rings[i].mask + 1) * sizeof(mlz_rec));
        if (rings[i].ucache) munmap(rings[i].ucache, sizeof(mlz_unwind_cache));
        rings[i].recs = NULL;
        rings[i].ucache = NULL;
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
