/*
 * snapshot.c - the live sampled heap of a profiled process, read from the
 * outside: no code runs in the target and none of its threads is paused.
 *
 * The payload exports `memlyze_info` (payload/info.h): where its heap map
 * and stack table are and how they are laid out. The proc library finds the
 * payload and that symbol as every memlyze tool does (proc/proc.h: the very
 * file the process mapped, or its image in memory), we copy the tables with
 * process_vm_readv while the program keeps running, and keep only entries
 * that are consistent: a published pointer whose check word matches its
 * fields (an entry being inserted or removed while we copy fails the check
 * and is read again, up to a few times, then skipped and counted). The
 * stacks are symbolized like finalize does (mlz_symbolized_meta) and the
 * entries written straight into a .mlyze of kind "snapshot".
 */
#include "errbuf.h"
#include "snapshot.h"
#include "finalize.h"
#include "heapmap.h"
#include "info.h"
#include "jsonw.h"
#include "mlz_format.h"
#include "proc.h"
#include "varint.h"
#include "worker.h"

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Function ids of the snapshot's markers: 0 ends the file, and
 * SNAPSHOT_RATE_MARKER_ID + k names the rate << k (see mlz_live_meta). */
#define SNAPSHOT_RATE_MARKER_ID 1

/* The arrays of a snapshot of 10^6 samples are tens of MB, touched once:
 * in 4 KiB pages that was 30k page faults, a quarter of the snapshot's time.
 * Transparent huge pages (where the system grants them on request) take
 * 512 times fewer. The advice is all: p is freed with free(). */
static void *huge_pages(void *p, size_t bytes)
{
    const uintptr_t huge = 2u << 20;
    if (p && bytes >= 2 * huge) {
        uintptr_t lo = ((uintptr_t)p + huge - 1) & ~(huge - 1), hi = ((uintptr_t)p + bytes) & ~(huge - 1);
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);   /* refused: no harm */
    }
    return p;
}

static void *big_alloc(size_t bytes) { return huge_pages(malloc(bytes ? bytes : 1), bytes); }

/* Entries in birth order (the event stream needs non-negative deltas, in
 * microseconds). Each entry becomes one 64-bit key, (microseconds since
 * the first birth) << b | index, with b bits for the index; an LSD radix
 * sort orders the keys on their time bits, 11 a pass and only as many
 * passes as the largest time needs (3 for 16 s of births); one gather then
 * builds the new array that replaces *v. Stable: births of one microsecond
 * keep their slot order. For 10^6 entries it is ~10x faster than qsort,
 * and 8-byte keys move half the memory (and fault half the pages) of
 * (time, index) pairs. Births too far apart for the time to share a word
 * with the index (half a year with 10^6 entries) take qsort. */
typedef struct { uint64_t t; uint32_t i; } tpair;

static int by_time(const void *x, const void *y)
{
    const tpair *a = x, *b = y;
    return a->t != b->t ? (a->t > b->t ? 1 : -1) : (a->i > b->i) - (a->i < b->i);
}

static int sort_pairs(snap_obj *v, size_t n, uint64_t mono2real, uint32_t *order)
{
    tpair *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) return -1;
    for (size_t i = 0; i < n; i++) p[i] = (tpair){ (v[i].time_ns + mono2real) / 1000, (uint32_t)i };
    qsort(p, n, sizeof *p, by_time);
    for (size_t i = 0; i < n; i++) order[i] = p[i].i;
    free(p);
    return 0;
}

int mlz_live_sort_by_birth(mlz_live_obj **v, size_t n, uint64_t mono2real)
{
    uint64_t *a = big_alloc(n * sizeof *a), *b = big_alloc(n * sizeof *b);
    if (!a || !b) { free(a); free(b); return -1; }
    /* The microseconds the writer will write: (time_ns + mono2real) / 1000. */
    uint64_t t0 = UINT64_MAX, hi = 0;
    for (size_t i = 0; i < n; i++) {
        a[i] = ((*v)[i].time_ns + mono2real) / 1000;
        if (a[i] < t0) t0 = a[i];
    }
    for (size_t i = 0; i < n; i++) {
        a[i] -= t0;
        if (a[i] > hi) hi = a[i];
    }
    unsigned ib = 0, tb = 0;
    while (ib < 32 && (n - 1) >> ib) ib++;
    while (tb < 64 && hi >> tb) tb++;
    if (n && ib + tb > 64) {
        if (sort_pairs(*v, n, mono2real, (uint32_t *)b)) { free(a); free(b); return -1; }
    } else {
        uint64_t imask = ib ? (1ull << ib) - 1 : 0;
        for (size_t i = 0; i < n; i++) a[i] = a[i] << ib | i;
        for (unsigned shift = ib; shift < ib + tb; shift += 11) {
            size_t count[2049] = { 0 };
            for (size_t i = 0; i < n; i++) count[((a[i] >> shift) & 2047) + 1]++;
            for (int d = 0; d < 2048; d++) count[d + 1] += count[d];
            for (size_t i = 0; i < n; i++) b[count[(a[i] >> shift) & 2047]++] = a[i];
            uint64_t *x = a; a = b; b = x;
        }
        /* a holds the sorted keys; b is free to take the order */
        for (size_t i = 0; i < n; i++) ((uint32_t *)b)[i] = (uint32_t)(a[i] & imask);
    }
    const uint32_t *order = (const uint32_t *)b;   /* the index of the k-th oldest entry */
    snap_obj *out = big_alloc(n * sizeof *out);
    if (!out) { free(a); free(b); return -1; }
    for (size_t i = 0; i < n; i++) out[i] = (*v)[order[i]];
    free(*v);
    *v = out;
    free(a);
    free(b);
    return 0;
}

static int get_u64(pid_t pid, uint64_t addr, uint64_t *v) { return mlz_proc_read(pid, addr, v, 8); }

/* Reads one entry field by field per the info's offsets into *e. */
static void decode_entry(const struct memlyze_info *in, const uint8_t *raw, mlz_heap_entry *e)
{
    uint64_t key;
    memset(e, 0, sizeof *e);
    memcpy(&key, raw + in->entry_key, 8);
    atomic_init(&e->key, key);
    memcpy(&e->size, raw + in->entry_size_field, 8);
    memcpy(&e->stack_id, raw + in->entry_stack_id, 4);
    memcpy(&e->tid, raw + in->entry_tid_shift, 4);
    memcpy(&e->time_ns, raw + in->entry_time_ns, 8);
    memcpy(&e->seq, raw + in->entry_seq, 8);
    memcpy(&e->check, raw + in->entry_check, 8);
}

/* The payload's globals, read once through its descriptor. */
typedef struct live_globals {
    int ready;
    uint32_t next_id;
    uint64_t rate, mono2real, session, slots_addr, mask, recs, frames;
} live_globals;

/* Whether memlyze-attach's record (state) names another process than the
 * one now under pid: its start time differs (the pid was reused). */
static int record_of_earlier(pid_t via, pid_t pid)
{
    long long at;
    unsigned long long ticks = 0, now = mlz_proc_start_ticks(pid);
    return !mlz_proc_attach_record(via, pid, &at, &ticks) && ticks && now && ticks != now;
}

/* Finds the payload in pid and copies its descriptor. 0, or the return
 * value of mlz_live_read with the reason in err. */
static int find_payload(pid_t pid, pid_t via, struct memlyze_info *in, char *err, size_t errlen)
{
    mlz_proc_module pay;
    if (kill(pid, 0) && errno == ESRCH) return errbuf_set(err, errlen, "no process %d", (int)pid) - 1;
    int prc = mlz_proc_payload_find(via, &pay);
    if (prc == MLZ_PROC_ENOENT) {
        /* memlyze-attach's record is there but the payload is not: only an
         * exec drops it (a detached payload stays mapped, pass-through). */
        char state[128];
        snprintf(state, sizeof state, "/proc/%d/root/tmp/memlyze-%d/state", (int)via, (int)pid);
        if (access(state, F_OK) == 0 && record_of_earlier(via, pid))
            return errbuf_set(err, errlen, "memlyze is not loaded in process %d; the memlyze record for pid %d is of an "
                        "earlier process that exited while attached (memlyze-detach %d writes its trace)",
                        (int)pid, (int)pid, (int)pid) - 1;
        if (access(state, F_OK) == 0)
            return errbuf_set(err, errlen, "process %d has exec'd since memlyze-attach: the payload went with its old image "
                        "(memlyze-detach %d writes the trace recorded up to the exec)", (int)pid, (int)pid) - 1;
        return errbuf_set(err, errlen, "memlyze is not loaded in process %d (attach first)", (int)pid) - 1;
    }
    if (prc) {
        if (kill(pid, 0) && errno == ESRCH) return errbuf_set(err, errlen, "no process %d", (int)pid) - 1;
        return errbuf_set(err, errlen, "%s", mlz_proc_error());
    }
    uint64_t info_addr;
    if ((prc = mlz_proc_payload_info(via, &pay, in, &info_addr))) {
        if (prc == MLZ_PROC_EIO)
            return errbuf_set(err, errlen, "cannot read process %d's memory: %s (same user or CAP_SYS_PTRACE needed)", (int)pid,
                        strerror(errno));
        return errbuf_set(err, errlen, "%s", mlz_proc_error());
    }
    return 0;
}

static int read_globals(pid_t pid, const struct memlyze_info *in, live_globals *g, char *err, size_t errlen)
{
    if (!memlyze_info_readable(in))
        return errbuf_set(err, errlen, "process %d runs a payload with a different data layout (version %u); use the matching memlyze",
                          (int)pid, in->version);
    if (mlz_proc_read(pid, in->ready_addr, &g->ready, sizeof g->ready) || get_u64(pid, in->rate_addr, &g->rate) ||
        get_u64(pid, in->mono_to_real_addr, &g->mono2real) || get_u64(pid, in->session_addr, &g->session) ||
        get_u64(pid, in->map_slots_addr, &g->slots_addr) || get_u64(pid, in->map_mask_addr, &g->mask) ||
        get_u64(pid, in->stack_recs_addr, &g->recs) || get_u64(pid, in->stack_frames_addr, &g->frames) ||
        mlz_proc_read(pid, in->stack_next_id_addr, &g->next_id, 4))
        return errbuf_set(err, errlen, "cannot read process %d's memory: %s", (int)pid, strerror(errno));
    if (!g->ready || !g->slots_addr) return errbuf_set(err, errlen, "memlyze is loaded in process %d but not attached", (int)pid) - 1;
    if (g->mask >> in->map_log2_max) return errbuf_set(err, errlen, "implausible heap map size in process %d", (int)pid);
    return 0;
}

/* Still the session the map and stacks were read from: a detach meanwhile
 * frees the stack table (its stacks read as unreadable, every sample would
 * have no frames), a new attach starts other ids. 0, or -2 with err. */
static int same_session(pid_t pid, const struct memlyze_info *in, const live_globals *g, char *err, size_t errlen)
{
    live_globals now = { 0 };
    if (mlz_proc_read(pid, in->ready_addr, &now.ready, sizeof now.ready) || get_u64(pid, in->session_addr, &now.session) ||
        get_u64(pid, in->stack_recs_addr, &now.recs) || get_u64(pid, in->stack_frames_addr, &now.frames))
        return errbuf_set(err, errlen, "process %d went away during the snapshot", (int)pid) - 1;
    if (!now.ready || now.session != g->session || now.recs != g->recs || now.frames != g->frames)
        return errbuf_set(err, errlen, "memlyze was detached from process %d while its heap was read", (int)pid) - 1;
    return 0;
}

/* One consistent entry at slot i (raw is its copy), read again up to three
 * times while it is mid-insert or mid-remove. 1 if e holds a live entry. */
static int settle_entry(pid_t pid, const struct memlyze_info *in, uint64_t at, const uint8_t *raw, mlz_heap_entry *e,
                        snapshot_stats *st)
{
    decode_entry(in, raw, e);
    uint64_t k = atomic_load(&e->key);
    int tries = 0;
    while (!mlz_heap_entry_consistent(e) && tries < 3) {
        uint8_t again[MEMLYZE_RECORD_SIZE_MAX];
        tries++;
        if (mlz_proc_read(pid, at, again, in->entry_size)) break;
        decode_entry(in, again, e);
        k = atomic_load(&e->key);
        if (k == MLZ_HEAP_EMPTY || k == MLZ_HEAP_TOMBSTONE) return 0;
    }
    if (!mlz_heap_entry_consistent(e)) {
        st->skipped++;
        return 0;
    }
    st->retried += tries > 0;
    return 1;
}

/* Entries the scan makes room for at once (512 MiB of address space at
 * most); a bigger map grows the array beyond that as it fills. */
#define MAX_PRESIZED (1u << 24)

/* One scan of the heap map: what it reads and what it found. */
typedef struct map_scan {
    pid_t pid;
    const struct memlyze_info *in;
    const live_globals *g;
    snap_obj *live;
    size_t n, cap;
    snapshot_stats st;               /* its retried and skipped */
    int rc;                          /* 0, -1 out of memory, -2 the map went away */
} map_scan;

/* Copies the slots in 256 KiB pieces while the program runs, keeping only
 * what a snapshot needs of each consistent entry. Most slots are empty:
 * their key is looked at before anything else is decoded.
 *
 * The piece is page-aligned. malloc put it 16 bytes past a page start, 16
 * bytes ahead of the page-aligned slots modulo 4 KiB, and the kernel's copy
 * then ran 3x slower (each load of the source looked to the CPU like it
 * might read a store just made: 4K aliasing): 128 MiB took 75 ms instead
 * of 25 on this machine. A piece that fits the L2 cache is still there
 * when the entries are read. */
#define SCAN_PIECE (256u << 10)

static void scan_map(map_scan *s)
{
    size_t esz = s->in->entry_size, per = SCAN_PIECE / esz;
    void *piece = NULL;
    uint8_t *slots = posix_memalign(&piece, 4096, per * esz) ? NULL : piece;
    size_t cap = (size_t)s->g->mask + 1;
    /* Room for the whole map up front, touched only as entries come:
     * growing by realloc copied the array and faulted its pages again
     * (a fifth of the scan at 10^6 entries). */
    s->cap = cap < MAX_PRESIZED ? cap : MAX_PRESIZED;
    s->live = big_alloc(s->cap * sizeof *s->live);
    if (!slots || !s->live) s->rc = -1;
    for (size_t i = 0; !s->rc && i < cap; i++) {
        if (i % per == 0) {
            size_t cnt = cap - i < per ? cap - i : per;
            if (mlz_proc_read(s->pid, s->g->slots_addr + i * esz, slots, cnt * esz)) {
                s->rc = -2;
                break;
            }
        }
        const uint8_t *raw = slots + (i % per) * esz;
        uint64_t k;
        memcpy(&k, raw + s->in->entry_key, 8);
        if (k == MLZ_HEAP_EMPTY || k == MLZ_HEAP_TOMBSTONE) continue;
        mlz_heap_entry e;
        if (!settle_entry(s->pid, s->in, s->g->slots_addr + i * esz, raw, &e, &s->st)) continue;
        if (e.tid >> MEMLYZE_TID_SHIFT_POS > MEMLYZE_RATE_SHIFT_MAX) {   /* no payload writes that */
            s->st.skipped++;
            continue;
        }
        if (s->n == s->cap) {
            snap_obj *nv = huge_pages(realloc(s->live, 2 * s->cap * sizeof *nv), 2 * s->cap * sizeof *nv);
            if (!nv) { s->rc = -1; break; }
            s->live = nv;
            s->cap *= 2;
        }
        s->live[s->n++] = (snap_obj){ .addr = atomic_load(&e.key), .size = e.size, .time_ns = e.time_ns,
                                      .stack_id = e.stack_id, .tid = e.tid & MEMLYZE_TID_MASK,
                                      .rate_shift = e.tid >> MEMLYZE_TID_SHIFT_POS };
    }
    free(slots);
}

/* The live entries of the whole map, in birth order. (Scanning its two
 * halves on two threads was tried: on two cores, with the target's own
 * threads busy, the median snapshot got slower.) */
static int copy_map(pid_t pid, const struct memlyze_info *in, const live_globals *g, mlz_live_heap *h,
                    char *err, size_t errlen)
{
    map_scan s = { .pid = pid, .in = in, .g = g };
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    scan_map(&s);
    clock_gettime(CLOCK_MONOTONIC, &b);
    uint64_t t0 = (uint64_t)a.tv_sec * 1000000000u + (uint64_t)a.tv_nsec;
    h->read_us = ((uint64_t)b.tv_sec * 1000000000u + (uint64_t)b.tv_nsec - t0) / 1000;
    for (size_t i = 0; i < s.n; i++) h->born_while_read += s.live[i].time_ns > t0;
    h->st.retried += s.st.retried;
    h->st.skipped += s.st.skipped;
    int rc = s.rc;
    if (!rc && mlz_live_sort_by_birth(&s.live, s.n, g->mono2real)) rc = -1;
    if (rc) {
        free(s.live);
        if (rc == -2) return errbuf_set(err, errlen, "process %d went away or unmapped its heap map", (int)pid) - 1;
        return errbuf_set(err, errlen, "out of memory");
    }
    h->obj = s.live;
    h->nobj = h->st.live = s.n;
    return 0;
}

/* The PCs of stack id of the payload's table into pcs (room for 256);
 * its depth, or -1 if it cannot be read. */
static int read_stack(pid_t pid, const struct memlyze_info *in, const live_globals *g, uint64_t id, uint64_t *pcs)
{
    uint8_t rec[256];
    uint32_t ready = 0, depth = 0;
    uint64_t foff = 0;
    if (in->rec_size <= sizeof rec && !mlz_proc_read(pid, g->recs + id * in->rec_size, rec, in->rec_size)) {
        memcpy(&ready, rec + in->rec_ready, 4);
        memcpy(&depth, rec + in->rec_depth, 4);
        memcpy(&foff, rec + in->rec_frames_offset, 8);
    }
    if (ready != 1 || depth > in->max_frames || depth > 256 || mlz_proc_read(pid, g->frames + foff * 8, pcs, depth * 8))
        return -1;
    return (int)depth;
}

/* The stacks the objects name, read once each; ids we cannot read (and 0,
 * "none") share one empty stack. */
static int read_stacks(pid_t pid, const struct memlyze_info *in, const live_globals *g, mlz_live_heap *h)
{
    uint64_t empty_id = (uint64_t)g->next_id + 1;
    size_t cst = 64, nst = 0;
    uint32_t *slot_of = calloc((size_t)g->next_id + 2, sizeof *slot_of);   /* id -> stacks index + 1 */
    mlz_raw_stack *stacks = malloc(cst * sizeof *stacks);
    int rc = slot_of && stacks ? 0 : -1;
    for (size_t i = 0; !rc && i < h->nobj; i++) {
        snap_obj *o = &h->obj[i];
        uint64_t id = o->stack_id, pcs[256];
        if (id == 0 || id >= g->next_id) { o->stack_id = (uint32_t)empty_id; id = empty_id; }
        if (slot_of[id]) continue;
        int depth = id == empty_id ? 0 : read_stack(pid, in, g, id, pcs);
        if (depth < 0) {
            o->stack_id = (uint32_t)empty_id;   /* unreadable: the empty stack */
            h->st.no_stack++;
            if (slot_of[empty_id]) continue;
            id = empty_id;
            depth = 0;
        }
        if (nst == cst) {
            mlz_raw_stack *nv = realloc(stacks, 2 * cst * sizeof *nv);
            if (!nv) { rc = -1; break; }
            stacks = nv;
            cst *= 2;
        }
        stacks[nst] = (mlz_raw_stack){ .id = id, .depth = (uint32_t)depth, .pcs = malloc((depth ? (size_t)depth : 1) * 8) };
        if (!stacks[nst].pcs) { rc = -1; break; }
        memcpy(stacks[nst].pcs, pcs, (size_t)depth * 8);
        slot_of[id] = (uint32_t)++nst;
    }
    free(slot_of);
    h->stacks = stacks;     /* freed with h, also on failure */
    h->nstacks = nst;
    h->empty_id = (uint32_t)empty_id;
    return rc;
}

/* Symbolizing a snapshot is mostly loading the modules' symbols and DWARF
 * (a distribution's debug files are compressed: inflating libc's alone
 * takes ~50 ms). None of that needs the heap map, so a second thread does
 * it while the map is read: for the modules that the stacks of the
 * payload's table lead to, from up to WARM_STACKS of them spread over the
 * table. A module it missed is loaded when a frame needs it, as before.
 * When the map is read first, the thread is told to stop: the caller then
 * waits at most for the module being loaded, never for modules that only
 * old stacks lead to. */
#define WARM_STACKS 4096

typedef struct live_warm {
    pthread_t thread;
    pid_t pid;
    struct memlyze_info in;
    live_globals g;
    const mlz_raw_module *mods;   /* h's: freed only after the join */
    size_t nmods;
    symbolizer *sym;
    _Atomic int stop;             /* the caller needs the symbolizer now */
    int joined;
} live_warm;

/* Where the target's paths lead: its root, as a live thread of it (via)
 * sees it (a main thread that exited has none). */
static const char *proc_root(pid_t via, char *buf, size_t cap)
{
    snprintf(buf, cap, "/proc/%d/root", (int)via);
    return buf;
}

static void *warm_main(void *arg)
{
    live_warm *w = arg;
    uint64_t pcs[256], n = w->g.next_id, step = n / WARM_STACKS + 1;
    char root[32];
    w->sym = mlz_symbolizer_for(w->mods, w->nmods, proc_root(w->pid, root, sizeof root));
    for (uint64_t id = 1; w->sym && id < n && !atomic_load_explicit(&w->stop, memory_order_relaxed); id += step) {
        int depth = read_stack(w->pid, &w->in, &w->g, id, pcs);
        for (int i = 0; i < depth && !atomic_load_explicit(&w->stop, memory_order_relaxed); i++)
            sym_warm(w->sym, pcs[i]);
    }
    return NULL;
}

static void start_warm(pid_t pid, const struct memlyze_info *in, const live_globals *g, mlz_live_heap *h)
{
    if (!mlz_worker_two_cpus()) return;   /* on one CPU it would only interleave */
    live_warm *w = calloc(1, sizeof *w);
    if (!w) return;
    *w = (live_warm){ .pid = pid, .in = *in, .g = *g, .mods = h->mods, .nmods = h->nmods };
    /* Signals stay the caller's: the thread starts with all blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&w->thread, NULL, warm_main, w);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) { free(w); return; }
    h->warm = w;
}

/* The warmed symbolizer (still h's), or NULL: symbolize from scratch. */
static symbolizer *warm_result(mlz_live_heap *h)
{
    live_warm *w = h->warm;
    if (!w) return NULL;
    atomic_store_explicit(&w->stop, 1, memory_order_relaxed);
    if (!w->joined) pthread_join(w->thread, NULL);
    w->joined = 1;
    return w->sym;
}

/* The process's modules, for symbolization; h owns them. */
static int copy_modules(pid_t pid, mlz_live_heap *h, char *err, size_t errlen)
{
    mlz_proc_module *mods;
    size_t nmods;
    if (mlz_proc_modules(pid, &mods, &nmods)) {
        if (kill(pid, 0) && errno == ESRCH) return errbuf_set(err, errlen, "no process %d", (int)pid) - 1;
        return errbuf_set(err, errlen, "%s", mlz_proc_error());
    }
    h->pm = mods;
    h->mods = calloc(nmods ? nmods : 1, sizeof *h->mods);
    if (!h->mods) return errbuf_set(err, errlen, "out of memory");
    h->nmods = nmods;
    for (size_t i = 0; i < nmods; i++) {
        h->mods[i] = (mlz_raw_module){ .start = mods[i].start, .size = mods[i].end - mods[i].start, .bias = mods[i].bias,
                                       .blen = mods[i].build_id_len, .path = mods[i].path };
        memcpy(h->mods[i].build_id, mods[i].build_id, mods[i].build_id_len);
    }
    return 0;
}

int mlz_live_read(pid_t pid, mlz_live_heap *h, int symbolize, char *err, size_t errlen)
{
    struct memlyze_info in;
    live_globals g = { 0 };
    memset(h, 0, sizeof *h);
    h->pid = pid;
    /* A process whose main thread has exited is read through another. */
    pid_t via = mlz_proc_live_tid(pid);
    h->via = via = via ? via : pid;
    int rc = find_payload(pid, via, &in, err, errlen);
    if (!rc) rc = copy_modules(via, h, err, errlen);
    if (!rc) rc = read_globals(via, &in, &g, err, errlen);
    if (!rc && symbolize) start_warm(via, &in, &g, h);
    if (!rc) rc = copy_map(via, &in, &g, h, err, errlen);
    if (!rc && read_stacks(via, &in, &g, h)) rc = errbuf_set(err, errlen, "out of memory");
    if (!rc) rc = same_session(via, &in, &g, err, errlen);
    /* After the map: a sample dropped while it was read is missing too. */
    if (!rc && get_u64(via, in.map_full_drops_addr, &h->map_full_drops))
        rc = errbuf_set(err, errlen, "cannot read process %d's memory: %s", (int)pid, strerror(errno));
    if (rc) {
        mlz_live_free(h);
        memset(h, 0, sizeof *h);
        return rc;
    }
    h->rate = g.rate;
    h->mono2real = g.mono2real;
    h->session = g.session;
    h->map_capacity = g.mask + 1;
    return 0;
}

void mlz_live_free(mlz_live_heap *h)
{
    if (h->warm) {
        symbolizer *sym = warm_result(h);
        if (sym) sym_free(sym);
        free(h->warm);
    }
    for (size_t i = 0; h->stacks && i < h->nstacks; i++) free(h->stacks[i].pcs);
    free(h->stacks);
    free(h->pm);
    free(h->obj);
    free(h->mods);
    memset(h, 0, sizeof *h);
}

int mlz_live_meta(mlz_live_heap *h, mlz_raw_stack *stacks, size_t nstacks, char **meta, size_t *ml,
                  char *err, size_t errlen)
{
    pid_t pid = h->pid, via = h->via ? h->via : h->pid;
    /* The keys a profile carries, as the payload's spool would have them. */
    char p[64], exe[4096], cmdline[4096];
    snprintf(p, sizeof p, "/proc/%d/exe", (int)via);
    ssize_t k = readlink(p, exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = 0;
    snprintf(p, sizeof p, "/proc/%d/cmdline", (int)via);
    int cfd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t cl = cfd >= 0 ? read(cfd, cmdline, sizeof cmdline) : 0;
    if (cfd >= 0) close(cfd);
    json_t *root = json_object();
    json_t *args = json_array();
    for (ssize_t i = 0; i < cl;) {
        size_t l = strnlen(cmdline + i, (size_t)(cl - i));
        json_array_append_new(args, json_stringn(cmdline + i, l));
        i += (ssize_t)l + 1;
    }
    json_object_set_new(root, "memlyze", json_string("1"));
    json_object_set_new(root, "rate", json_integer((json_int_t)h->rate));
    json_object_set_new(root, "pid", json_integer(pid));
    json_object_set_new(root, "exe", json_string(exe));
    json_object_set_new(root, "cmdline", args);
    json_object_set_new(root, "clock", json_string("realtime"));
    /* Which sampling session: snapshots of one session share their samples
     * (memlyze diff pairs them; docs/FORMAT.md). */
    char sess[48];
    snprintf(sess, sizeof sess, "%d.%llu", (int)pid, (unsigned long long)h->session);
    json_object_set_new(root, "session", json_string(sess));
    json_t *fns = json_object();
    json_object_set_new(fns, "0", json_string("memlyze:snapshot"));
    /* Samples taken after the payload raised its rate (overload) follow a
     * MARKER naming theirs: function 1 + shift. */
    for (unsigned k = 0; h->rate > 1 && k <= MEMLYZE_RATE_SHIFT_MAX && h->rate <= (UINT64_MAX >> k); k++) {
        char key[16], name[48];
        snprintf(key, sizeof key, "%u", SNAPSHOT_RATE_MARKER_ID + k);
        snprintf(name, sizeof name, MLZ_RATE_MARKER "%llu", (unsigned long long)(h->rate << k));
        json_object_set_new(fns, key, json_string(name));
    }
    json_object_set_new(root, "functions", fns);
    /* As a trace's counters: reports then say the estimates are low. */
    json_t *ctr = json_object();
    json_object_set_new(ctr, "map_capacity", json_integer((json_int_t)h->map_capacity));
    json_object_set_new(ctr, "map_full_drops", json_integer((json_int_t)h->map_full_drops));
    json_object_set_new(ctr, "read_us", json_integer((json_int_t)h->read_us));
    json_object_set_new(ctr, "born_while_read", json_integer((json_int_t)h->born_while_read));
    json_object_set_new(root, "counters", ctr);
    if (h->extra) json_object_update(root, (json_t *)h->extra);
    char at[32];
    int rc = mlz_symbolized_meta(stacks, nstacks, h->mods, h->nmods, warm_result(h), proc_root(via, at, sizeof at),
                                 root, "snapshot", meta, ml, err, errlen);
    json_decref(root);
    return rc;
}

int mlz_live_write(mlz_live_heap *h, const char *out, int compress, char *err, size_t errlen)
{
    char *meta = NULL;
    size_t ml;
    if (mlz_live_meta(h, h->stacks, h->nstacks, &meta, &ml, err, errlen)) return -1;
    const snap_obj *live = h->obj;
    size_t nlive = h->nobj;
    uint64_t mono2real = h->mono2real;
    /* The file: one ALLOC per live sample in birth order, then the marker. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_us = (uint64_t)now.tv_sec * 1000000 + (uint64_t)now.tv_nsec / 1000;
    uint64_t start_us = nlive ? (live[0].time_ns + mono2real) / 1000 : now_us;
    static uint8_t buf[MLZ_BLOCK_SIZE], zbuf[MLZ_LZ4_BOUND];
    static mlz_writer wr;
    mlz_writer_opts o = { .start_us = start_us, .meta = meta, .meta_len = ml, .mode = 0600,
                          .flags = compress ? MLZ_FLAG_LZ4 : 0, .buf = buf, .buf_size = sizeof buf,
                          .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    int we = mlz_writer_open(&wr, out, &o);
    unsigned shift = 0;
    for (size_t i = 0; !we && i < nlive; i++) {
        uint64_t t = (live[i].time_ns + mono2real) / 1000;
        if (live[i].rate_shift != shift && h->rate > 1) {
            shift = live[i].rate_shift;
            if ((we = mlz_writer_marker(&wr, t, SNAPSHOT_RATE_MARKER_ID + shift))) break;
        }
        we = mlz_writer_alloc(&wr, t, live[i].addr, live[i].size, live[i].stack_id, (uint16_t)live[i].tid);
    }
    if (!we) we = mlz_writer_marker(&wr, now_us, 0);
    if (!we) we = mlz_writer_close(&wr);
    else mlz_writer_abort(&wr);
    free(meta);
    if (we) return errbuf_set(err, errlen, "%s: %s", mlz_writer_error_path(&wr, out), strerror(-we));
    return 0;
}

int mlz_live_write_new(mlz_live_heap *h, int compress, char *name, size_t namelen, char *err, size_t errlen)
{
    for (int n = 1; n <= 10000; n++) {
        snprintf(name, namelen, "memlyze.%d.%d.mlyze", (int)h->pid, n);
        if (access(name, F_OK) == 0) continue;
        int rc = mlz_live_write(h, name, compress, err, errlen);
        if (rc == 0 || !strstr(err, strerror(EEXIST))) return rc;   /* else taken meanwhile: the next N */
    }
    return errbuf_set(err, errlen, "memlyze.%d.N.mlyze: no free name", (int)h->pid);
}

int mlz_snapshot(pid_t pid, const char *out, int compress, snapshot_stats *st, char *err, size_t errlen)
{
    return mlz_snapshot_meta(pid, out, compress, NULL, NULL, NULL, st, err, errlen);
}

int mlz_snapshot_meta(pid_t pid, const char *out, int compress, void *extra, snapshot_seen_fn seen, void *seen_arg,
                      snapshot_stats *st, char *err, size_t errlen)
{
    mlz_live_heap h;
    memset(st, 0, sizeof *st);
    if (mlz_live_read(pid, &h, 1, err, errlen)) return -1;
    h.extra = extra;
    int rc = seen ? seen(h.obj, h.nobj, seen_arg, err, errlen) : 0;
    if (!rc) rc = mlz_live_write(&h, out, compress, err, errlen);
    *st = h.st;
    mlz_live_free(&h);
    return rc;
}
