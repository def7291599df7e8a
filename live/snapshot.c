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

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Entries in birth order (the event stream needs non-negative deltas): an
 * LSD radix sort of (time, index) pairs, 11 bits a pass. For 10^6 entries
 * it is ~10x faster than qsort over the 64-byte entries. */
typedef struct { uint64_t t; uint32_t i; } tkey;

static int sort_by_time(snap_obj *v, size_t n)
{
    tkey *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    snap_obj *out = malloc(n * sizeof *out);
    if (!a || !b || !out) { free(a); free(b); free(out); return -1; }
    for (size_t i = 0; i < n; i++) a[i] = (tkey){ v[i].time_ns, (uint32_t)i };
    for (int shift = 0; shift < 64; shift += 11) {
        size_t count[2049] = { 0 };
        for (size_t i = 0; i < n; i++) count[((a[i].t >> shift) & 2047) + 1]++;
        if (count[1] == n) continue;    /* every key has this digit 0 */
        for (int d = 0; d < 2048; d++) count[d + 1] += count[d];
        for (size_t i = 0; i < n; i++) b[count[(a[i].t >> shift) & 2047]++] = a[i];
        tkey *x = a; a = b; b = x;
    }
    for (size_t i = 0; i < n; i++) out[i] = v[a[i].i];
    memcpy(v, out, n * sizeof *v);
    free(a); free(b); free(out);
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
    memcpy(&e->tid, raw + in->entry_tid, 4);
    memcpy(&e->time_ns, raw + in->entry_time_ns, 8);
    memcpy(&e->seq, raw + in->entry_seq, 8);
    memcpy(&e->check, raw + in->entry_check, 8);
}

int mlz_live_read(pid_t pid, mlz_live_heap *h, char *err, size_t errlen)
{
    int rc = -1;
    mlz_proc_module *mods = NULL, pay;
    size_t nmods = 0;
    uint8_t *slots = NULL;
    snap_obj *live = NULL;
    mlz_raw_stack *stacks = NULL;
    size_t nst = 0, cst = 64;
    mlz_raw_module *rmods = NULL;
    memset(h, 0, sizeof *h);
    snapshot_stats *st = &h->st;

    /* -2: the target is gone or no longer profiled; -1: anything else. */
    if (kill(pid, 0) && errno == ESRCH) return errbuf_set(err, errlen, "no process %d", (int)pid) - 1;
    int prc = mlz_proc_payload_find(pid, &pay);
    if (prc == MLZ_PROC_ENOENT) {
        /* memlyze-attach's record is there but the payload is not: only an
         * exec drops it (a detached payload stays mapped, pass-through). */
        char state[128];
        snprintf(state, sizeof state, "/proc/%d/root/tmp/memlyze-%d/state", (int)pid, (int)pid);
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
    struct memlyze_info in;
    if ((prc = mlz_proc_payload_info(pid, &pay, &in, &info_addr))) {
        if (prc == MLZ_PROC_EIO)
            return errbuf_set(err, errlen, "cannot read process %d's memory: %s (same user or CAP_SYS_PTRACE needed)", (int)pid,
                        strerror(errno));
        return errbuf_set(err, errlen, "%s", mlz_proc_error());
    }
    /* The modules, for symbolization. */
    if (mlz_proc_modules(pid, &mods, &nmods)) {
        if (kill(pid, 0) && errno == ESRCH) return errbuf_set(err, errlen, "no process %d", (int)pid) - 1;
        return errbuf_set(err, errlen, "%s", mlz_proc_error());
    }
    if (!memlyze_info_readable(&in)) {
        errbuf_set(err, errlen, "process %d runs a payload with a different data layout (version %u); use the matching memlyze",
             (int)pid, in.version);
        goto out;
    }
    int ready = 0;
    uint64_t rate = 0, mono2real = 0, session = 0, slots_addr = 0, mask = 0, recs = 0, frames = 0;
    uint32_t next_id = 0;
    if (mlz_proc_read(pid, in.ready_addr, &ready, sizeof ready) || get_u64(pid, in.rate_addr, &rate) ||
        get_u64(pid, in.mono_to_real_addr, &mono2real) || get_u64(pid, in.session_addr, &session) || get_u64(pid, in.map_slots_addr, &slots_addr) ||
        get_u64(pid, in.map_mask_addr, &mask) || get_u64(pid, in.stack_recs_addr, &recs) ||
        get_u64(pid, in.stack_frames_addr, &frames) || mlz_proc_read(pid, in.stack_next_id_addr, &next_id, 4)) {
        errbuf_set(err, errlen, "cannot read process %d's memory: %s", (int)pid, strerror(errno));
        goto out;
    }
    if (!ready || !slots_addr) { rc = errbuf_set(err, errlen, "memlyze is loaded in process %d but not attached", (int)pid) - 1; goto out; }
    if (mask >> in.map_log2_max) { errbuf_set(err, errlen, "implausible heap map size in process %d", (int)pid); goto out; }

    /* Copy the map in 1 MiB pieces while the program runs, keeping only
     * what a snapshot needs of each consistent entry. */
    size_t cap = (size_t)mask + 1, esz = in.entry_size, per = (1u << 20) / esz;
    slots = malloc(per * esz);
    size_t lcap = 4096, nlive = 0;
    live = malloc(lcap * sizeof *live);
    if (!slots || !live) { errbuf_set(err, errlen, "out of memory"); goto out; }
    for (size_t i = 0; i < cap; i++) {
        if (i % per == 0) {
            size_t cnt = cap - i < per ? cap - i : per;
            if (mlz_proc_read(pid, slots_addr + i * esz, slots, cnt * esz)) {
                rc = errbuf_set(err, errlen, "process %d went away or unmapped its heap map", (int)pid) - 1;
                goto out;
            }
        }
        mlz_heap_entry e;
        decode_entry(&in, slots + (i % per) * esz, &e);
        uint64_t k = atomic_load(&e.key);
        if (k == MLZ_HEAP_EMPTY || k == MLZ_HEAP_TOMBSTONE) continue;
        int tries = 0;
        while (!mlz_heap_entry_consistent(&e) && tries < 3) {
            /* Mid-insert or mid-remove: look again. */
            uint8_t raw[4096];
            tries++;
            if (mlz_proc_read(pid, slots_addr + i * esz, raw, esz)) break;
            decode_entry(&in, raw, &e);
            k = atomic_load(&e.key);
            if (k == MLZ_HEAP_EMPTY || k == MLZ_HEAP_TOMBSTONE) break;
        }
        if (!mlz_heap_entry_consistent(&e)) {
            if (k != MLZ_HEAP_EMPTY && k != MLZ_HEAP_TOMBSTONE) st->skipped++;
            continue;
        }
        st->retried += tries > 0;
        if (nlive == lcap) {
            snap_obj *nv = realloc(live, 2 * lcap * sizeof *nv);
            if (!nv) { errbuf_set(err, errlen, "out of memory"); goto out; }
            live = nv;
            lcap *= 2;
        }
        live[nlive++] = (snap_obj){ k, e.size, e.time_ns, e.stack_id, e.tid };
    }
    st->live = nlive;
    if (sort_by_time(live, nlive)) { errbuf_set(err, errlen, "out of memory"); goto out; }

    /* The stacks the entries name, read once each; ids we cannot read (and
     * 0, "none") share one empty stack. */
    uint64_t empty_id = (uint64_t)next_id + 1;
    uint32_t *slot_of = calloc((size_t)next_id + 2, sizeof *slot_of);   /* id -> stacks index + 1 */
    stacks = malloc(cst * sizeof *stacks);
    if (!slot_of || !stacks) { free(slot_of); errbuf_set(err, errlen, "out of memory"); goto out; }
    for (size_t i = 0; i < nlive; i++) {
        uint64_t id = live[i].stack_id;
        if (id == 0 || id >= next_id) { live[i].stack_id = (uint32_t)empty_id; id = empty_id; }
        if (slot_of[id]) continue;
        uint64_t pcs[256];
        uint32_t ready = 0, depth = 0;
        uint64_t foff = 0;
        if (id != empty_id) {
            uint8_t rec[256];
            if (in.rec_size <= sizeof rec && !mlz_proc_read(pid, recs + id * in.rec_size, rec, in.rec_size)) {
                memcpy(&ready, rec + in.rec_ready, 4);
                memcpy(&depth, rec + in.rec_depth, 4);
                memcpy(&foff, rec + in.rec_frames_offset, 8);
            }
            if (ready != 1 || depth > in.max_frames || depth > 256 || mlz_proc_read(pid, frames + foff * 8, pcs, depth * 8)) {
                live[i].stack_id = (uint32_t)empty_id;   /* unreadable: the empty stack */
                st->no_stack++;
                if (slot_of[empty_id]) continue;
                id = empty_id;
                depth = 0;
            }
        }
        if (nst == cst) {
            mlz_raw_stack *nv = realloc(stacks, 2 * cst * sizeof *nv);
            if (!nv) { free(slot_of); errbuf_set(err, errlen, "out of memory"); goto out; }
            stacks = nv;
            cst *= 2;
        }
        stacks[nst] = (mlz_raw_stack){ id, id == empty_id ? 0 : depth, malloc((depth ? depth : 1) * 8), 0 };
        if (!stacks[nst].pcs) { free(slot_of); errbuf_set(err, errlen, "out of memory"); goto out; }
        memcpy(stacks[nst].pcs, pcs, (size_t)stacks[nst].depth * 8);
        slot_of[id] = (uint32_t)++nst;
    }
    free(slot_of);

    rmods = calloc(nmods ? nmods : 1, sizeof *rmods);
    if (!rmods) { errbuf_set(err, errlen, "out of memory"); goto out; }
    for (size_t i = 0; i < nmods; i++) {
        rmods[i] = (mlz_raw_module){ mods[i].start, mods[i].end - mods[i].start, mods[i].bias, { 0 },
                                     mods[i].build_id_len, mods[i].path };
        memcpy(rmods[i].build_id, mods[i].build_id, mods[i].build_id_len);
    }

    h->pid = pid;
    h->rate = rate;
    h->mono2real = mono2real;
    h->session = session;
    h->obj = live;
    h->nobj = nlive;
    h->stacks = stacks;
    h->nstacks = nst;
    h->empty_id = empty_id;
    h->mods = rmods;
    h->nmods = nmods;
    h->pm = mods;
    live = NULL;
    stacks = NULL;
    rmods = NULL;
    mods = NULL;
    rc = 0;
out:
    for (size_t i = 0; stacks && i < nst; i++) free(stacks[i].pcs);
    free(stacks);
    free(mods);
    free(slots);
    free(live);
    free(rmods);
    return rc;
}

void mlz_live_free(mlz_live_heap *h)
{
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
    pid_t pid = h->pid;
    /* The keys a profile carries, as the payload's spool would have them. */
    char p[64], exe[4096], cmdline[4096];
    snprintf(p, sizeof p, "/proc/%d/exe", (int)pid);
    ssize_t k = readlink(p, exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = 0;
    snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pid);
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
    json_object_set_new(root, "functions", fns);
    if (h->extra) json_object_update(root, (json_t *)h->extra);
    int rc = mlz_symbolized_meta(stacks, nstacks, h->mods, h->nmods, root, "snapshot", meta, ml, err, errlen);
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
    for (size_t i = 0; !we && i < nlive; i++)
        we = mlz_writer_alloc(&wr, (live[i].time_ns + mono2real) / 1000, live[i].addr, live[i].size,
                              live[i].stack_id, (uint16_t)live[i].tid);
    if (!we) we = mlz_writer_marker(&wr, now_us, 0);
    if (!we) we = mlz_writer_close(&wr);
    else mlz_writer_abort(&wr);
    free(meta);
    if (we) return errbuf_set(err, errlen, "%s: %s", out, strerror(-we));
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
    if (mlz_live_read(pid, &h, err, errlen)) return -1;
    h.extra = extra;
    int rc = seen ? seen(h.obj, h.nobj, seen_arg, err, errlen) : 0;
    if (!rc) rc = mlz_live_write(&h, out, compress, err, errlen);
    *st = h.st;
    mlz_live_free(&h);
    return rc;
}
