/*
 * handoff.c - blocks allocated by some threads and freed by others: two
 * producers malloc blocks and pass them through a small queue to two
 * consumers, which free them. Each FREE lands in another thread's event
 * ring than its ALLOC, so a trace shows the blocks as freed only if the
 * drain thread merges the rings in time order.
 *   handoff [BLOCKS]   (default 200000; prints "handoff: N blocks")
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define QCAP 64

static void *queue[QCAP];
static unsigned qhead, qtail;
static long remaining;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER, not_empty = PTHREAD_COND_INITIALIZER;

static void *produce(void *arg)
{
    long n = (long)arg;
    for (long i = 0; i < n; i++) {
        void *p = malloc(16 + (size_t)(i % 200));
        pthread_mutex_lock(&mu);
        while (qtail - qhead == QCAP) pthread_cond_wait(&not_full, &mu);
        queue[qtail++ % QCAP] = p;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

static void *consume(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (qtail == qhead && remaining > 0) pthread_cond_wait(&not_empty, &mu);
        if (remaining == 0) {
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        void *p = queue[qhead++ % QCAP];
        if (--remaining == 0) pthread_cond_broadcast(&not_empty);
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&mu);
        free(p);
    }
}

int main(int argc, char **argv)
{
    long blocks = argc > 1 ? atol(argv[1]) : 200000;
    remaining = blocks;
    pthread_t p[2], c[2];
    for (int i = 0; i < 2; i++) pthread_create(&c[i], NULL, consume, NULL);
    pthread_create(&p[0], NULL, produce, (void *)(blocks / 2));
    pthread_create(&p[1], NULL, produce, (void *)(blocks - blocks / 2));
    for (int i = 0; i < 2; i++) pthread_join(p[i], NULL);
    for (int i = 0; i < 2; i++) pthread_join(c[i], NULL);
    printf("handoff: %ld blocks\n", blocks);
    return 0;
}
