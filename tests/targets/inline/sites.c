/*
 * sites.c - the allocation sites of the inline-hook targets. The allocator
 * behind them is whatever the program is linked with: its own malloc in the
 * executable (own_alloc.c), jemalloc linked statically, or a -Bsymbolic
 * library (bsym_alloc.c). Calls from here to malloc are direct when the
 * allocator is in the executable: no GOT slot, only an inline hook sees them.
 *
 *   sites [THREADS]   held: site_malloc 100000 B, site_calloc 50000 B,
 *                     site_realloc 60000 B, plus THREADS x site_thread
 *                     8000 B; churn frees everything it allocates; every
 *                     block's contents are checked before it is freed.
 *   sites THREADS serve   for attach tests: THREADS threads churn in bursts
 *                     (data checked) until SIGTERM; each SIGUSR1 makes main run
 *                     site_malloc once more (100000 B more held) and print
 *                     "sites done N"; on SIGTERM prints "serve: data ok|CORRUPT".
 *   SITES_DETACH=1    (under MEMLYZE_MODE=got) while THREADS threads churn,
 *                     call memlyze_detach; print the first 16 code bytes of
 *                     malloc, free, calloc, realloc before and after, with
 *                     their link-time addresses, for comparison with the file.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_MALLOC 1000
static void *held_malloc[N_MALLOC], *held_calloc[10], *held_realloc[20];
static volatile int bad;

__attribute__((noinline)) void site_malloc(void)
{
    for (int i = 0; i < N_MALLOC; i++) {
        held_malloc[i] = malloc(100);
        memset(held_malloc[i], i & 0xff, 100);
    }
}

__attribute__((noinline)) void site_calloc(void)
{
    for (int i = 0; i < 10; i++) {
        held_calloc[i] = calloc(10, 500);
        for (int k = 0; k < 5000; k++)
            if (((unsigned char *)held_calloc[i])[k]) bad = 1;
    }
}

/* grows each block 1000 -> 3000 bytes: 20 x 3000 live */
__attribute__((noinline)) void site_realloc(void)
{
    for (int i = 0; i < 20; i++) {
        char *p = malloc(1000);
        memset(p, 'r', 1000);
        p = realloc(p, 3000);
        for (int k = 0; k < 1000; k++)
            if (p[k] != 'r') bad = 1;
        held_realloc[i] = p;
    }
}

/* allocates and frees, checking every block's pattern */
__attribute__((noinline)) static void churn(unsigned seed, int rounds)
{
    void *b[64] = { 0 };
    size_t sz[64] = { 0 };
    for (int r = 0; r < rounds; r++) {
        seed = seed * 1103515245u + 12345u;
        int k = (int)(seed >> 16) % 64;
        if (b[k]) {
            for (size_t j = 0; j < sz[k]; j++)
                if (((unsigned char *)b[k])[j] != (unsigned char)(k + sz[k])) bad = 1;
            free(b[k]);
            b[k] = NULL;
        } else {
            sz[k] = 16 + (seed >> 8) % 600;
            b[k] = malloc(sz[k]);
            memset(b[k], (int)(k + sz[k]) & 0xff, sz[k]);
        }
    }
    for (int k = 0; k < 64; k++) free(b[k]);
}

__attribute__((noinline)) void *site_thread(void *arg)
{
    void *p = malloc(8000);
    memset(p, 1, 8000);
    churn((unsigned)(uintptr_t)arg, 20000);
    return p;
}

static volatile sig_atomic_t usr1, term;
static void on_sig(int sig) { if (sig == SIGUSR1) usr1++; else term = 1; }

/* Bursts of 64 operations every 10 ms: allocating whenever memlyze stops
 * the threads, without a flood of events in exact mode (each attach cycle
 * finalizes its trace). */
static void *serve_churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    while (!term) {
        churn(seed++, 64);
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static int serve(int threads)
{
    signal(SIGUSR1, on_sig);
    signal(SIGTERM, on_sig);
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, serve_churn, (void *)(uintptr_t)(i + 1000));
    printf("serving\n");
    fflush(stdout);
    int done = 0;
    while (!term) {
        if (usr1 > done) {
            done++;
            site_malloc();   /* the previous round's blocks stay allocated, unreachable: held */
            printf("sites done %d\n", done);
            fflush(stdout);
        }
        struct timespec ts = { 0, 2 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("serve: data %s\n", bad ? "CORRUPT" : "ok");
    return bad ? 3 : 0;
}

static int first_bias(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    *(uintptr_t *)arg = info->dlpi_addr;
    return 1;
}

static void print_code(const char *when)
{
    static const char *const names[] = { "malloc", "free", "calloc", "realloc" };
    void *const fns[] = { (void *)malloc, (void *)free, (void *)calloc, (void *)realloc };
    uintptr_t bias = 0;
    dl_iterate_phdr(first_bias, &bias);
    for (int i = 0; i < 4; i++) {
        printf("code %s %s %#lx ", when, names[i], (unsigned long)((uintptr_t)fns[i] - bias));
        for (int k = 0; k < 16; k++) printf("%02x", ((unsigned char *)fns[i])[k]);
        printf("\n");
    }
}

static void *churner(void *arg)
{
    churn((unsigned)(uintptr_t)arg, 200000);
    return NULL;
}

static int detach_under_load(int threads)
{
    int (*detach)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "memlyze_detach");
    if (!detach) { printf("no memlyze_detach\n"); return 1; }
    print_code("attached");
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, churner, (void *)(uintptr_t)(i + 100));
    struct timespec ts = { 0, 20 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    int rc = detach();
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    print_code("detached");
    printf("detach rc %d\n", rc);
    return 0;
}

#ifdef BSYM
void lib_site(void);
#endif

int main(int argc, char **argv)
{
#ifdef BSYM
    lib_site();
#endif
    int threads = argc > 1 ? atoi(argv[1]) : 4;
    if (threads < 1 || threads > 64) threads = 4;
    if (argc > 2 && !strcmp(argv[2], "serve")) return serve(threads);
    site_malloc();
    site_calloc();
    site_realloc();
    pthread_t t[64];
    void *kept[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, site_thread, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < threads; i++) pthread_join(t[i], &kept[i]);
    churn(7, 50000);
    if (getenv("SITES_DETACH") && detach_under_load(threads)) bad = 1;
    churn(8, 50000);   /* the program runs on */
    for (int i = 0; i < N_MALLOC; i++)
        for (int k = 0; k < 100; k++)
            if (((unsigned char *)held_malloc[i])[k] != (i & 0xff)) bad = 1;
    printf("sites: %d threads, data %s\n", threads, bad ? "CORRUPT" : "ok");
    fflush(stdout);
    return bad ? 3 : 0;
}
