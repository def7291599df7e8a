/*
 * holder.c - a long-running target for snapshot and attach tests: holds a
 * known heap (sizes 16 B .. 1 MiB from distinct sites), then lets CHURN
 * threads (argv[1], default 16) malloc/free continuously until standard
 * input closes. Prints "ready" once the held heap is complete, and a
 * checksum of the churn at the end so tests can see nothing changed.
 *   held: site_16 1000 x 16, site_4k 100 x 4096, site_64k 20 x 65536,
 *         site_1m 4 x 1 MiB  (total 16000 + 409600 + 1310720 + 4194304)
 */
#include <pthread.h>
#include <time.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
static void *held[2000];
static int nheld;
static void *volatile sink;
NOINLINE void site_16(void) { held[nheld++] = sink = malloc(16); }
NOINLINE void site_4k(void) { held[nheld++] = sink = malloc(4096); }
NOINLINE void site_64k(void) { held[nheld++] = sink = malloc(65536); }
NOINLINE void site_1m(void) { held[nheld++] = sink = malloc(1 << 20); }

static atomic_int stop;
static atomic_ulong checksum;

static void *churn(void *arg)
{
    unsigned s = (unsigned)(unsigned long)arg + 1;
    unsigned long sum = 0, n = 0;
    void *live[32] = { 0 };
    while (!atomic_load(&stop)) {
        s = s * 1103515245u + 12345u;
        unsigned k = (s >> 16) & 31;
        if (live[k]) { sum += ((unsigned char *)live[k])[0]; free(live[k]); }
        live[k] = malloc(16 + (s >> 8) % 2000);
        ((unsigned char *)live[k])[0] = (unsigned char)k;
        /* Busy but not hogging: the 2-core test machines must still run
         * the tools that observe this process. */
        if (++n % 256 == 0) usleep(100);
    }
    for (int k = 0; k < 32; k++) free(live[k]);
    atomic_fetch_add(&checksum, sum % 1000003 + n * 0);
    return NULL;
}

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 16;
    for (int i = 0; i < 1000; i++) site_16();
    for (int i = 0; i < 100; i++) site_4k();
    for (int i = 0; i < 20; i++) site_64k();
    for (int i = 0; i < 4; i++) site_1m();
    pthread_t t[64];
    for (int i = 0; i < nt && i < 64; i++) pthread_create(&t[i], NULL, churn, (void *)(long)i);
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {}
    atomic_store(&stop, 1);
    for (int i = 0; i < nt && i < 64; i++) pthread_join(t[i], NULL);
    printf("held %d\n", nheld);
    return 0;
}
