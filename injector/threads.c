/*
 * threads.c - hold every thread of a process, and give them back.
 *
 * PTRACE_SEIZE does not stop anything by itself and keeps group-stop
 * semantics intact; PTRACE_INTERRUPT then stops each thread in a
 * PTRACE_EVENT_STOP. New threads may appear while we work, so the task list
 * is read again after every round until a round seizes nobody new (every
 * thread we hold is stopped, so only unheld ones could still clone).
 *
 * What each thread was doing is kept so it can be given back unchanged:
 *   - a signal-delivery-stop means a signal was on its way to the thread:
 *     it stays in that stop and the signal goes back in on detach;
 *   - a group stop (SIGSTOP, SIGTSTP...) stays a group stop: the kernel puts
 *     a detached thread back into the group stop that is still in effect;
 *   - an interrupted syscall is redone by the kernel when the thread leaves
 *     its stop with the registers it had (see remote.c).
 */
#include "injector.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char *mlz__thread_name(pid_t pid, pid_t tid, char *buf, size_t cap)
{
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/task/%d/comm", (int)pid, (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, cap - 1) : -1;
    if (fd >= 0) close(fd);
    if (n <= 0) { snprintf(buf, cap, "?"); return buf; }
    buf[n] = 0;
    buf[strcspn(buf, "\n")] = 0;
    return buf;
}

pid_t mlz__ns_tid(pid_t pid, pid_t tid)
{
    char path[96], line[256];
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)tid);
    FILE *f = fopen(path, "re");
    pid_t ns = tid;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "NSpid:", 6)) {
            char *last = strrchr(line, '\t');
            if (last) ns = (pid_t)atoi(last + 1);
        }
    if (f) fclose(f);
    return ns;
}

mlz_thread *mlz__threads_find(mlz_tgroup *g, pid_t tid)
{
    for (int i = 0; i < g->n; i++)
        if (g->t[i].tid == tid) return &g->t[i];
    return NULL;
}

static mlz_thread *add(mlz_tgroup *g, pid_t tid)
{
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 64;
        mlz_thread *t = realloc(g->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        g->t = t;
        g->cap = cap;
    }
    mlz_thread *t = &g->t[g->n++];
    memset(t, 0, sizeof *t);
    t->tid = tid;
    t->state = MLZ_T_RUNNING;
    return t;
}

/* Classify one wait status of a held thread. */
static void took_stop(mlz_tgroup *g, mlz_thread *t, int st)
{
    if (WIFEXITED(st) || WIFSIGNALED(st)) { t->state = MLZ_T_GONE; return; }
    if (!WIFSTOPPED(st)) return;
    int sig = WSTOPSIG(st), ev = st >> 16;
    if (ev == PTRACE_EVENT_STOP) {
        if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) {
            t->state = MLZ_T_GROUP;
            t->group_sig = sig;
            g->group_stopped = 1;
        } else {
            t->state = MLZ_T_TRAP;
        }
    } else if (sig == (SIGTRAP | 0x80)) {
        t->state = MLZ_T_TRAP;        /* a syscall stop: we never ask for one here */
    } else {
        /* A signal was being delivered: hold it, give it back later. */
        t->state = MLZ_T_SIGNAL;
        t->sig = sig;
    }
    if (t->state != MLZ_T_GONE) mlz__pt_getregs(t->tid, &t->regs);
}

static int wait_stopped(mlz_tgroup *g, mlz_thread *t, uint64_t deadline)
{
    while (t->state == MLZ_T_RUNNING) {
        int st, left = (int)((deadline > mlz__now_us() ? deadline - mlz__now_us() : 0) / 1000);
        int rc = mlz__pt_wait(t->tid, &st, left);
        if (rc == MLZ_INJ_ETIMEOUT) {
            char name[64], stat[512];
            const char *f = mlz_proc_stat_fields(g->pid, t->tid, stat, sizeof stat);
            int in_kernel = f && f[0] == 'D';
            mlz__err("thread %d (%s) did not stop within the timeout%s", (int)t->tid,
                     mlz__thread_name(g->pid, t->tid, name, sizeof name),
                     in_kernel ? ": it waits inside the kernel (a vfork until the child execs, a disk, a "
                                 "frozen cgroup); try again later" : "");
            return rc;
        }
        if (rc) { t->state = MLZ_T_GONE; return 0; }
        took_stop(g, t, st);
    }
    return 0;
}

/* A thread on its way out (thread-per-request servers end threads all the
 * time) cannot be seized (EPERM); it is no thread to worry about. */
static int thread_exiting(pid_t pid, pid_t tid)
{
    char buf[512];
    const char *f = mlz_proc_stat_fields(pid, tid, buf, sizeof buf);
    unsigned long flags = 0;
    if (!f || f[0] == 'X' || f[0] == 'Z') return 1;
    /* field 9: PF_EXITING (0x4) */
    return sscanf(f, "%*c %*d %*d %*d %*d %*d %lu", &flags) == 1 && (flags & 0x4);
}

/* One pass over /proc/PID/task: seize and interrupt every new thread.
 * Returns how many were new, or < 0. */
static int seize_new(mlz_tgroup *g)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)g->pid);
    DIR *d = opendir(path);
    if (!d) {
        mlz__err("process %d exited", (int)g->pid);
        return MLZ_INJ_EGONE;
    }
    int added = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0 || mlz__threads_find(g, tid)) continue;
        int rc = mlz__pt_seize(tid);
        if (rc == -ESRCH) continue;            /* exited between readdir and seize */
        if (rc == -EPERM && tid != g->pid && thread_exiting(g->pid, tid)) continue;   /* a dying thread refuses */
        if (rc) {
            char why[256];
            mlz__err("%s", mlz__pt_perm_cause(g->pid, -rc, why, sizeof why));
            closedir(d);
            return -rc == EPERM || -rc == EACCES ? MLZ_INJ_EPERM : MLZ_INJ_EREMOTE;
        }
        mlz_thread *t = add(g, tid);
        if (!t) { closedir(d); mlz__err("out of memory"); return MLZ_INJ_EIO; }
        if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) && errno == ESRCH) t->state = MLZ_T_GONE;
        added++;
    }
    closedir(d);
    return added;
}

int mlz__threads_stop_all(mlz_tgroup *g, int timeout_ms)
{
    uint64_t deadline = mlz__now_us() + (uint64_t)timeout_ms * 1000u;
    g->stop_us = mlz__now_us();
    for (;;) {
        int added = seize_new(g);
        if (added < 0) return added;
        if (mlz__verbose > 1) mlz__note("seized %d new threads", added);
        for (int i = 0; i < g->n; i++) {
            int rc = wait_stopped(g, &g->t[i], deadline);
            if (rc) return rc;
        }
        if (added == 0) break;
    }
    mlz_thread *leader = mlz__threads_find(g, g->pid);
    if (!leader || leader->state == MLZ_T_GONE) {
        mlz__err("process %d exited", (int)g->pid);
        return MLZ_INJ_EGONE;
    }
    return 0;
}

/* Resume a held thread, delivering the signal it was stopped for. Threads in
 * a group stop stay put: resuming them would break the stop. */
static void resume(mlz_thread *t)
{
    if (t->state == MLZ_T_TRAP || t->state == MLZ_T_SIGNAL) {
        int sig = t->state == MLZ_T_SIGNAL ? t->sig : 0;
        if (mlz__pt_cont(t->tid, sig) == 0) { t->state = MLZ_T_RUNNING; t->sig = 0; }
        else t->state = MLZ_T_GONE;
    }
}

/* While the threads run, a signal sent to one (SIGCHLD of a child that
 * exited, a timer) stops it in signal-delivery until we look: it is passed
 * on at once, so the window is really spent running (a server forking every
 * few ms would otherwise get one step per window, and never out of fork). */
static void run_window(mlz_tgroup *g, int ms)
{
    uint64_t end = mlz__now_us() + (uint64_t)ms * 1000u;
    for (;;) {
        uint64_t now = mlz__now_us();
        if (now >= end) return;
        int st;
        pid_t tid = waitpid(-1, &st, __WALL | WNOHANG);
        if (tid <= 0) {
            struct timespec ts = { 0, 200000 };      /* 0.2 ms */
            nanosleep(&ts, NULL);
            continue;
        }
        mlz_thread *t = mlz__threads_find(g, tid);
        if (!t || t->state != MLZ_T_RUNNING) continue;
        took_stop(g, t, st);
        if (t->state == MLZ_T_SIGNAL || t->state == MLZ_T_TRAP) resume(t);
    }
}

int mlz__threads_run(mlz_tgroup *g, int ms)
{
    g->paused_us += mlz__now_us() - g->stop_us;
    for (int i = 0; i < g->n; i++) resume(&g->t[i]);
    run_window(g, ms);
    g->stop_us = mlz__now_us();
    for (int i = 0; i < g->n; i++)
        if (g->t[i].state == MLZ_T_RUNNING && ptrace(PTRACE_INTERRUPT, g->t[i].tid, 0, 0) && errno == ESRCH)
            g->t[i].state = MLZ_T_GONE;
    return mlz__threads_stop_all(g, 2000);
}

int mlz__threads_detach_one(mlz_tgroup *g, pid_t tid)
{
    mlz_thread *t = mlz__threads_find(g, tid);
    if (!t || t->state == MLZ_T_GONE || t->state == MLZ_T_DETACHED) return 0;
    if (t->state == MLZ_T_RUNNING) {
        /* PTRACE_DETACH needs a stopped tracee. */
        int st;
        if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) == 0 && mlz__pt_wait(tid, &st, 2000) == 0) took_stop(g, t, st);
        if (t->state == MLZ_T_GONE) return 0;
    }
    int rc = mlz__pt_detach(tid, t->state == MLZ_T_SIGNAL ? t->sig : 0);
    t->state = rc ? MLZ_T_GONE : MLZ_T_DETACHED;
    return rc == MLZ_INJ_ESRCH ? 0 : rc;
}

void mlz__threads_detach_all(mlz_tgroup *g, pid_t keep)
{
    if (g->stop_us) { g->paused_us += mlz__now_us() - g->stop_us; g->stop_us = 0; }
    for (int i = 0; i < g->n; i++)
        if (g->t[i].tid != keep) mlz__threads_detach_one(g, g->t[i].tid);
}

void mlz__threads_free(mlz_tgroup *g)
{
    free(g->t);
    g->t = NULL;
    g->n = g->cap = 0;
}
