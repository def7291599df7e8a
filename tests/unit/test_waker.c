/*
 * test_waker.c - core/waker.h: a wake made after the sleeper read the word
 * (while it was still busy, before it slept) ends its sleep at once; a
 * wake while it sleeps ends it; without a wake it sleeps its time.
 */
#include "../check.h"
#include "waker.h"

#include <pthread.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The drain's lost wake: it read the word, then a ring got half full and
 * woke it while it was busy; its sleep of 2 s must not happen. */
static void test_wake_before_sleep_not_lost(void)
{
    mlz_waker w = 0;
    uint32_t seen = mlz_waker_seen(&w);
    mlz_waker_wake(&w);
    double t0 = now_s();
    mlz_waker_wait(&w, seen, 2000000000L);
    CHECK(now_s() - t0 < 1.0);
}

static mlz_waker g_w;
static _Atomic int g_asleep;
static double g_slept;

static void *sleeper(void *arg)
{
    (void)arg;
    uint32_t seen = mlz_waker_seen(&g_w);
    atomic_store(&g_asleep, 1);
    double t0 = now_s();
    mlz_waker_wait(&g_w, seen, 5000000000L);
    g_slept = now_s() - t0;
    return NULL;
}

/* Woken while asleep (or about to be): back well before its 5 s. */
static void test_wake_while_asleep(void)
{
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, sleeper, NULL) == 0);
    while (!atomic_load(&g_asleep)) usleep(1000);
    usleep(50000);
    mlz_waker_wake(&g_w);
    pthread_join(t, NULL);
    CHECK(g_slept < 2.5);
}

/* No wake: the whole time, and a stale value returns at once. */
static void test_sleeps_without_wake(void)
{
    mlz_waker w = 7;
    double t0 = now_s();
    mlz_waker_wait(&w, 7, 100000000L);
    CHECK(now_s() - t0 >= 0.09);
    t0 = now_s();
    mlz_waker_wait(&w, 6, 2000000000L);
    CHECK(now_s() - t0 < 1.0);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_wake_before_sleep_not_lost);
    RUN(test_wake_while_asleep);
    RUN(test_sleeps_without_wake);
    CHECK_EXIT();
}
