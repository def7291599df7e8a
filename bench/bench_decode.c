/*
 * bench_decode.c - how fast the reader decodes each encoding, on one core:
 * events/s of mlz_reader_next (event by event, every rule checked) on a v1
 * file and on a split-stream file, and of mlz_reader_next_block (whole
 * split blocks as columns, the same checks). Medians of alternating runs.
 * Then block columns again on every CPU the process may use, where the
 * reader decodes the next block on a second thread.
 *
 *   build/bench/bench_decode FILE.v1 FILE.split [RUNS]
 * (bench/bench_trace_size.sh passes the churn trace in both encodings.)
 */
#include "mlz_format.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t sink, beside;

/* Seconds to read every event of path; *events set. */
static double read_events(const char *path, uint64_t *events)
{
    mlz_error e;
    double t0 = now();
    mlz_reader *r = mlz_reader_open(path, MLZ_READ_NO_INDEX, &e);
    if (!r) { fprintf(stderr, "%s: %s\n", path, e.msg); exit(1); }
    mlz_event ev;
    uint64_t n = 0, s = 0;
    int rc;
    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) { n++; s += ev.addr ^ ev.size; }
    if (rc < 0) { fprintf(stderr, "%s: %s\n", path, e.msg); exit(1); }
    mlz_reader_close(r);
    sink += s;
    *events = n;
    return now() - t0;
}

static double read_blocks(const char *path, uint64_t *events)
{
    mlz_error e;
    double t0 = now();
    mlz_reader *r = mlz_reader_open(path, MLZ_READ_NO_INDEX, &e);
    if (!r) { fprintf(stderr, "%s: %s\n", path, e.msg); exit(1); }
    mlz_block_view b;
    uint64_t n = 0, s = 0;
    int rc;
    while ((rc = mlz_reader_next_block(r, &b, &e)) == 1) {
        n += b.n;
        for (uint32_t i = 0; i < b.nalloc; i++) s += b.a_addr[i] ^ b.a_size[i];
        for (uint32_t i = 0; i < b.nfree; i++) s += b.f_addr[i];
    }
    if (rc < 0) { fprintf(stderr, "%s: %s\n", path, e.msg); exit(1); }
    beside += mlz_reader_blocks_beside(r);
    mlz_reader_close(r);
    sink += s;
    *events = n;
    return now() - t0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: bench_decode FILE.v1 FILE.split [RUNS]\n"); return 2; }
    int runs = argc > 3 ? atoi(argv[3]) : 5;
    if (runs < 1 || runs > 99) runs = 5;
    double t[4][99];
    uint64_t n[4];
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof all, &all)) { perror("sched_getaffinity"); return 1; }
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) { CPU_SET(c, &one); break; }
    int ncpu = CPU_COUNT(&all);
    for (int i = 0; i < runs; i++) {
        sched_setaffinity(0, sizeof one, &one);   /* one core: no read-ahead */
        t[0][i] = read_events(argv[1], &n[0]);
        t[1][i] = read_events(argv[2], &n[1]);
        t[2][i] = read_blocks(argv[2], &n[2]);
        sched_setaffinity(0, sizeof all, &all);
        t[3][i] = read_blocks(argv[2], &n[3]);
    }
    char both[64];
    snprintf(both, sizeof both, "split, blocks, %d CPUs", ncpu);
    const char *what[] = { "v1, event by event", "split, event by event", "split, block columns", both };
    double med[4];
    for (int k = 0; k < 4; k++) {
        qsort(t[k], (size_t)runs, sizeof t[k][0], cmp_d);
        med[k] = t[k][runs / 2];
        printf("decode %-24s %10llu events  %7.3f s  %6.1f M events/s\n", what[k],
               (unsigned long long)n[k], med[k], (double)n[k] / med[k] / 1e6);
    }
    printf("blocks decoded by the caller beside the read-ahead thread: %llu\n", (unsigned long long)beside);
    printf("split block columns vs v1 events: %.2fx faster (goals: v1 >= 50, split >= 100 M events/s)\n",
           med[0] / med[2]);
    return sink == 42;
}
