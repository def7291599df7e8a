/*
 * snapshot.c - the live sampled heap of a profiled process, read from the
 * outside: no code runs in the target and none of its threads is paused.
 *
 * The payload exports `memlyze_info` (payload/info.h): where its heap map
 * and stack table are and how they are laid out. We find that symbol with
 * libelf in the very file the process mapped, copy the tables with
 * process_vm_readv while the program keeps running, and keep only entries
 * that are consistent: a published pointer whose check word matches its
 * fields (an entry being inserted or removed while we copy fails the check
 * and is read again, up to a few times, then skipped and counted). The
 * entries and their stacks become a spool that the finalize step
 * symbolizes like any other, into a .mlyze of kind "snapshot".
 */
#include "snapshot.h"
#include "finalize.h"
#include "heapmap.h"
#include "info.h"
#include "jsonw.h"
#include "mlz_format.h"
#include "procmem.h"
#include "spool_records.h"
#include "varint.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int serr(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* The payload's module in the target: the injected memfd or a file. */
static const pm_module *find_payload(const pm_module *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *base = strrchr(m[i].path, '/');
        base = base ? base + 1 : m[i].path;
        if (!strncmp(base, "libmemlyze", 10) || strstr(m[i].path, "memfd:memlyze")) return &m[i];
    }
    return NULL;
}

/* Entries in birth order (the event stream needs non-negative deltas): an
 * LSD radix sort of (time, index) pairs, 11 bits a pass. For 10^6 entries
 * it is ~10x faster than qsort over the 64-byte entries. */
typedef struct { uint64_t t; uint32_t i; } tkey;

/* What a snapshot keeps of each consistent entry. */
typedef struct snap_obj {
    uint64_t addr, size, time_ns;
    uint32_t stack_id, tid;
} snap_obj;

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

static int get_u64(pid_t pid, uint64_t addr, uint64_t *v) { return pm_read(pid, addr, v, 8); }

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

int mlz_snapshot(pid_t pid, const char *out, int compress, snapshot_stats *st, char *err, size_t errlen)
{
    int rc = -1;
    pm_module *mods = NULL;
    size_t nmods = 0;
    uint8_t *slots = NULL;
    snap_obj *live = NULL;
    uint8_t *seen = NULL;
    char spool[64] = "";
    memset(st, 0, sizeof *st);

    if (kill(pid, 0) && errno == ESRCH) return serr(err, errlen, "no process %d", (int)pid);
    if (pm_modules(pid, &mods, &nmods)) return serr(err, errlen, "cannot read /proc/%d/maps: %s", (int)pid, strerror(errno));
    const pm_module *pay = find_payload(mods, nmods);
    if (!pay) { serr(err, errlen, "memlyze is not loaded in process %d (attach first)", (int)pid); goto out; }
    uint64_t info_addr;
    if (pm_symbol(pid, pay, "memlyze_info", &info_addr)) {
        serr(err, errlen, "%s in process %d has no memlyze_info (an older payload?)", pay->path, (int)pid);
        goto out;
    }
    struct memlyze_info in;
    if (pm_read(pid, info_addr, &in, sizeof in)) {
        serr(err, errlen, "cannot read process %d's memory: %s (same user or CAP_SYS_PTRACE needed)", (int)pid, strerror(errno));
        goto out;
    }
    if (memcmp(in.magic, MEMLYZE_INFO_MAGIC, 8) || in.version != MEMLYZE_INFO_VERSION || in.size != sizeof in ||
        in.check_algorithm != 1 || in.entry_size < 56 || in.entry_size > 4096) {
        serr(err, errlen, "process %d runs a payload with a different data layout (version %u); use the matching memlyze",
             (int)pid, in.version);
        goto out;
    }
    int ready = 0;
    uint64_t rate = 0, mono2real = 0, slots_addr = 0, mask = 0, recs = 0, frames = 0;
    uint32_t next_id = 0;
    if (pm_read(pid, in.ready_addr, &ready, sizeof ready) || get_u64(pid, in.rate_addr, &rate) ||
        get_u64(pid, in.mono_to_real_addr, &mono2real) || get_u64(pid, in.map_slots_addr, &slots_addr) ||
        get_u64(pid, in.map_mask_addr, &mask) || get_u64(pid, in.stack_recs_addr, &recs) ||
        get_u64(pid, in.stack_frames_addr, &frames) || pm_read(pid, in.stack_next_id_addr, &next_id, 4)) {
        serr(err, errlen, "cannot read process %d's memory: %s", (int)pid, strerror(errno));
        goto out;
    }
    if (!ready || !slots_addr) { serr(err, errlen, "memlyze is loaded in process %d but not attached", (int)pid); goto out; }
    if (mask >= (1ull << 28)) { serr(err, errlen, "implausible heap map size in process %d", (int)pid); goto out; }

    /* Copy the map in 1 MiB pieces while the program runs, keeping only
     * what a snapshot needs of each consistent entry. */
    size_t cap = (size_t)mask + 1, esz = in.entry_size, per = (1u << 20) / esz;
    slots = malloc(per * esz);
    size_t lcap = 4096, nlive = 0;
    live = malloc(lcap * sizeof *live);
    if (!slots || !live) { serr(err, errlen, "out of memory"); goto out; }
    for (size_t i = 0; i < cap; i++) {
        if (i % per == 0) {
            size_t cnt = cap - i < per ? cap - i : per;
            if (pm_read(pid, slots_addr + i * esz, slots, cnt * esz)) {
                serr(err, errlen, "process %d went away or unmapped its heap map", (int)pid);
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
            if (pm_read(pid, slots_addr + i * esz, raw, esz)) break;
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
            if (!nv) { serr(err, errlen, "out of memory"); goto out; }
            live = nv;
            lcap *= 2;
        }
        live[nlive++] = (snap_obj){ k, e.size, e.time_ns, e.stack_id, e.tid };
    }
    st->live = nlive;
    if (sort_by_time(live, nlive)) { serr(err, errlen, "out of memory"); goto out; }

    /* The spool: modules, the stacks the entries name, the entries. */
    snprintf(spool, sizeof spool, "/tmp/memlyze-snap.%d.XXXXXX", (int)getpid());
    int tfd = mkstemp(spool);
    if (tfd < 0) { serr(err, errlen, "cannot create a temporary file: %s", strerror(errno)); spool[0] = 0; goto out; }
    close(tfd);
    unlink(spool);
    static char meta[8192], exe[4096], cmdline[4096];
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/exe", (int)pid);
    ssize_t k = readlink(p, exe, sizeof exe - 1);
    exe[k > 0 ? k : 0] = 0;
    snprintf(p, sizeof p, "/proc/%d/cmdline", (int)pid);
    int cfd = open(p, O_RDONLY | O_CLOEXEC);
    ssize_t cl = cfd >= 0 ? read(cfd, cmdline, sizeof cmdline) : 0;
    if (cfd >= 0) close(cfd);
    mlz_jw w;
    mlz_jw_init(&w, meta, sizeof meta);
    mlz_jw_obj(&w, NULL);
    mlz_jw_str(&w, "kind", "spool");
    mlz_jw_str(&w, "memlyze", "1");
    mlz_jw_u64(&w, "rate", rate);
    mlz_jw_i64(&w, "pid", pid);
    mlz_jw_str(&w, "exe", exe);
    mlz_jw_arr(&w, "cmdline");
    for (ssize_t i = 0; i < cl;) {
        size_t l = strnlen(cmdline + i, (size_t)(cl - i));
        mlz_jw_strn(&w, NULL, cmdline + i, l);
        i += (ssize_t)l + 1;
    }
    mlz_jw_end(&w);
    mlz_jw_str(&w, "clock", "realtime");
    mlz_jw_obj(&w, "stack_traces"); mlz_jw_end(&w);
    mlz_jw_obj(&w, "files"); mlz_jw_end(&w);
    mlz_jw_obj(&w, "functions"); mlz_jw_idkey_str(&w, 0, "memlyze:snapshot"); mlz_jw_end(&w);
    mlz_jw_end(&w);
    if (mlz_jw_ok(&w)) { serr(err, errlen, "metadata too large"); goto out; }

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_us = (uint64_t)now.tv_sec * 1000000 + (uint64_t)now.tv_nsec / 1000;
    uint64_t start_us = nlive ? (live[0].time_ns + mono2real) / 1000 : now_us;
    static uint8_t buf[MLZ_BLOCK_SIZE];
    static mlz_writer wr;
    mlz_writer_opts o = { .start_us = start_us, .meta = meta, .meta_len = w.len, .mode = 0600,
                          .buf = buf, .buf_size = sizeof buf };
    if (mlz_writer_open(&wr, spool, &o)) { serr(err, errlen, "cannot write %s", spool); goto out; }
    for (size_t i = 0; i < nmods; i++) {
        static uint8_t r[MLZ_SPOOL_MODULE_MAX];
        size_t n = mlz_spool_module(r, mods[i].start, mods[i].end - mods[i].start, mods[i].bias,
                                  mods[i].build_id, mods[i].build_id_len, mods[i].path);
        mlz_writer_ext(&wr, MLZ_EV_MODULE, start_us, r, n);
    }
    seen = calloc((size_t)next_id / 8 + 2, 1);
    if (!seen) { mlz_writer_abort(&wr); serr(err, errlen, "out of memory"); goto out; }
    /* Stack id 0 ("none") and ids we cannot read become an empty stack. */
    uint64_t empty_id = (uint64_t)next_id + 1;
    int empty_written = 0;
    for (size_t i = 0; i < nlive; i++) {
        uint64_t t = (live[i].time_ns + mono2real) / 1000;
        uint64_t id = live[i].stack_id;
        int ok = 0;
        if (id > 0 && id < next_id && (seen[id / 8] >> (id % 8) & 1)) ok = 1;
        else if (id > 0 && id < next_id) {
            uint8_t rec[256];
            uint32_t ready = 0, depth = 0;
            uint64_t foff = 0;
            if (in.rec_size <= sizeof rec && !pm_read(pid, recs + id * in.rec_size, rec, in.rec_size)) {
                memcpy(&ready, rec + in.rec_ready, 4);
                memcpy(&depth, rec + in.rec_depth, 4);
                memcpy(&foff, rec + in.rec_frames_offset, 8);
            }
            uint64_t pcs[256];
            if (ready == 1 && depth <= in.max_frames && depth <= 256 &&
                !pm_read(pid, frames + foff * 8, pcs, depth * 8)) {
                uint8_t r[MLZ_SPOOL_STACK_MAX(256)];
                size_t n = mlz_spool_stack(r, id, pcs, depth);
                mlz_writer_ext(&wr, MLZ_EV_STACK_RAW, t, r, n);
                seen[id / 8] |= (uint8_t)(1u << (id % 8));
                ok = 1;
            }
        }
        if (!ok) {
            if (!empty_written) {
                uint8_t r[MLZ_SPOOL_STACK_MAX(0)];
                size_t n = mlz_spool_stack(r, empty_id, NULL, 0);
                mlz_writer_ext(&wr, MLZ_EV_STACK_RAW, t, r, n);
                empty_written = 1;
            }
            id = empty_id;
            st->no_stack++;
        }
        mlz_writer_alloc(&wr, t, live[i].addr, live[i].size, id, (uint16_t)live[i].tid);
    }
    mlz_writer_marker(&wr, now_us, 0);
    if (mlz_writer_close(&wr)) { serr(err, errlen, "cannot write %s: %s", spool, strerror(-wr.err)); goto out; }
    rc = mlz_finalize(spool, out, "snapshot", compress, 0, err, errlen);
out:
    if (spool[0]) unlink(spool);
    pm_free_modules(mods, nmods);
    free(slots);
    free(live);
    free(seen);
    return rc;
}
