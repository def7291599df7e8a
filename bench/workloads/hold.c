/*
 * hold.c - holds N live blocks (from 8 sites) while T threads churn, for
 * bench_snapshot.sh. Every 100 ms it prints the churn's operations in that
 * window, so the benchmark can see whether a snapshot slows the target.
 *   hold N T
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static atomic_ulong ops;

#define SITE(k) __attribute__((noinline)) static void *site##k(void) { return malloc(32 + 8 * k); }
SITE(0) SITE(1) SITE(2) SITE(3) SITE(4) SITE(5) SITE(6) SITE(7)
static void *(*const sites[8])(void) = { site0, site1, site2, site3, site4, site5, site6, site7 };

static void *churn(void *arg)
{
    unsigned s = (unsigned)(unsigned long)arg + 1;
    for (;;) {
        s = s * 1103515245u + 12345u;
        void *volatile p = malloc(16 + (s >> 8) % 512);
        free(p);
        atomic_fetch_add_explicit(&ops, 1, memory_order_relaxed);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10000;
    int t = argc > 2 ? atoi(argv[2]) : 1;
    void **keep = malloc((size_t)n * sizeof *keep);
    for (long i = 0; i < n; i++) keep[i] = sites[i % 8]();
    pthread_t th;
    for (int i = 0; i < t; i++) pthread_create(&th, NULL, churn, (void *)(long)i);
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        unsigned long a = atomic_load(&ops);
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        printf("%lu\n", atomic_load(&ops) - a);
        fflush(stdout);
    }
}
