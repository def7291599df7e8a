/*
 * resample.c - a re-attach's fresh start for every thread's sampler.
 *
 * The payload stays mapped after a detach, and with it each thread's
 * sampler state: a countdown drawn at that session's rate. A new session
 * at another rate would have every thread but the borrowed one spend that
 * old countdown first: after a session at 512 KiB, an exact (-r 1) one
 * missed each thread's first half-megabyte of allocations, and after one
 * at 4 KiB, a session at 64 MiB weighed a sample per thread as 64 MiB.
 *
 * While every thread is held stopped, before any hook is live, each gets
 * its state cleared as a new thread has it: countdown 0 and not
 * initialized, so its next allocation draws a countdown at the new rate
 * and takes its chance against it (an unbiased start, hooks.c), and no
 * overload shift. The state is initial-exec TLS, at the same offset from
 * every thread's fs base (memlyze_info tells it). Best effort: a word that
 * cannot be written leaves that thread as it was.
 */
#include "injector.h"

#include <errno.h>
#include <sys/ptrace.h>

/* Zeroes len bytes at addr in a thread we hold stopped, a word at a time. */
static int zero_bytes(pid_t tid, uint64_t addr, int len)
{
    for (uint64_t w = addr & ~7ull; w < addr + (uint64_t)len; w += 8) {
        errno = 0;
        long v = ptrace(PTRACE_PEEKDATA, tid, (void *)w, 0);
        if (errno) return -1;
        unsigned char *b = (unsigned char *)&v;
        for (int i = 0; i < 8; i++)
            if (w + (uint64_t)i >= addr && w + (uint64_t)i < addr + (uint64_t)len) b[i] = 0;
        if (ptrace(PTRACE_POKEDATA, tid, (void *)w, (void *)v)) return -1;
    }
    return 0;
}

void mlz__resample_threads(const mlz_tgroup *g, const mlz_target *t)
{
    int done = 0;
    for (int i = 0; i < g->n; i++) {
        const mlz_thread *th = &g->t[i];
        if (th->state == MLZ_T_GONE || th->state == MLZ_T_DETACHED || th->state == MLZ_T_RUNNING || !th->regs.fs_base)
            continue;
        int ok = 1;
        for (int k = 0; k < t->nsampler && ok; k++)
            ok = zero_bytes(th->tid, th->regs.fs_base + (uint64_t)t->sampler_at[k], t->sampler_width[k]) == 0;
        done += ok;
    }
    mlz__note("sampler state reset in %d of %d threads", done, g->n);
}
