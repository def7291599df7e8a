/*
 * known.c - a target with known live allocations from distinct sites, for
 * the end-to-end tests. Sites (live bytes at exit):
 *   site_malloc   100 x 1000 B            = 100000
 *   site_calloc    50 x 10*100 B          =  50000
 *   site_strdup    10 x strdup("12345678") =     90
 *   site_thread     4 threads x 100 x 500 = 200000
 *   site_realloc   20 x realloc(16 -> 3000) =  60000
 * plus a churn of malloc/free pairs that leaves nothing behind.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))
static void *keep[1000];
static int nkeep;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *volatile sink;

static void hold(void *p) { pthread_mutex_lock(&mu); keep[nkeep++] = p; pthread_mutex_unlock(&mu); }

NOINLINE void *site_malloc(size_t n) { void *p = malloc(n); sink = p; return p; }
NOINLINE void *site_calloc(size_t n) { void *p = calloc(n, 100); sink = p; return p; }
NOINLINE char *site_strdup(void) { char *p = strdup("12345678"); sink = p; return p; }
NOINLINE void *site_thread(size_t n) { void *p = malloc(n); sink = p; return p; }
NOINLINE void *site_realloc(void) { void *p = malloc(16); sink = p; p = realloc(p, 3000); sink = p; return p; }
/* A local volatile keeps the compiler from eliding the pair; the shared
 * `sink` must not be used here: two threads would free the same block. */
NOINLINE void churn(void) { for (int i = 0; i < 20000; i++) { void *volatile p = malloc(32 + i % 200); free(p); } }

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 100; i++) hold(site_thread(500));
    churn();
    return NULL;
}

int main(void)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 100; i++) hold(site_malloc(1000));
    for (int i = 0; i < 50; i++) hold(site_calloc(10));
    for (int i = 0; i < 10; i++) hold(site_strdup());
    for (int i = 0; i < 20; i++) hold(site_realloc());
    churn();
    /* free(NULL) reads the filter like any pointer; in exact mode (every
     * cell set) it reaches the hook's cold half, which must let it by. */
    void *volatile none = NULL;
    for (int i = 0; i < 10; i++) free(none);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("known: %d blocks held\n", nkeep);
    return 0;
}
