/*
 * waker.h - a futex word that one thread sleeps on and others wake: the
 * drain thread, woken by a ring getting half full or by a flush request.
 *
 * Every wake changes the word before it wakes. A sleeper reads the word
 * (mlz_waker_seen) before it last looks at its work, and sleeps only while
 * the word still holds that value (mlz_waker_wait): a wake that came since,
 * even one made while it was busy and not yet asleep, ends the sleep at
 * once. A plain FUTEX_WAKE without the change was lost in that window, and
 * the drain thread then slept a whole period while the ring filled.
 *
 * Wakes wake every sleeper: the drain thread and a thread waiting for its
 * flush sleep on the same word.
 */
#ifndef MLZ_WAKER_H
#define MLZ_WAKER_H

#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef _Atomic uint32_t mlz_waker;

/* The word's value now: read it before looking at the work. */
static inline uint32_t mlz_waker_seen(mlz_waker *w)
{
    return atomic_load(w);
}

static inline void mlz_waker_wake(mlz_waker *w)
{
    atomic_fetch_add(w, 1);
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps up to ns nanoseconds, unless the word changed since `seen`; a
 * wake or a signal ends it early. */
static inline void mlz_waker_wait(mlz_waker *w, uint32_t seen, long ns)
{
    struct timespec ts = { ns / 1000000000L, ns % 1000000000L };
    syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

#endif
