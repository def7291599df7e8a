/*
 * server.c - the demo "server" for `make demo`: worker threads handle fake
 * requests. Each request allocates and frees a session and a parse buffer
 * (churn), refreshes a bounded cache (steady), and - the bug to find -
 * appends its request record to a history list that is never trimmed.
 * Runs until killed.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

struct record { struct record *next; char line[200]; };
static struct record *history;            /* grows forever: the leak */
static pthread_mutex_t history_lock = PTHREAD_MUTEX_INITIALIZER;

#define CACHE_SLOTS 512
static char *cache[CACHE_SLOTS];           /* bounded: replaced, never grows */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

NOINLINE static void remember_request(unsigned id)
{
    struct record *r = malloc(sizeof *r);
    snprintf(r->line, sizeof r->line, "GET /item/%u HTTP/1.1", id);
    pthread_mutex_lock(&history_lock);
    r->next = history;
    history = r;
    pthread_mutex_unlock(&history_lock);
}

NOINLINE static void refresh_cache(unsigned id)
{
    char *v = malloc(1024 + id % 1024);
    memset(v, 'c', 64);
    pthread_mutex_lock(&cache_lock);
    free(cache[id % CACHE_SLOTS]);
    cache[id % CACHE_SLOTS] = v;
    pthread_mutex_unlock(&cache_lock);
}

NOINLINE static size_t parse_request(unsigned id)
{
    char *buf = malloc(4096);
    int n = snprintf(buf, 4096, "GET /item/%u HTTP/1.1\r\nHost: demo\r\n\r\n", id);
    size_t words = 0;
    for (int i = 0; i < n; i++) words += buf[i] == ' ';
    free(buf);
    return words;
}

NOINLINE static void handle_request(unsigned id)
{
    char *session = calloc(1, 8192);
    session[0] = (char)parse_request(id);
    refresh_cache(id);
    remember_request(id);
    free(session);
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(unsigned long)arg * 1000000u;
    for (;;) {
        handle_request(id++);
        struct timespec ts = { 0, 100000 };   /* ~10k requests/s per worker */
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 4;
    pthread_t t;
    for (int i = 0; i < n; i++) pthread_create(&t, NULL, worker, (void *)(unsigned long)i);
    printf("demo server %d running with %d workers\n", (int)getpid(), n);
    fflush(stdout);
    for (;;) pause();
}
