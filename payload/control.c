/*
 * control.c - starting and stopping the profiler.
 *
 * LD_PRELOAD build: the constructor starts sampling for the whole life of
 * the process and the destructor seals the spool. The injectable build
 * (libmemlyze.so) does nothing at load time unless MEMLYZE_MODE=got asks it
 * to patch GOT slots from its constructor (gotmode.c); the injector calls
 * the entry points in attach.c instead.
 *
 * Semantics: start = sample allocations and track frees; stop = no new
 * samples, frees still tracked (so what was sampled does not turn into fake
 * leaks); shutdown = nothing tracked, spool sealed.
 */
#include "payload.h"
#include "modtab.h"

#include <errno.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

extern const int mlz__preload_build __attribute__((weak));

void mlz__err_line(const char *msg)
{
    /* The one line the payload may ever write to the target's stderr. */
    if (write(2, msg, strlen(msg))) {}
}

int mlz__start(void)
{
    if (mlz__init()) {
        mlz__err_line("memlyze: cannot set up the profiler; allocations pass through untracked\n");
        return -1;
    }
    if (!mlz__g.spool_path[0]) mlz__default_spool_path();
    int rc = mlz__drain_start();
    if (rc == -2) {
        mlz__err_line("memlyze: cannot start the profiler's thread (out of memory or threads); allocations pass "
                      "through untracked\n");
        return -2;
    }
    if (rc) {
        mlz__err_line("memlyze: cannot open the spool file; allocations pass through untracked\n");
        return -1;
    }
    /* This thread may have allocated before the configuration was read
     * (other libraries' constructors run first): its countdown was drawn at
     * the default rate. Other threads draw theirs at their next sample. */
    mlz__tls.s.rate_shift = 0;   /* a new session starts at its own rate */
    if (mlz__tls.s.initialized) mlz_sampler_rearm(&mlz__tls.s, mlz__g.rate);
    atomic_store(&mlz__g.active_free, 1);
    atomic_store(&mlz__g.active_alloc, 1);
    return 0;
}

void mlz__stop(void)
{
    atomic_store(&mlz__g.active_alloc, 0);
}

void mlz__shutdown(void)
{
    atomic_store(&mlz__g.active_alloc, 0);
    atomic_store(&mlz__g.active_free, 0);
    mlz__drain_stop();
}

/* fork: the child gets its own spool (MEMLYZE_FOLLOW_FORK=1) or runs with
 * the profiler off. The parent's samples copied into the child are dropped
 * from tracking either way (the child's map starts over). */
void mlz__atfork_child(void)
{
    int was_active = atomic_load(&mlz__g.active_alloc);
    /* A child profiled on does not walk the modules until it is safe (core/modtab.c). */
    mlz_modtab_fork_child(was_active && mlz__g.follow_fork);
    atomic_store(&mlz__g.active_alloc, 0);
    atomic_store(&mlz__g.active_free, 0);
    mlz__drain_forget();
    mlz__g.pid = (pid_t)syscall(SYS_getpid);
    if (!was_active) return;
    /* The map's entries describe the parent's heap: gone, and no longer
     * ready, so that a snapshot of this child does not read them as its own
     * (a later attach starts afresh). */
    mlz_heapmap_destroy(&mlz__g.map);
    mlz__g.ready = 0;
    if (!mlz__g.follow_fork) return;
    mlz__g.spool_path[0] = 0;
    mlz__config_from_env();
    if (mlz__exec_choose_spool(1)) return;     /* PATH.PID, or memlyze.PID.spool */
    mlz__tls.ring = NULL;
    mlz__start();
}

/* errno is the program's: main() starts with 0, and our probes (spool
 * segments not there, ENOENT) must not show through. */
__attribute__((constructor)) static void payload_load(void)
{
    if (!&mlz__preload_build) return;
    int saved = errno;
    mlz__config_from_env();
    pthread_atfork(mlz_modtab_fork_prepare, mlz_modtab_fork_parent, mlz__atfork_child);
    if (!mlz__exec_choose_spool(0))            /* else a descendant not to follow */
        mlz__start();
    errno = saved;
}

__attribute__((destructor)) static void payload_unload(void)
{
    if (!&mlz__preload_build) return;
    int saved = errno;
    mlz__shutdown();
    errno = saved;
}
