/*
 * heapdump.c - memlyze heapdump: the live heap of a process profiled in
 * exact mode, as a graph of objects.
 *
 * Which objects are live comes from the payload's heap map, read from
 * outside by the snapshot code (snapshot.c) into a .mlyze written beside
 * the dump: that file keeps each object's address, site, thread and birth
 * time, and the dump only its bytes. The roots are the writable segments of
 * every module but ours (cut at their data symbols, procdata.c), and for
 * each thread its stack from the stack pointer (less the 128-byte red zone)
 * to the top of its mapping, its general registers, and the 64 KiB below
 * its thread pointer (static TLS; other threads have it in their stacks)
 * and the TLS blocks ld.so allocated for dlopen'd modules (its DTV).
 * The list of live objects arrives from the snapshot code (its `seen` step).
 *
 * Consistency: every thread is stopped (injector/threads.c: PTRACE_SEIZE +
 * INTERRUPT, given back as they were) from before the registers are read
 * until the last object's bytes are copied, so registers, stacks, the heap
 * map and the objects are one moment of the program. The pause is
 * measured. HD_SHORT_PAUSE lets the threads go once the roots are read:
 * a short pause, but the heap is then read while it changes. Symbolizing the sites (the .mlyze) and writing the .arc happen
 * after the threads run again (snapshot.c calls copy_objects in between).
 *
 * In the .arc (seed 003) the stream is: forward declarations of the root
 * object, of every root piece and every heap object; then the root object
 * (word 0 the dump id, untagged, then one pointer per root piece); then the
 * root pieces in the order of the .mlyze's "heapdump.roots"; then the heap
 * objects in the order of its ALLOC events. Every whole word of a piece or
 * object that holds an address inside a live heap object (interior ones
 * included) is tagged and rewritten to that object's id plus the offset.
 */
#include "errbuf.h"
#include "heapdump.h"
#include "arc.h"
#include "info.h"
#include "../injector/injector.h"
#include "mlz_format.h"
#include "procdata.h"
#include "snapshot.h"
#include "tmp_guard.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#define RED_ZONE 128              /* x86-64: leaf functions may use 128 bytes below rsp */
#define TLS_SPAN (64u << 10)      /* static TLS read below a thread pointer */

int hd_mlyze_name(const char *arc_path, char *out, size_t len)
{
    size_t l = strlen(arc_path);
    if (l > 4 && !strcmp(arc_path + l - 4, ".arc")) l -= 4;
    if (l + 7 > len) return -1;
    memcpy(out, arc_path, l);
    memcpy(out + l, ".mlyze", 7);
    return 0;
}

/* Sampled mode has no list of every object: refuse before touching anything. */
static int check_exact(pid_t pid, const mlz_proc_module *m, size_t n, char *err, size_t errlen)
{
    const mlz_proc_module *pay = NULL;
    for (size_t i = 0; i < n && !pay; i++)
        if (mlz_proc_is_payload(m[i].path)) pay = &m[i];
    if (!pay)
        return errbuf_set(err, errlen, "memlyze is not loaded in process %d (attach with `memlyze-attach -r 1 %d` "
                    "or start it with `memlyze run -r 1`)", (int)pid, (int)pid);
    uint64_t at, rate = 0;
    struct memlyze_info in;
    if (mlz_proc_payload_info(pid, pay, &in, &at) || !memlyze_info_readable(&in))
        return errbuf_set(err, errlen, "cannot read memlyze's tables in process %d (same user or CAP_SYS_PTRACE, "
                    "and the matching memlyze, needed)", (int)pid);
    if (mlz_proc_read(pid, in.rate_addr, &rate, 8))
        return errbuf_set(err, errlen, "cannot read process %d's memory: %s", (int)pid, strerror(errno));
    if (rate != 1)
        return errbuf_set(err, errlen, "process %d is profiled at a sampling rate of %llu bytes: a heap dump needs every "
                    "object; attach with `-r 1` (memlyze-attach -r 1 %d, or memlyze run -r 1)", (int)pid,
                    (unsigned long long)rate, (int)pid);
    return 0;
}

/* The process's mappings, for finding the one around a stack pointer. */
typedef struct range { uint64_t start, end; } range;
static int read_maps(pid_t pid, range **v, size_t *n)
{
    char p[64], line[4096 + 256];
    snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(p, "re");
    if (!f) return -1;
    size_t cap = 256;
    *n = 0;
    *v = malloc(cap * sizeof **v);
    while (*v && fgets(line, sizeof line, f)) {
        unsigned long long s, e;
        if (sscanf(line, "%llx-%llx", &s, &e) != 2) continue;
        if (*n == cap) {
            range *nv = realloc(*v, 2 * cap * sizeof *nv);
            if (!nv) { free(*v); *v = NULL; break; }
            *v = nv;
            cap *= 2;
        }
        (*v)[(*n)++] = (range){ s, e };
    }
    fclose(f);
    return *v ? 0 : -1;
}
static const range *map_of(const range *v, size_t n, uint64_t a)
{
    for (size_t i = 0; i < n; i++)
        if (a >= v[i].start && a < v[i].end) return &v[i];
    return NULL;
}

/* One thing to dump: a root piece or a heap object. */
typedef struct item {
    uint64_t addr, size;      /* size >= 1 (a 0-byte object is dumped as 1 byte) */
    uint64_t id;              /* in the .arc */
    uint8_t *data;            /* its bytes, in one big buffer */
} item;

/* Copies items' bytes with process_vm_readv, up to 1024 at a time; an item
 * a batch could not fully read is read alone, and zeroed (and marked in
 * failed, if given) when that fails too. Returns how many failed. */
static size_t read_items(pid_t pid, item *it, size_t n, uint8_t *failed)
{
    size_t bad = 0;
    struct iovec lo[1024], re[1024];
    for (size_t i = 0; i < n;) {
        size_t k = 0, want = 0;
        for (; k < 1024 && i + k < n; k++) {
            lo[k] = (struct iovec){ it[i + k].data, it[i + k].size };
            re[k] = (struct iovec){ (void *)(uintptr_t)it[i + k].addr, it[i + k].size };
            want += it[i + k].size;
        }
        ssize_t got = process_vm_readv(pid, lo, k, re, k, 0);
        if (got != (ssize_t)want) {
            for (size_t j = 0; j < k; j++)
                if (mlz_proc_read(pid, it[i + j].addr, it[i + j].data, it[i + j].size)) {
                    memset(it[i + j].data, 0, it[i + j].size);
                    if (failed) failed[i + j] = 1;
                    bad++;
                }
        }
        i += k;
    }
    return bad;
}

static const item *heap_items;
static int by_heap_addr(const void *x, const void *y)
{
    uint64_t a = heap_items[*(const uint32_t *)x].addr, b = heap_items[*(const uint32_t *)y].addr;
    return a < b ? -1 : a > b;
}

/* Address -> heap object, for tagging words. */
typedef struct addr_index {
    const item *h;
    uint32_t *order;          /* heap indices by address */
    size_t n;
    uint64_t lo, hi;          /* lowest address, highest end */
} addr_index;

static long lookup(const addr_index *x, uint64_t v)
{
    if (v < x->lo || v >= x->hi) return -1;
    size_t lo = 0, hi = x->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (x->h[x->order[mid]].addr <= v) lo = mid + 1;
        else hi = mid;
    }
    if (!lo) return -1;
    const item *o = &x->h[x->order[lo - 1]];
    return v - o->addr < o->size ? (long)x->order[lo - 1] : -1;
}

/* One object's bitmap and rewritten words, then its declaration. */
static int put_item(FILE *f, const item *o, const addr_index *x, uint8_t *scratch, uint8_t *bitmap)
{
    uint64_t words = o->size / 8;
    memset(bitmap, 0, ARC_BITMAP_BYTES(o->size));
    memcpy(scratch, o->data, o->size);
    for (uint64_t w = 0; w < words; w++) {
        uint64_t v;
        memcpy(&v, scratch + 8 * w, 8);
        long t = lookup(x, v);
        if (t < 0) continue;
        v = x->h[t].id + (v - x->h[t].addr);
        memcpy(scratch + 8 * w, &v, 8);
        bitmap[w / 8] |= (uint8_t)(1u << (w % 8));
    }
    return arc_put_object(f, o->id, o->size, bitmap, scratch);
}

/* The snapshot's `seen` step: every listed object's bytes, copied while
 * the threads are still held; then they run again. */
typedef struct copy_job {
    pid_t pid;
    mlz_tgroup *g;
    item *heap;
    size_t n;
    uint8_t *buf;
    uint32_t *order;          /* heap indices by address */
    uint64_t bytes;
    size_t unreadable;
    int held;
} copy_job;

/* Objects lie mostly side by side: one read per run of neighbours (gaps of
 * chunk headers included) costs far less than one iovec per object, whose
 * pages the kernel would pin one by one. Each object's data points into its
 * run's copy. */
#define RUN_GAP  4096
#define RUN_MAX  (4u << 20)
static int read_runs(copy_job *j)
{
    size_t nr = 0;
    item *runs = malloc((j->n ? j->n : 1) * sizeof *runs);
    uint32_t *run_of = malloc((j->n ? j->n : 1) * sizeof *run_of);
    if (!runs || !run_of) { free(runs); free(run_of); return -1; }
    uint64_t total = 0;
    for (size_t k = 0; k < j->n; k++) {
        const item *o = &j->heap[j->order[k]];
        item *r = nr ? &runs[nr - 1] : NULL;
        if (r && o->addr >= r->addr && o->addr <= r->addr + r->size + RUN_GAP && r->size + o->size <= RUN_MAX) {
            uint64_t end = o->addr + o->size;
            if (end > r->addr + r->size) { total += end - (r->addr + r->size); r->size = end - r->addr; }
        } else {
            runs[nr++] = (item){ o->addr, o->size, 0, NULL };
            total += o->size;
        }
        run_of[k] = (uint32_t)(nr - 1);
    }
    j->buf = malloc(total ? total : 1);
    uint8_t *failed = calloc(nr ? nr : 1, 1);
    if (!j->buf || !failed) { free(runs); free(run_of); free(failed); return -1; }
    uint8_t *p = j->buf;
    for (size_t r = 0; r < nr; r++) { runs[r].data = p; p += runs[r].size; }
    for (size_t k = 0; k < j->n; k++) {
        item *o = &j->heap[j->order[k]];
        o->data = runs[run_of[k]].data + (o->addr - runs[run_of[k]].addr);
    }
    /* A run across an unmapped hole fails as a whole: read its objects alone. */
    if (read_items(j->pid, runs, nr, failed))
        for (size_t k = 0; k < j->n; k++)
            if (failed[run_of[k]]) j->unreadable += read_items(j->pid, &j->heap[j->order[k]], 1, NULL);
    free(runs);
    free(run_of);
    free(failed);
    return 0;
}

static int copy_objects(const snap_obj *v, size_t n, void *arg, char *err, size_t errlen)
{
    copy_job *j = arg;
    uint64_t total = 0;
    j->heap = malloc((n ? n : 1) * sizeof *j->heap);
    if (!j->heap) return errbuf_set(err, errlen, "out of memory");
    for (size_t i = 0; i < n; i++) {
        uint64_t size = v[i].size ? v[i].size : 1;    /* .arc has no empty objects */
        if (size > ARC_MAX_SIZE)
            return errbuf_set(err, errlen, "an object of %llu bytes is beyond .arc's 64 GiB", (unsigned long long)size);
        j->heap[i] = (item){ v[i].addr, size, 0, NULL };
        total += size;
    }
    j->n = n;
    j->bytes = total;
    j->order = malloc((n ? n : 1) * sizeof *j->order);
    if (!j->order) return errbuf_set(err, errlen, "out of memory");
    for (size_t i = 0; i < n; i++) j->order[i] = (uint32_t)i;
    heap_items = j->heap;
    qsort(j->order, n, sizeof *j->order, by_heap_addr);
    if (read_runs(j)) return errbuf_set(err, errlen, "out of memory for %llu bytes of heap", (unsigned long long)total);
    if (j->held) mlz__threads_detach_all(j->g, 0);
    j->held = 0;
    return 0;
}

static json_t *root_json(const char *kind, pid_t tid, uint64_t addr, uint64_t size)
{
    json_t *r = json_object();
    json_object_set_new(r, "kind", json_string(kind));
    if (tid) json_object_set_new(r, "tid", json_integer(tid));
    json_object_set_new(r, "addr", json_integer((json_int_t)addr));
    json_object_set_new(r, "size", json_integer((json_int_t)size));
    return r;
}

/* One dump in progress: what hd_dump's steps hand each other. */
typedef struct dump {
    pid_t pid;
    hd_stats *st;
    char *err;
    size_t errlen;
    mlz_proc_module *mods;
    size_t nmods;
    pm_piece *pieces;                 /* writable data of the modules */
    size_t np, cp;
    range *maps;
    size_t nmaps;
    mlz_tgroup g;
    int stopped;                      /* every thread is held */
    item *roots;                      /* root pieces, in the order of jroots */
    size_t nroots, croots;
    int oom;                          /* a root piece could not be added */
    struct user_regs_struct *regs;    /* per thread, a root piece each */
    json_t *jroots;                   /* the .mlyze's "heapdump.roots" */
    uint8_t *rootbuf;
    uint64_t id;                      /* links the .arc and the .mlyze */
    item *heap;                       /* the live objects, from the snapshot */
    size_t nheap;
    uint8_t *heapbuf;
    uint32_t *order;                  /* heap indices by address */
    uint64_t heap_bytes;
} dump;

/* Global roots: the writable segments of every module but ours. */
static int find_global_pieces(dump *d)
{
    for (size_t i = 0; i < d->nmods; i++)
        if (d->mods[i].path[0] == '/' && !mlz_proc_is_payload(d->mods[i].path) &&
            pm_data_pieces(d->pid, &d->mods[i], &d->pieces, &d->np, &d->cp))
            return errbuf_set(d->err, d->errlen, "cannot read module %s of process %d", d->mods[i].path, (int)d->pid);
    return 0;
}

/* Appends a root piece and its description (r is taken); -1 (and oom
 * set) if out of memory. */
static int add_root(dump *d, item it, json_t *r)
{
    if (d->nroots == d->croots) {
        size_t n = d->croots ? 2 * d->croots : 64;
        item *v = realloc(d->roots, n * sizeof *v);
        if (!v) { json_decref(r); d->oom = 1; return -1; }
        d->roots = v;
        d->croots = n;
    }
    d->roots[d->nroots++] = it;
    json_array_append_new(d->jroots, r);
    return 0;
}

static void add_global_roots(dump *d)
{
    for (size_t i = 0; i < d->np; i++) {
        const pm_piece *pc = &d->pieces[i];
        json_t *r = root_json("global", 0, pc->addr, pc->size);
        if (pc->name) json_object_set_new(r, "name", json_string(pc->name));
        if (pc->file) json_object_set_new(r, "file", json_string(pc->file));
        for (size_t m = 0; m < d->nmods; m++)
            if (pc->addr >= d->mods[m].start && pc->addr < d->mods[m].end)
                json_object_set_new(r, "module", json_string(d->mods[m].path));
        if (add_root(d, (item){ pc->addr, pc->size, 0, NULL }, r)) return;
    }
}

/* The TLS blocks of a thread's modules that ld.so allocated on demand
 * (modules loaded by dlopen). glibc's thread control block starts at the
 * thread pointer; its second word points at entry 0 of the DTV, whose
 * entry -1 counts the modules and entry i (16 bytes) holds module i's
 * block and the malloc'd start it lies in (0 for a block in static TLS,
 * the block -1 while not allocated yet). ld.so calls malloc through a
 * pointer of its own, which no GOT patch reaches: attached, these blocks
 * are no heap objects of ours, and what only a dlopen'd library's __thread
 * variables pointed to looked leaked. The block ends with its malloc chunk
 * (glibc: the size word just before the start). */
#define DTV_MAX 65536
static void add_dtls_roots(dump *d, pid_t tid, uint64_t tp)
{
    uint64_t dtv, len, (*e)[2];
    if (mlz_proc_read(d->pid, tp + 8, &dtv, 8) || dtv < 16 || (dtv & 7) ||
        mlz_proc_read(d->pid, dtv - 16, &len, 8) || !len || len > DTV_MAX || !(e = malloc(len * sizeof *e)))
        return;
    if (mlz_proc_read(d->pid, dtv + 16, e, len * sizeof *e)) len = 0;
    for (uint64_t i = 0; i < len; i++) {
        uint64_t block = e[i][0], start = e[i][1], chunk;
        if (!start || block == UINT64_MAX || block < start || mlz_proc_read(d->pid, start - 8, &chunk, 8)) continue;
        chunk &= ~7ull;
        uint64_t end = start - 16 + chunk;
        if (chunk > (64ull << 20) || block >= end) continue;
        if (add_root(d, (item){ block, end - block, 0, NULL }, root_json("dtls", tid, block, end - block))) break;
    }
    free(e);
}

/* Per stopped thread: its stack from below the red zone to the top of its
 * mapping, its registers, the static TLS below its thread pointer and the
 * TLS blocks of dlopen'd modules (add_dtls_roots). The
 * payload's drain thread is the profiler's, not the program's: its stack
 * keeps copies of the records it last wrote, the addresses of objects just
 * allocated, which would pass for the program's references to them. */
static void add_thread_roots(dump *d)
{
    for (int t = 0; t < d->g.n; t++) {
        if (d->g.t[t].state == MLZ_T_GONE) continue;
        pid_t tid = d->g.t[t].tid;
        char name[64];
        if (!strcmp(mlz__thread_name(d->pid, tid, name, sizeof name), MEMLYZE_DRAIN_THREAD_NAME)) continue;
        struct user_regs_struct *regs = &d->regs[t];
        *regs = d->g.t[t].regs;
        uint64_t sp = (regs->rsp - RED_ZONE) & ~7ull;
        const range *sm = map_of(d->maps, d->nmaps, regs->rsp);
        d->st->threads++;
        if (sm) {
            if (sp < sm->start) sp = sm->start;
            if (add_root(d, (item){ sp, sm->end - sp, 0, NULL }, root_json("stack", tid, sp, sm->end - sp))) return;
        }
        if (add_root(d, (item){ 0, sizeof *regs, 0, (uint8_t *)regs }, root_json("registers", tid, 0, sizeof *regs)))
            return;
        uint64_t fs = regs->fs_base & ~7ull;
        const range *tm = map_of(d->maps, d->nmaps, fs);
        if (tm && tm != sm) {
            uint64_t a = fs - tm->start > TLS_SPAN ? fs - TLS_SPAN : tm->start;
            uint64_t z = tm->end - fs > 4096 ? fs + 4096 : tm->end;
            if (add_root(d, (item){ a, z - a, 0, NULL }, root_json("tls", tid, a, z - a))) return;
        }
        if (tm) add_dtls_roots(d, tid, fs);
    }
}

/* The root pieces and their bytes (registers are already in memory), read
 * with every thread stopped. */
static int read_roots(dump *d)
{
    d->regs = calloc((size_t)d->g.n + 1, sizeof *d->regs);
    d->jroots = json_array();
    if (!d->regs || !d->jroots) return errbuf_set(d->err, d->errlen, "out of memory");
    add_global_roots(d);
    add_thread_roots(d);
    if (d->oom) return errbuf_set(d->err, d->errlen, "out of memory");
    d->st->roots = d->nroots;
    uint64_t rtotal = 0;
    for (size_t i = 0; i < d->nroots; i++) rtotal += d->roots[i].data ? 0 : d->roots[i].size;
    d->rootbuf = malloc(rtotal ? rtotal : 1);
    if (!d->rootbuf) return errbuf_set(d->err, d->errlen, "out of memory");
    uint8_t *p = d->rootbuf;
    for (size_t i = 0; i < d->nroots; i++) {
        item *r = &d->roots[i];
        if (r->data) continue;
        r->data = p;
        p += r->size;
        if (mlz_proc_read(d->pid, r->addr, r->data, r->size)) memset(r->data, 0, r->size);
    }
    return 0;
}

/* When memlyze-attach loaded the profiler into pid (its record), or 0:
 * loaded at its start. */
static long long attached_at(pid_t pid)
{
    long long at;
    unsigned long long ticks;
    if (mlz_proc_attach_record(pid, pid, &at, &ticks)) return 0;
    return ticks && ticks == mlz_proc_start_ticks(pid) ? at : 0;
}

/* The live objects: the snapshot writes the .mlyze (with the link to this
 * dump) and, in its `seen` step, copies the objects' bytes and lets the
 * threads go before it symbolizes. */
static int snapshot_heap(dump *d, const char *arc_path, const char *mlyze_path, int flags)
{
    if (getrandom(&d->id, sizeof d->id, 0) != sizeof d->id) d->id = mlz__now_us() ^ ((uint64_t)d->pid << 40);
    d->st->id = d->id;
    char idhex[17];
    snprintf(idhex, sizeof idhex, "%016llx", (unsigned long long)d->id);
    const char *base = strrchr(arc_path, '/');
    json_t *extra = json_object(), *hd = json_object();
    json_object_set_new(hd, "id", json_string(idhex));
    json_object_set_new(hd, "arc", json_string(base ? base + 1 : arc_path));
    json_object_set(hd, "roots", d->jroots);
    /* Attached while it ran (memlyze-attach's record): what it allocated
     * before is neither a heap object of the dump nor a root. */
    long long at = attached_at(d->pid);
    if (at > 0) json_object_set_new(hd, "attached_at", json_integer(at));
    json_object_set_new(extra, "heapdump", hd);
    if (flags & HD_SHORT_PAUSE) {   /* the heap is read while the program runs */
        mlz__threads_detach_all(&d->g, 0);
        d->stopped = 0;
    }
    copy_job job = { d->pid, &d->g, NULL, 0, NULL, NULL, 0, 0, d->stopped };
    snapshot_stats ss;
    int rc = mlz_snapshot_meta(d->pid, mlyze_path, 0, extra, copy_objects, &job, &ss, d->err, d->errlen);
    json_decref(extra);
    d->heap = job.heap;
    d->nheap = job.n;
    d->heapbuf = job.buf;
    d->order = job.order;
    d->stopped = job.held;
    if (rc) return rc;
    d->st->skipped = ss.skipped;
    d->st->unreadable = job.unreadable;
    d->st->pause_us = d->g.paused_us;
    d->st->objects = d->nheap;
    d->st->bytes = job.bytes;
    return 0;
}

/* The root object: the dump id, then a pointer to each root piece. */
static int put_root_object(FILE *f, const dump *d, uint64_t root_id, uint64_t root_size)
{
    uint8_t *rd = calloc(1, root_size), *rb = calloc(1, ARC_BITMAP_BYTES(root_size) + 1);
    int we = -1;
    if (rd && rb) {
        memcpy(rd, &d->id, 8);
        for (size_t i = 0; i < d->nroots; i++) {
            memcpy(rd + 8 * (i + 1), &d->roots[i].id, 8);
            rb[(i + 1) / 8] |= (uint8_t)(1u << ((i + 1) % 8));
        }
        we = arc_put_object(f, root_id, root_size, rb, rd);
    }
    free(rd);
    free(rb);
    return we;
}

/* The .arc stream (header comment above), under a temporary name until it
 * is complete. */
static int write_arc(dump *d, const char *arc_path)
{
    arc_ids ids;
    memset(&ids, 0, sizeof ids);
    uint64_t root_size = 8 + 8 * (uint64_t)d->nroots, root_id = arc_new_id(&ids, root_size), maxsz = root_size;
    for (size_t i = 0; i < d->nroots; i++) {
        d->roots[i].id = arc_new_id(&ids, d->roots[i].size);
        if (d->roots[i].size > maxsz) maxsz = d->roots[i].size;
    }
    for (size_t i = 0; i < d->nheap; i++) {
        d->heap[i].id = arc_new_id(&ids, d->heap[i].size);
        if (!d->heap[i].id) return errbuf_set(d->err, d->errlen, "too many objects of one size class for .arc");
        if (d->heap[i].size > maxsz) maxsz = d->heap[i].size;
    }
    addr_index x = { d->heap, d->order, d->nheap, d->nheap ? d->heap[d->order[0]].addr : 1, 0 };
    for (size_t i = 0; i < d->nheap; i++)
        if (d->heap[i].addr + d->heap[i].size > x.hi) x.hi = d->heap[i].addr + d->heap[i].size;

    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", arc_path, (int)getpid());
    uint8_t *scratch = malloc(maxsz), *bitmap = malloc(ARC_BITMAP_BYTES(maxsz) + 1);
    FILE *f = scratch && bitmap ? fopen(tmp, "wbx") : NULL;
    if (!f) {
        int e = errno;
        free(scratch);
        free(bitmap);
        if (!scratch || !bitmap) return errbuf_set(d->err, d->errlen, "out of memory");
        return errbuf_set(d->err, d->errlen, "%s: %s", tmp, strerror(e));
    }
    mlz_tmp_guard_add(tmp);
    setvbuf(f, NULL, _IOFBF, 1 << 22);
    int we = arc_put_forward(f, root_id, root_size);
    for (size_t i = 0; !we && i < d->nroots; i++) we = arc_put_forward(f, d->roots[i].id, d->roots[i].size);
    for (size_t i = 0; !we && i < d->nheap; i++) we = arc_put_forward(f, d->heap[i].id, d->heap[i].size);
    if (!we) we = put_root_object(f, d, root_id, root_size);
    for (size_t i = 0; !we && i < d->nroots; i++) we = put_item(f, &d->roots[i], &x, scratch, bitmap);
    for (size_t i = 0; !we && i < d->nheap; i++) we = put_item(f, &d->heap[i], &x, scratch, bitmap);
    if (!we) we = fflush(f) ? -1 : 0;
    int e = errno;
    free(scratch);
    free(bitmap);
    int rc = 0;
    if (fclose(f) || we) {
        e = we ? e : errno;
        unlink(tmp);
        rc = errbuf_set(d->err, d->errlen, "%s: %s", tmp, strerror(e));
    } else if (rename(tmp, arc_path)) {
        e = errno;
        unlink(tmp);
        rc = errbuf_set(d->err, d->errlen, "%s: %s", arc_path, strerror(e));
    }
    mlz_tmp_guard_drop(tmp);
    return rc;
}

static void dump_free(dump *d)
{
    if (d->stopped) mlz__threads_detach_all(&d->g, 0);
    mlz__threads_free(&d->g);
    free(d->mods);
    pm_free_pieces(d->pieces, d->np);
    free(d->maps);
    free(d->roots);
    free(d->heap);
    free(d->regs);
    free(d->rootbuf);
    free(d->heapbuf);
    free(d->order);
    json_decref(d->jroots);
}

int hd_dump(pid_t pid, const char *arc_path, const char *mlyze_path, int flags, hd_stats *st, char *err, size_t errlen)
{
    dump d = { .pid = pid, .st = st, .err = err, .errlen = errlen };
    d.g.pid = pid;
    memset(st, 0, sizeof *st);
    if (kill(pid, 0) && errno == ESRCH) return errbuf_set(err, errlen, "no process %d", (int)pid);
    if (!access(arc_path, F_OK)) return errbuf_set(err, errlen, "%s exists (a dump never replaces a file)", arc_path);
    if (mlz_proc_modules(pid, &d.mods, &d.nmods)) return errbuf_set(err, errlen, "cannot read /proc/%d/maps: %s", (int)pid, strerror(errno));
    int rc = check_exact(pid, d.mods, d.nmods, err, errlen) || find_global_pieces(&d) ? -1 : 0;
    /* Every thread stopped: from here to the last copied byte. */
    if (!rc && mlz__threads_stop_all(&d.g, 2000))
        rc = errbuf_set(err, errlen, "cannot stop process %d: %s", (int)pid, mlz__errmsg());
    d.stopped = !rc;
    if (!rc && read_maps(pid, &d.maps, &d.nmaps)) rc = errbuf_set(err, errlen, "cannot read /proc/%d/maps", (int)pid);
    if (!rc) rc = read_roots(&d);
    if (!rc) rc = snapshot_heap(&d, arc_path, mlyze_path, flags);
    int wrote_mlyze = !rc;
    /* The two files are one dump: a signal before the .arc is in place
     * takes the snapshot with it. */
    if (wrote_mlyze) mlz_tmp_guard_add(mlyze_path);
    if (!rc) rc = write_arc(&d, arc_path);
    if (rc && wrote_mlyze) unlink(mlyze_path);
    if (wrote_mlyze) mlz_tmp_guard_drop(mlyze_path);
    dump_free(&d);
    return rc ? -1 : 0;
}
