/*
 * replay_child.c - see replay_child.h.
 *
 * Ops are read from the plan's memfd in chunks, so the replayer's own
 * memory is a fixed buffer, the slot array and one stack per recorded
 * thread, all in place before the baseline RSS is taken. Recorded threads
 * become threads that pass a token: only the holder runs ops, in the
 * recorded order, and it hands the token on (a futex wake) when the next
 * op belongs to another thread.
 */
#include "replay_child.h"
#include "replay_ops.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 4096

static struct {
    int fd;
    uint64_t nops, next, peak_op;
    replay_op buf[CHUNK];
    size_t blen, bpos;
    uint64_t base;            /* op index of buf[0] */
    void **slots;
    uint32_t nworkers;
    _Atomic uint32_t *go;     /* per worker: 1 = your turn; 2 = the end */
    int timing;
    uint64_t t0_ns;
    int failed;
    replay_result res;
} g;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Resident set from /proc/self/statm or VmHWM from status, in KiB. */
static uint64_t rss_kib(void)
{
    char b[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, b, sizeof b - 1) : -1;
    if (fd >= 0) close(fd);
    if (n <= 0) return 0;
    b[n] = 0;
    unsigned long long size, res;
    if (sscanf(b, "%llu %llu", &size, &res) != 2) return 0;
    return res * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
}

static uint64_t hwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long v = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %llu kB", &v) == 1) break;
    if (f) fclose(f);
    return v;
}

/* The next op, or NULL at the end (or on a read error: g.failed). */
static const replay_op *peek(void)
{
    if (g.bpos == g.blen) {
        if (g.next >= g.nops) return NULL;
        uint64_t want = g.nops - g.next < CHUNK ? g.nops - g.next : CHUNK;
        ssize_t n = pread(g.fd, g.buf, want * sizeof(replay_op), (off_t)(g.next * sizeof(replay_op)));
        if (n != (ssize_t)(want * sizeof(replay_op))) {
            g.failed = 1;
            return NULL;
        }
        g.base = g.next;
        g.blen = want;
        g.bpos = 0;
    }
    return &g.buf[g.bpos];
}

static void futex_wake(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void futex_wait(_Atomic uint32_t *w, uint32_t v)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void run_op(const replay_op *op)
{
    if (g.timing) {
        uint64_t due = g.t0_ns + op->time_us * 1000, t = now_ns();
        if (due > t) {
            struct timespec ts = { (time_t)((due - t) / 1000000000ull), (long)((due - t) % 1000000000ull) };
            nanosleep(&ts, NULL);
        }
    }
    if (op->kind == RP_FREE) {
        free(g.slots[op->slot]);
        g.slots[op->slot] = NULL;
        return;
    }
    void *p = malloc(op->size ? op->size : 1);
    /* Touch it as a program would its new block: one write per page. */
    if (p)
        for (uint64_t i = 0; i < op->size; i += 4096) ((volatile char *)p)[i] = 1;
    g.slots[op->slot] = p;
}

/* Runs ops while they are this worker's; returns the worker to hand to,
 * or UINT32_MAX at the end. */
static uint32_t run_turn(uint32_t me)
{
    const replay_op *op;
    while ((op = peek())) {
        if (op->worker != me) return op->worker;
        run_op(op);
        if (g.base + g.bpos == g.peak_op) g.res.rss_peak_kib = rss_kib();
        g.bpos++;
        g.next = g.base + g.bpos;
    }
    return UINT32_MAX;
}

static void *worker(void *arg)
{
    uint32_t me = (uint32_t)(uintptr_t)arg;
    for (;;) {
        uint32_t v;
        while ((v = atomic_load_explicit(&g.go[me], memory_order_acquire)) == 0) futex_wait(&g.go[me], 0);
        if (v == 2) return NULL;
        atomic_store_explicit(&g.go[me], 0, memory_order_relaxed);
        uint32_t next = run_turn(me);
        if (next == UINT32_MAX) {
            for (uint32_t i = 0; i < g.nworkers; i++) {
                atomic_store_explicit(&g.go[i], 2, memory_order_release);
                futex_wake(&g.go[i]);
            }
            return NULL;
        }
        atomic_store_explicit(&g.go[next], 1, memory_order_release);
        futex_wake(&g.go[next]);
    }
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || !*s || *end) return -1;
    *v = x;
    return 0;
}

int replay_child_main(int argc, char **argv)
{
    uint64_t fd, nslots, nworkers, timing;
    if (argc != 6 || parse_u64(argv[0], &fd) || parse_u64(argv[1], &g.nops) || parse_u64(argv[2], &nslots) ||
        parse_u64(argv[3], &nworkers) || parse_u64(argv[4], &g.peak_op) || parse_u64(argv[5], &timing) ||
        nworkers == 0 || nworkers > 65536) {
        fprintf(stderr, "memlyze replay: bad child arguments\n");
        return 1;
    }
    g.fd = (int)fd;
    g.timing = (int)timing;
    g.nworkers = (uint32_t)nworkers;
    /* The replayer's own memory comes from mmap, never the allocator measured. */
    size_t sbytes = (nslots ? nslots : 1) * sizeof(void *), gbytes = nworkers * sizeof(*g.go);
    g.slots = mmap(NULL, sbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    g.go = mmap(NULL, gbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (g.slots == MAP_FAILED || g.go == MAP_FAILED) {
        fprintf(stderr, "memlyze replay: mmap: %s\n", strerror(errno));
        return 1;
    }
    memset(g.buf, 0, sizeof g.buf);
    Dl_info di;
    void *(*m)(size_t) = malloc;
    if (dladdr(*(void **)&m, &di) && di.dli_fname) snprintf(g.res.library, sizeof g.res.library, "%s", di.dli_fname);
    else snprintf(g.res.library, sizeof g.res.library, "?");

    pthread_t *th = mmap(NULL, nworkers * sizeof *th, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (th == MAP_FAILED) return 1;
    for (uint32_t i = 1; i < g.nworkers; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i)) {
            fprintf(stderr, "memlyze replay: cannot start thread %u of %u\n", i + 1, g.nworkers);
            _exit(1);
        }
    struct rusage r0, r1;
    /* The peak RSS is the replay's: "5" resets VmHWM to the current RSS
     * (Linux 4.0), forgetting the start-up's own high-water mark. */
    int cr = open("/proc/self/clear_refs", O_WRONLY);
    if (cr >= 0) {
        if (write(cr, "5", 1) != 1) { /* an older kernel: the start-up's peak may show */ }
        close(cr);
    }
    g.res.baseline_kib = rss_kib();
    getrusage(RUSAGE_SELF, &r0);
    g.t0_ns = now_ns();
    const replay_op *first = peek();
    if (first) atomic_store(&g.go[first->worker], 1);
    else atomic_store(&g.go[0], 1);
    if (first && first->worker != 0) futex_wake(&g.go[first->worker]);
    worker((void *)(uintptr_t)0);
    for (uint32_t i = 1; i < g.nworkers; i++) pthread_join(th[i], NULL);
    g.res.time_ns = now_ns() - g.t0_ns;
    getrusage(RUSAGE_SELF, &r1);
    g.res.rss_end_kib = rss_kib();
    g.res.hwm_kib = hwm_kib();
    g.res.minflt = (uint64_t)(r1.ru_minflt - r0.ru_minflt);
    g.res.majflt = (uint64_t)(r1.ru_majflt - r0.ru_majflt);
    if (g.failed) {
        fprintf(stderr, "memlyze replay: reading the ops failed\n");
        return 1;
    }
    if (g.nops == 0) g.res.rss_peak_kib = g.res.baseline_kib;
    /* Measured: the blocks still live go back (they are not the program's
     * leaks, and a leak checker need not report them). */
    for (uint64_t i = 0; i < nslots; i++) free(g.slots[i]);
    printf("replay-result %llu %llu %llu %llu %llu %llu %llu %s\n", (unsigned long long)g.res.time_ns,
           (unsigned long long)g.res.baseline_kib, (unsigned long long)g.res.hwm_kib,
           (unsigned long long)g.res.rss_peak_kib, (unsigned long long)g.res.rss_end_kib,
           (unsigned long long)g.res.minflt, (unsigned long long)g.res.majflt, g.res.library);
    fflush(stdout);
    return 0;
}

int replay_result_parse(const char *line, replay_result *r)
{
    unsigned long long v[7];
    int n = 0;
    memset(r, 0, sizeof *r);
    if (sscanf(line, "replay-result %llu %llu %llu %llu %llu %llu %llu %n", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
               &v[6], &n) != 7 || !n)
        return -1;
    r->time_ns = v[0], r->baseline_kib = v[1], r->hwm_kib = v[2], r->rss_peak_kib = v[3];
    r->rss_end_kib = v[4], r->minflt = v[5], r->majflt = v[6];
    snprintf(r->library, sizeof r->library, "%s", line + n);
    r->library[strcspn(r->library, "\n")] = 0;
    return 0;
}
