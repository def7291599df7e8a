/*
 * session.c - the window in which the target holds our state: stop it,
 * borrow a thread at a safe point, give everything back.
 *
 * Sequence: block SIGINT/SIGTERM/SIGHUP/SIGQUIT (a ^C in the window would
 * leave the target with a borrowed thread), hold every thread, find a safe
 * thread (safepoint.c), save its state and map our scratch (remote.c), and
 * take the dynamic loader's lock in it, all while the others are held.
 * The lock is kept until session_end: every dlopen, dlsym or dladdr we make
 * nests inside it, and no other thread can enter a library constructor
 * that might wait for the thread we borrowed (that deadlocks the target
 * once the others run: a plugin's constructor waiting for the main thread).
 * Then those the scan found inside the allocator, the loader or the payload
 * (possible lock holders) go; the rest stay held for at most hold_ms from
 * the stop - so on a busy machine nothing competes with our thread - or
 * until it sleeps (it waits for a lock one of them holds). Where glibc's
 * lock layout is unknown there is no loader lock to take: the others then
 * stay held until our thread sleeps or is done. session_end gives the lock
 * back and undoes everything in reverse, keeping the first error.
 */
#include "injector.h"

#include <stdlib.h>

#include <limits.h>

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <unistd.h>

/* Syscalls that return -EINTR (not a restart code) when the thread is merely
 * stopped and resumed, even with no handler (signal(7), "Interruption ...
 * by stop signals"): epoll_wait, semop, sigtimedwait, and the socket calls
 * on a socket with a receive or send timeout. Our PTRACE_INTERRUPT is such
 * a stop. If no unblocked signal is pending for the thread, the EINTR is
 * ours, and the thread is set to issue the syscall again, as the kernel
 * does for -ERESTARTNOHAND. (A timeout restarts in full.) Not connect: the
 * attempt goes on after the EINTR, and the call issued again would fail
 * with EALREADY, which the program could not expect either. */
static int stop_interrupts(long nr)
{
    switch (nr) {
    case SYS_epoll_wait: case SYS_epoll_pwait:
#ifdef SYS_epoll_pwait2
    case SYS_epoll_pwait2:
#endif
    case SYS_semop: case SYS_semtimedop: case SYS_rt_sigtimedwait:
    case SYS_accept: case SYS_accept4: case SYS_recvfrom: case SYS_recvmsg: case SYS_recvmmsg:
    case SYS_sendto: case SYS_sendmsg: case SYS_sendmmsg:
        return 1;
    default:
        return 0;
    }
}

static int eintr_is_ours(pid_t pid, pid_t tid)
{
    char path[96], line[256];
    unsigned long long pnd = 0, shd = 0, blk = 0;
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "SigPnd: %llx", &pnd);
        sscanf(line, "ShdPnd: %llx", &shd);
        sscanf(line, "SigBlk: %llx", &blk);
    }
    fclose(f);
    return ((pnd | shd) & ~blk) == 0;
}

void mlz__undo_eintr(mlz_tgroup *g)
{
    for (int i = 0; i < g->n; i++) {
        mlz_thread *t = &g->t[i];
        if (t->state != MLZ_T_TRAP && t->state != MLZ_T_GROUP) continue;
        if ((int64_t)t->regs.rax != -EINTR) continue;
        if (!stop_interrupts((long)t->regs.orig_rax)) continue;
        uint8_t insn[2];
        if (mlz__mem_open(t->tid) || mlz__mem_peek(t->regs.rip - 2, insn, 2) || insn[0] != 0x0f || insn[1] != 0x05)
            continue;
        if (!eintr_is_ours(g->pid, t->tid)) continue;
        struct user_regs_struct r = t->regs;
        r.rax = r.orig_rax;
        r.rip -= 2;
        r.orig_rax = (uint64_t)-1;
        if (mlz__pt_setregs(t->tid, &r) == 0) {
            t->regs = r;
            mlz__note("thread %d: syscall %ld interrupted by our stop will be issued again", (int)t->tid, (long)r.rax);
        }
    }
}

static void block_signals(mlz_session *s)
{
    sigset_t b;
    sigemptyset(&b);
    sigaddset(&b, SIGINT);
    sigaddset(&b, SIGTERM);
    sigaddset(&b, SIGHUP);
    sigaddset(&b, SIGQUIT);
    if (sigprocmask(SIG_BLOCK, &b, &s->oldmask) == 0) s->blocked = 1;
}

/* Let every thread but the borrowed one go. */
static void release(void *arg)
{
    mlz_session *s = arg;
    if (!s->others_held) return;
    mlz__undo_eintr(&s->g);
    mlz__threads_detach_all(&s->g, s->r.tid);
    s->pause_all_us = s->g.paused_us;
    s->others_held = 0;
    mlz__note("other threads released");
}

/* libc's pthread_mutex_lock and _unlock: _dl_load_lock is a recursive
 * pthread mutex, taken by ld.so through the same functions. */
static int mutex_fns(pid_t pid, uint64_t *lock_fn, uint64_t *unlock_fn)
{
    static const char *const names[] = { "pthread_mutex_lock", "pthread_mutex_unlock" };
    mlz_proc_module libc;
    mlz_proc_sym fn[2];
    if (mlz_proc_module_find(pid, mlz_proc_is_libc, &libc) || mlz_proc_syms(pid, &libc, names, fn, 2) != 2) return -1;
    *lock_fn = fn[0].addr;
    *unlock_fn = fn[1].addr;
    return 0;
}

/* The borrowed thread takes the loader lock while every other thread is
 * still held (it was free at the scan, so this cannot wait). From then on
 * no thread can enter dlopen, dlclose or a library constructor until we
 * give it back: letting the others go can no longer produce a lock holder
 * that waits for the thread we borrowed. 0 when held. */
static int lock_loader(mlz_remote *r, uint64_t lock_fn)
{
    uint64_t a[6] = { r->loader_lock, 0, 0, 0, 0, 0 }, ret = 1;
    int32_t owner = 0;
    int rc = mlz__remote_call(r, lock_fn, a, &ret, r->timeout_ms);
    if (rc) return rc;
    if (ret != 0) {
        mlz__err("thread %d could not take the dynamic loader's lock (error %llu)", (int)r->tid, (unsigned long long)ret);
        return MLZ_INJ_EREMOTE;
    }
    r->loader_locked = 1;            /* session_end gives it back, whatever follows */
    if (mlz__mem_read(r->loader_lock + 8, &owner, sizeof owner) || owner != r->ns_tid) {
        mlz__err("the dynamic loader's lock names thread %d as its owner, not %d: unknown lock layout", (int)owner,
                 (int)r->ns_tid);
        return MLZ_INJ_EREMOTE;
    }
    mlz__note("thread %d holds the loader lock", (int)r->tid);
    return 0;
}

static int unlock_loader(mlz_remote *r)
{
    uint64_t a[6] = { r->loader_lock, 0, 0, 0, 0, 0 }, ret = 1;
    int rc = mlz__remote_call(r, r->unlock_fn, a, &ret, r->timeout_ms);
    if (rc) return rc;           /* timed out: let go, the self-restore unlocks */
    r->loader_locked = 0;
    if (ret) {
        mlz__err("thread %d could not give the loader lock back (error %llu)", (int)r->tid, (unsigned long long)ret);
        return MLZ_INJ_EREMOTE;
    }
    return 0;
}

int mlz__session_begin(mlz_session *s, const mlz_target *target, pid_t want_tid, int timeout_ms, int hold_ms)
{
    int rc;
    pid_t pid = target->pid;
    pid_t tid;
    uint64_t lock_fn = 0, unlock_fn = 0;
    memset(s, 0, sizeof *s);
    s->g.pid = pid;
    s->g.want = want_tid;
    s->stopped_all = s->remote_active = 0;
    s->t0_us = mlz__now_us();
    block_signals(s);
    /* Reading debug info takes a while: before anything is stopped. */
    mlz_glibc_locks L;
    int have_locks = mlz__locks_find(pid, &L) == 0;
    if (have_locks)
        mlz__note("glibc locks located (%s): loader 0x%llx 0x%llx 0x%llx, stack cache 0x%llx%s", L.source,
                  (unsigned long long)L.rtld[0], (unsigned long long)L.rtld[1], (unsigned long long)L.rtld[2],
                  (unsigned long long)L.stack_cache, L.main_arena ? ", malloc arenas" : "");
    else mlz__note("glibc's lock layout unknown here: relying on unwinding alone");
    int take_loader_lock = have_locks && L.rtld[0] && mutex_fns(pid, &lock_fn, &unlock_fn) == 0;
    /* The target's threads may be many and busy: be scheduled first while
     * we hold them (best effort: needs CAP_SYS_NICE). */
    if (setpriority(PRIO_PROCESS, 0, -20)) {}
    /* Tests widen the window in which the process may exec (attach_exec.sh). */
    const char *delay = getenv("MEMLYZE_TEST_STOP_DELAY_MS");
    if (delay) {
        mlz__note("test: waiting %s ms before stopping the threads", delay);
        usleep((useconds_t)atoi(delay) * 1000);
    }
    rc = mlz__threads_stop_all(&s->g, timeout_ms);
    s->stopped_all = 1;
    if (rc) return rc;
    /* Held, the process can no longer exec; if it did before, what was read
     * of it (modules, symbols, lock addresses, and /proc/PID/mem, which
     * stays bound to the memory it was opened on) is of the old image. */
    mlz__mem_close();
    if (target->image && mlz__image_id(pid) != target->image) {
        char comm[64] = "?";
        mlz__thread_name(pid, pid, comm, sizeof comm);
        mlz__err("process %d ran exec while this command prepared (it now runs %s): nothing was changed in it; "
                 "run the command again", (int)pid, comm);
        return MLZ_INJ_ESTATE;
    }
    mlz__note("holding %d threads of %d", s->g.n, (int)pid);
    /* Now, before any goes: every thread is stopped, none inside a hook. */
    if (target->nsampler) mlz__resample_threads(&s->g, target);
    if ((rc = mlz__safepoint_find(&s->g, have_locks ? &L : NULL, timeout_ms, &tid))) return rc;
    /* Before the borrowed thread's registers are saved: they may change. */
    mlz__undo_eintr(&s->g);
    s->stopped_all = 0;
    s->others_held = 1;
    s->lend_us = mlz__now_us();
    if ((rc = mlz__remote_begin(&s->r, pid, tid, timeout_ms))) {
        s->r.tid = tid;                /* so session_end detaches it */
        return rc;
    }
    s->remote_active = 1;
    if (take_loader_lock) {
        s->r.loader_lock = L.rtld[0];
        s->r.unlock_fn = unlock_fn;
        s->r.ns_tid = mlz__ns_tid(pid, tid);
    }
    if ((rc = mlz__remote_prepare(&s->r))) return rc;
    mlz__note("scratch mapped at 0x%llx", (unsigned long long)s->r.scratch);
    if (take_loader_lock && (rc = lock_loader(&s->r, lock_fn))) return rc;
    /* Threads inside the allocator, the loader or the payload may hold a
     * lock the load needs: they go now. The rest hold none of those. */
    int held = 0;
    for (int i = 0; i < s->g.n; i++) {
        mlz_thread *t = &s->g.t[i];
        if (t->tid == tid) continue;
        if (t->unsafe) mlz__threads_detach_one(&s->g, t->tid);
        else if (t->state != MLZ_T_GONE && t->state != MLZ_T_DETACHED) held++;
    }
    mlz__note("holding %d threads outside the allocator and loader while loading", held);
    /* Held briefly, the others make our work fast on a busy machine (no
     * runnable thread competes with the borrowed one); past hold_ms they
     * go, in case one of them holds a lock our thread waits for. Without
     * the loader lock in our hands, letting them go on a timer could let
     * one into a library constructor that waits for the thread we
     * borrowed: then they stay held until our thread sleeps or is done. */
    if (s->r.loader_locked && !hold_ms) release(s);
    if (s->others_held) {
        s->r.release_at_us = s->r.loader_locked ? s->g.stop_us + (uint64_t)hold_ms * 1000u : UINT64_MAX;
        s->r.release = release;
        s->r.release_arg = s;
    }
    return 0;
}

int mlz__session_end(mlz_session *s)
{
    int rc = 0, e;
    s->r.release_at_us = 0;
    if (s->others_held) release(s);
    if (s->remote_active) {
        pid_t tid = s->r.tid;
        if (s->r.loader_locked && tid && !s->r.let_go) rc = unlock_loader(&s->r);
        e = mlz__remote_end(&s->r);
        if (!rc) rc = e;
        if (s->r.let_go) {
            mlz_thread *t = mlz__threads_find(&s->g, tid);
            if (t) t->state = MLZ_T_DETACHED;      /* let go: it restores itself */
        } else if (tid && s->r.tid) {
            e = mlz__threads_detach_one(&s->g, tid);
            if (!rc) rc = e;
        }
        s->remote_active = 0;
    } else if (s->r.tid) {
        mlz__threads_detach_one(&s->g, s->r.tid);
    }
    if (s->stopped_all) {
        mlz__undo_eintr(&s->g);
        mlz__threads_detach_all(&s->g, 0);
        s->pause_all_us = s->g.paused_us;
        s->stopped_all = 0;
    }
    if (s->lend_us) s->lend_us = mlz__now_us() - s->lend_us;
    mlz__mem_close();
    mlz__threads_free(&s->g);
    if (s->blocked) { sigprocmask(SIG_SETMASK, &s->oldmask, NULL); s->blocked = 0; }
    return rc;
}
