/*
 * churn.c - the allocation workload the payload benchmarks run, with and
 * without the profiler (bench/bench_payload.sh).
 *
 *   churn pair N            ns per malloc+free pair, one thread, N pairs
 *   churn threads T N       T threads, each N operations on a rotating set of
 *                           64 live blocks (16..1024 B); prints ns per op
 *   churn mixed N           one thread, N operations on 64 live blocks of
 *                           16 B..4 KiB (the trace-size benchmark's workload)
 *   churn deep N            as mixed, each malloc from a call chain of
 *                           random depth (1..24 frames of three shapes): a
 *                           walk per sample that the last walk only partly
 *                           saves (bench/compare.sh does not use it)
 *   churn latency N         per-operation latency of N malloc+free pairs:
 *                           median and p99 in ns (with rate 1 every
 *                           malloc is sampled, so this is the sampled path)
 * Every mode ends by printing VmRSS of the process in KiB, and then, when
 * the process has a thread named memlyze-drain (the profiler's), the CPU
 * time in ms of that thread and of the whole process so far ("cpu_ms
 * DRAIN PROCESS": what writing the events costs the target).
 * With CHURN_GO=FILE in the environment, threads mode first waits for FILE
 * to exist (bench/compare.sh attaches the profiler meanwhile).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) v = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return v;
}

/* The CPU time of the thread named memlyze-drain and of the process, in
 * ms. The kernel's per-thread CPU clock of a tid is (~tid << 3) | 6 (sched
 * runtime, per thread: what glibc's pthread_getcpuclockid builds); /proc's
 * tick counts are too coarse for these runs. Read with system calls and
 * stack buffers only: the workload's event count must not change (exact
 * mode's e2e test counts every event). */
struct task_dirent {              /* getdents64's record (linux_dirent64) */
    unsigned long long ino;
    long long off;
    unsigned short reclen;
    unsigned char type;
    char name[];
};

static void print_drain_cpu(void)
{
    int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
    char buf[4096] __attribute__((aligned(8)));
    double drain = -1;
    long n;
    while (dir >= 0 && (n = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct task_dirent *e = (struct task_dirent *)(buf + off);
            off += e->reclen;
            char path[300], comm[64];
            snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->name);
            int fd = open(path, O_RDONLY);
            if (fd < 0) continue;
            ssize_t k = read(fd, comm, sizeof comm - 1);
            close(fd);
            comm[k > 0 ? k : 0] = 0;
            if (strcmp(comm, "memlyze-drain\n")) continue;
            struct timespec ts;
            clockid_t clk = (clockid_t)((~(unsigned)atoi(e->name) << 3) | 6);
            if (clock_gettime(clk, &ts) == 0) drain = (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
        }
    }
    if (dir >= 0) close(dir);
    struct timespec ts;
    if (drain >= 0 && clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0)
        printf("cpu_ms %.1f %.1f\n", drain, (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6);
}

static long n_ops;
static size_t size_mask = 1008;   /* sizes 16 + (random & mask): 16..1024 B */

/* Call chains of varied depth for `deep`: three frame shapes, as in
 * bench/bench_unwind.c; noipa keeps every frame real. */
#define NOI __attribute__((noinline, noipa))
static volatile unsigned sink;
NOI static void *deep_b(unsigned d, size_t n);
NOI static void *deep_c(unsigned d, size_t n);
NOI static void *deep_a(unsigned d, size_t n)
{
    void *p = d ? deep_b(d - 1, n) : malloc(n);
    sink++;
    return p;
}
NOI static void *deep_b(unsigned d, size_t n)
{
    volatile char buf[64];
    buf[0] = (char)d;
    void *p = d ? deep_c(d - 1, n) : malloc(n);
    sink += (unsigned)buf[0];
    return p;
}
NOI static void *deep_c(unsigned d, size_t n)
{
    unsigned a = d * 3, b = d ^ 5;
    void *p = d ? deep_a(d - 1, n) : malloc(n);
    sink += a + b;
    return p;
}

static int deep;

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(unsigned long)arg * 2654435761u + 1;
    void *live[64] = { 0 };
    for (long i = 0; i < n_ops; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned k = (seed >> 16) & 63;
        free(live[k]);
        size_t n = 16 + ((seed >> 8) & size_mask);
        live[k] = deep ? deep_a(seed % 24, n) : malloc(n);
        ((volatile char *)live[k])[0] = 1;
    }
    for (int k = 0; k < 64; k++) free(live[k]);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: churn pair N | threads T N | latency N\n"); return 2; }
    if (!strcmp(argv[1], "pair")) {
        long n = atol(argv[2]);
        double t0 = now_ns();
        for (long i = 0; i < n; i++) {
            void *volatile p = malloc(64);
            free(p);
        }
        printf("%.2f\n", (now_ns() - t0) / (double)n);
    } else if (!strcmp(argv[1], "threads") && argc > 3) {
        int t = atoi(argv[2]);
        n_ops = atol(argv[3]);
        const char *go = getenv("CHURN_GO");
        while (go && access(go, F_OK) != 0) usleep(1000);
        free(malloc(1));    /* a profiler that starts at its first call starts now, untimed */
        pthread_t th[256];
        double t0 = now_ns();
        for (int i = 0; i < t && i < 256; i++) pthread_create(&th[i], NULL, worker, (void *)(long)i);
        for (int i = 0; i < t && i < 256; i++) pthread_join(th[i], NULL);
        printf("%.2f\n", (now_ns() - t0) / (double)n_ops);
    } else if (!strcmp(argv[1], "mixed") || !strcmp(argv[1], "deep")) {
        n_ops = atol(argv[2]);
        deep = !strcmp(argv[1], "deep");
        size_mask = 4080;             /* 16 B..4 KiB */
        double t0 = now_ns();
        worker(NULL);
        printf("%.2f\n", (now_ns() - t0) / (double)n_ops);
    } else if (!strcmp(argv[1], "latency")) {
        long n = atol(argv[2]);
        double *lat = malloc((size_t)n * sizeof *lat);
        for (long i = 0; i < n; i++) {
            double t0 = now_ns();
            void *volatile p = malloc(64);
            free(p);
            lat[i] = now_ns() - t0;
        }
        qsort(lat, (size_t)n, sizeof *lat, cmp_d);
        printf("%.0f %.0f\n", lat[n / 2], lat[n * 99 / 100]);
        free(lat);
    } else {
        return 2;
    }
    printf("rss %ld\n", rss_kib());
    print_drain_cpu();
    return 0;
}
