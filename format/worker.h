/*
 * worker.h - one job at a time on a second thread, for the users of the
 * split codec: the reader decodes the next block there while its caller
 * reads this one, the writer encodes the last block while its caller fills
 * the next. The caller sets the job's inputs while the worker is idle,
 * asks, and later waits for the result; nothing else is shared.
 */
#ifndef MLZ_WORKER_H
#define MLZ_WORKER_H

#include <pthread.h>

typedef struct mlz_worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum { MLZ_WORKER_IDLE, MLZ_WORKER_ASKED, MLZ_WORKER_DONE } state;
    int quit;
    void (*job)(void *arg);
    void *arg;
} mlz_worker;

/* 1 when this process may run on two CPUs or more (its affinity, not the
 * machine's CPU count): only then is a second thread worth it. */
int mlz_worker_two_cpus(void);

/* Starts the thread that runs job(arg) once per ask. 0, or -1. */
int mlz_worker_start(mlz_worker *w, void (*job)(void *arg), void *arg);
/* Runs the job on the thread; the worker must be idle. */
void mlz_worker_ask(mlz_worker *w);
/* 1 while an asked job runs. */
int mlz_worker_busy(mlz_worker *w);
/* Waits for the asked job: 1 if one was asked (its results are now the
 * caller's), 0 if none was. The worker is idle after. */
int mlz_worker_wait(mlz_worker *w);
/* Ends the thread (after the job running, if any). */
void mlz_worker_stop(mlz_worker *w);

#endif
