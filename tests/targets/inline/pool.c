/*
 * pool.c - a program with its own pool allocator, for --hook: pool_alloc,
 * pool_calloc, pool_realloc and pool_free carve blocks out of 64 KiB chunks
 * the pool takes from malloc, and keep freed blocks on free lists. They are
 * ordinary functions of the executable, called directly, not exported.
 *
 * After "ready" it waits for a line on stdin, then (with a second thread
 * allocating from the pool all along):
 *   site_pool_malloc   1000 x pool_alloc(100)          kept: 100000 B
 *   site_pool_calloc     50 x pool_calloc(10, 20)      kept:  10000 B
 *   site_pool_realloc    10 x pool_realloc(32 -> 320)  kept:   3200 B
 *   site_pool_temp      100 x pool_alloc(64), all freed:          0 B
 *   site_plain           10 x malloc(1000)             kept:  10000 B
 * checks every block's contents, prints "done", and exits when stdin
 * closes (the churn thread's blocks are all freed by then).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
#define CHUNK (64u << 10)
#define NCLASS 64                      /* 16-byte classes up to 1 KiB */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *chunk;
static size_t used = CHUNK;
static void *free_list[NCLASS];

/* Each block carries its class in the 16 bytes before it. */
NOINLINE void *pool_alloc(size_t n)
{
    size_t c = (n + 15) / 16;
    if (c == 0 || c >= NCLASS) return NULL;
    pthread_mutex_lock(&lock);
    void *p = free_list[c];
    if (p) {
        free_list[c] = *(void **)p;
    } else {
        if (used + 16 + c * 16 > CHUNK) {
            chunk = malloc(CHUNK);     /* the pool's own memory: not the program's allocation */
            used = 0;
        }
        char *b = chunk ? chunk + used : NULL;
        if (b) {
            *(size_t *)b = c;
            p = b + 16;
            used += 16 + c * 16;
        }
    }
    pthread_mutex_unlock(&lock);
    return p;
}

NOINLINE void pool_free(void *p)
{
    if (!p) return;
    size_t c = *(size_t *)((char *)p - 16);
    pthread_mutex_lock(&lock);
    *(void **)p = free_list[c];
    free_list[c] = p;
    pthread_mutex_unlock(&lock);
}

NOINLINE void *pool_calloc(size_t n, size_t m)
{
    void *p = pool_alloc(n * m);
    if (p) memset(p, 0, n * m);
    return p;
}

NOINLINE void *pool_realloc(void *p, size_t n)
{
    void *q = pool_alloc(n);
    if (q && p) {
        size_t old = *(size_t *)((char *)p - 16) * 16;
        memcpy(q, p, old < n ? old : n);
        pool_free(p);
    }
    return q;
}

static void *keep[1200];
static int nkeep;
NOINLINE void site_pool_malloc(void) { keep[nkeep] = pool_alloc(100); memset(keep[nkeep++], 1, 100); }
NOINLINE void site_pool_calloc(void) { keep[nkeep++] = pool_calloc(10, 20); }
NOINLINE void site_pool_realloc(char **p) { *p = pool_realloc(*p, 320); }   /* not a tail call: the site keeps its frame */
NOINLINE void site_pool_temp(void) { void *v[100]; for (int i = 0; i < 100; i++) v[i] = pool_alloc(64); for (int i = 0; i < 100; i++) pool_free(v[i]); }
NOINLINE void site_plain(void) { keep[nkeep] = malloc(1000); memset(keep[nkeep++], 2, 1000); }

static atomic_int stop;
static void *churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        void *v[16];
        for (int i = 0; i < 16; i++) v[i] = pool_alloc(16 + 16 * (size_t)i);
        for (int i = 0; i < 16; i++) pool_free(v[i]);
        usleep(200);
    }
    return NULL;
}

int main(void)
{
    char buf[64];
    pthread_t t;
    pthread_create(&t, NULL, churn, NULL);
    printf("ready\n");
    fflush(stdout);
    if (read(0, buf, sizeof buf) <= 0) return 1;
    for (int i = 0; i < 1000; i++) site_pool_malloc();
    for (int i = 0; i < 50; i++) site_pool_calloc();
    for (int i = 0; i < 10; i++) {
        char *p = pool_alloc(32);
        memset(p, 3, 32);
        site_pool_realloc(&p);
        keep[nkeep++] = p;
        for (int k = 0; k < 32; k++) if (p[k] != 3) { printf("realloc lost data\n"); return 1; }
    }
    site_pool_temp();
    for (int i = 0; i < 10; i++) site_plain();
    for (int i = 0; i < 1000; i++)
        for (int k = 0; k < 100; k++) if (((char *)keep[i])[k] != 1) { printf("pool data changed\n"); return 1; }
    printf("done\n");
    fflush(stdout);
    while (read(0, buf, sizeof buf) > 0) {}
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    printf("data ok\n");
    return 0;
}
