/*
 * worker.c - one job at a time on a second thread (see worker.h).
 */
#include "worker.h"

#include <sched.h>

static void *worker_main(void *arg)
{
    mlz_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->state != MLZ_WORKER_ASKED && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit) break;
        pthread_mutex_unlock(&w->mu);
        w->job(w->arg);
        pthread_mutex_lock(&w->mu);
        w->state = MLZ_WORKER_DONE;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int mlz_worker_two_cpus(void)
{
    cpu_set_t cpus;
    return !sched_getaffinity(0, sizeof cpus, &cpus) && CPU_COUNT(&cpus) >= 2;
}

int mlz_worker_start(mlz_worker *w, void (*job)(void *arg), void *arg)
{
    w->state = MLZ_WORKER_IDLE;
    w->quit = 0;
    w->job = job;
    w->arg = arg;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w)) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        return -1;
    }
    return 0;
}

void mlz_worker_ask(mlz_worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->state = MLZ_WORKER_ASKED;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int mlz_worker_busy(mlz_worker *w)
{
    pthread_mutex_lock(&w->mu);
    int busy = w->state == MLZ_WORKER_ASKED;
    pthread_mutex_unlock(&w->mu);
    return busy;
}

int mlz_worker_wait(mlz_worker *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->state == MLZ_WORKER_ASKED) pthread_cond_wait(&w->cv, &w->mu);
    int done = w->state == MLZ_WORKER_DONE;
    w->state = MLZ_WORKER_IDLE;
    pthread_mutex_unlock(&w->mu);
    return done;
}

void mlz_worker_stop(mlz_worker *w)
{
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
}
