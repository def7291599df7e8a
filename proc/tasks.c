/*
 * tasks.c - a process's threads as /proc shows them: a thread's stat
 * fields, the threads of a process, and the one to read a process through
 * when its main thread has exited.
 */
#include "proc.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *mlz_proc_stat_fields(pid_t pid, pid_t tid, char *buf, size_t cap)
{
    char path[96];
    if (tid) snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    else snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    if (n <= 0) return NULL;
    buf[n] = 0;
    char *p = strrchr(buf, ')');       /* comm may hold spaces and parens */
    return p && p[1] == ' ' && p[2] ? p + 2 : NULL;
}

unsigned long long mlz_proc_start_ticks(pid_t pid)
{
    char buf[1024];
    unsigned long long t = 0;
    const char *f = mlz_proc_stat_fields(pid, 0, buf, sizeof buf);
    if (!f || sscanf(f, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &t) != 1)
        return 0;
    return t;
}

/* Exited (a zombie, or dead) or gone. */
static int gone_thread(pid_t pid, pid_t tid)
{
    char buf[512];
    const char *f = mlz_proc_stat_fields(pid, tid == pid ? 0 : tid, buf, sizeof buf);
    return !f || f[0] == 'Z' || f[0] == 'X';
}

pid_t mlz_proc_task_find(pid_t pid, int (*pick)(pid_t pid, pid_t tid, void *arg), void *arg)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    pid_t found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid > 0 && tid != pid && pick(pid, tid, arg)) found = tid;
    }
    closedir(d);
    return found;
}

static int running(pid_t pid, pid_t tid, void *arg)
{
    (void)arg;
    return !gone_thread(pid, tid);
}

pid_t mlz_proc_live_tid(pid_t pid)
{
    return gone_thread(pid, pid) ? mlz_proc_task_find(pid, running, NULL) : pid;
}

#define PF_EXITING_FLAG 0x4u    /* linux/sched.h: in do_exit() */

/* A thread not yet a zombie, already in do_exit (killed: tearing down). */
static int exiting_thread(pid_t pid, pid_t tid, void *arg)
{
    (void)arg;
    char buf[512];
    unsigned flags;
    const char *f = mlz_proc_stat_fields(pid, tid == pid ? 0 : tid, buf, sizeof buf);
    return f && f[0] != 'Z' && f[0] != 'X' && sscanf(f, "%*c %*d %*d %*d %*d %*d %u", &flags) == 1 &&
           (flags & PF_EXITING_FLAG);
}

int mlz_proc_exiting(pid_t pid)
{
    return exiting_thread(pid, pid, NULL) || mlz_proc_task_find(pid, exiting_thread, NULL) != 0;
}

int mlz_proc_attach_record(pid_t via, pid_t pid, long long *attached_at, unsigned long long *start_ticks)
{
    char path[96], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/root/tmp/memlyze-%d/state", (int)via, (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    struct stat st;
    if (fd < 0) return -1;
    ssize_t n = !fstat(fd, &st) && S_ISREG(st.st_mode) ? read(fd, buf, sizeof buf - 1) : -1;
    close(fd);
    if (n < 0) return -1;
    buf[n] = 0;
    *attached_at = 0;
    *start_ticks = 0;
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (!strncmp(line, "attached_at=", 12)) *attached_at = atoll(line + 12);
        else if (!strncmp(line, "start_ticks=", 12)) *start_ticks = strtoull(line + 12, NULL, 10);
    }
    return 0;
}
