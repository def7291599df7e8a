/*
 * preflight.c - refuse clearly before touching the target.
 *
 * Each refusal names its cause in one line. Everything is read from /proc
 * without ptrace, so a refused target is never stopped, not even briefly.
 * The kernel has the last word on permission (PTRACE_SEIZE); its EPERM is
 * explained by mlz__pt_perm_cause() with the same facts.
 */
#include "injector.h"
#include "info.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <unistd.h>

/* A child between vfork and exec runs on its parent's memory: code injected
 * into it would change the parent. kcmp says whether two processes share an
 * address space. */
static pid_t shares_memory_with_parent(pid_t pid)
{
    char buf[1024];
    long ppid = 0;
    const char *f = mlz_proc_stat_fields(pid, 0, buf, sizeof buf);
    if (!f || sscanf(f, "%*c %ld", &ppid) != 1 || ppid <= 1) return 0;
    return syscall(SYS_kcmp, pid, (pid_t)ppid, KCMP_VM, 0, 0) == 0 ? (pid_t)ppid : 0;
}

/* Whether a mapped payload is sampling, from its memlyze_info descriptor
 * (payload/info.h): 1 active, 0 inert (detached, or an attach interrupted
 * before memlyze_attach ran), 2 attached without its tables (a fork child
 * of an attached process: the GOT slots patched, nothing recorded), -1
 * unknown. Read from outside: nothing stops. */
static int payload_active(pid_t pid, const mlz_proc_module *m, mlz_target *t)
{
    struct memlyze_info d;
    uint64_t at;
    int32_t v;
    int64_t tpoff;
    if (mlz_proc_payload_info(pid, m, &d, &at) || mlz_proc_read(pid, d.attached_addr, &v, sizeof v)) return -1;
    /* An inert payload of this layout: where each thread's sampler is. */
    if (!v && memlyze_info_readable(&d) && mlz_proc_read(pid, d.sampler_tpoff_addr, &tpoff, sizeof tpoff) == 0 &&
        tpoff > -(1 << 24) && tpoff < (1 << 24) && d.sampler_countdown < 64 && d.sampler_initialized < 64 &&
        d.sampler_rate_shift < 64) {
        uint32_t off[3] = { d.sampler_countdown, d.sampler_initialized, d.sampler_rate_shift };
        int width[3] = { 8, 4, 4 };
        for (int i = 0; i < 3; i++) t->sampler_at[i] = tpoff + off[i], t->sampler_width[i] = width[i];
        t->nsampler = 3;
    }
    int32_t ready = 1;
    if (v && mlz_proc_read(pid, d.ready_addr, &ready, sizeof ready)) ready = 1;
    return v ? (ready ? 1 : 2) : 0;
}

static int read_status(mlz_target *t, int *tracer, char *state)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/status", (int)t->pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    *tracer = 0;
    *state = '?';
    while (fgets(line, sizeof line, f)) {
        unsigned u;
        int v;
        char c;
        if (sscanf(line, "Name: %63[^\n]", t->comm) == 1) continue;
        if (sscanf(line, "State: %c", &c) == 1) { *state = c; continue; }
        if (sscanf(line, "TracerPid: %d", &v) == 1) { *tracer = v; continue; }
        if (sscanf(line, "Uid: %*u %u", &u) == 1) { t->uid = u; continue; }
        if (sscanf(line, "Seccomp: %d", &v) == 1) { t->seccomp = v; continue; }
    }
    fclose(f);
    return 0;
}

/* A thread with a tracer of its own (strace -p TID follows one thread):
 * its tracer's pid in *arg. */
static int traced(pid_t pid, pid_t tid, void *arg)
{
    char path[96], line[256];
    int tracer = 0;
    snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "TracerPid: %d", &tracer) == 1) break;
    fclose(f);
    *(int *)arg = tracer;
    return tracer != 0;
}

static void comm_of(pid_t pid, char *buf, size_t cap)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
    FILE *f = fopen(path, "r");
    buf[0] = 0;
    if (f) {
        if (fgets(buf, (int)cap, f)) buf[strcspn(buf, "\n")] = 0;
        fclose(f);
    }
}

/* e_ident and e_machine of the executable: 64-bit x86 only (-1 if not).
 * 1 if it names a dynamic loader (PT_INTERP), else 0. */
static int check_exe(pid_t pid)
{
    char path[64];
    Elf64_Ehdr eh;
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? -2 : 0;     /* unreadable: let ptrace decide */
    ssize_t n = pread(fd, &eh, sizeof eh, 0);
    int dynamic = 0;
    if (n == (ssize_t)sizeof eh && eh.e_phentsize == sizeof(Elf64_Phdr)) {
        for (unsigned i = 0; i < eh.e_phnum && i < 256 && !dynamic; i++) {
            Elf64_Phdr ph;
            if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph) break;
            dynamic = ph.p_type == PT_INTERP;
        }
    }
    close(fd);
    if (n < (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG)) return 0;
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64) return -1;
    return dynamic;
}

uint64_t mlz__image_id(pid_t pid)
{
    char path[64];
    uint8_t buf[1024];
    snprintf(path, sizeof path, "/proc/%d/auxv", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n <= 0) return 0;
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
    for (ssize_t i = 0; i < n; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
    return h ? h : 1;
}

/* A dynamically linked program maps libc.so.6 while it starts (its loader
 * runs first), and a process in the middle of an exec shows a half-built
 * image for a moment: both are waited for, up to this long, rather than
 * called statically linked. */
#define STARTUP_WAIT_MS 2000

/* Bit 0: libc.so.6 is mapped; bit 1: the dynamic loader is. */
static int has_libc_and_loader(pid_t pid)
{
    mlz_proc_module m;
    int libc = mlz_proc_module_find(pid, mlz_proc_is_libc, &m) == 0;
    int ldso = mlz_proc_module_find(pid, mlz_proc_is_ldso, &m) == 0;
    return libc | ldso << 1;
}

static int preflight_once(pid_t pid, int flags, mlz_target *t)
{
    int tracer;
    char state;
    mlz_proc_module m;
    memset(t, 0, sizeof *t);
    t->pid = pid;
    if (pid <= 0 || (kill(pid, 0) && errno == ESRCH) || read_status(t, &tracer, &state)) {
        mlz__err("no such process: %d", (int)pid);
        return MLZ_INJ_ESRCH;
    }
    /* First: all that is learnt of the process from here on belongs to this
     * image, which session_begin checks again once every thread is held. */
    t->image = mlz__image_id(pid);
    if (pid == getpid()) { mlz__err("refusing to attach to myself"); return MLZ_INJ_EREFUSE; }
    if (state == 'Z' || state == 'X') {
        pid_t live = mlz_proc_live_tid(pid);
        if (live > 0 && live != pid) {
            /* Its threads could be stopped, but every /proc/PID file and
             * remote call here goes through the main thread. */
            mlz__err("process %d (%s) runs on after its main thread exited (pthread_exit in main): memlyze-attach "
                     "and memlyze-detach cannot work on it; memlyze-snapshot can, and a trace recorded already is "
                     "written by memlyze-detach %d once the process has exited", (int)pid, t->comm, (int)pid);
            return MLZ_INJ_EREFUSE;
        }
        mlz__err("process %d (%s) is a zombie: it has exited", (int)pid, t->comm);
        return MLZ_INJ_EGONE;
    }
    pid_t traced_tid = pid;
    if (!tracer) {
        pid_t t = mlz_proc_task_find(pid, traced, &tracer);
        if (t) traced_tid = t;
    }
    if (tracer) {
        char who[64], thr[48] = "";
        comm_of(tracer, who, sizeof who);
        if (traced_tid != pid) snprintf(thr, sizeof thr, " (its thread %d)", (int)traced_tid);
        mlz__err("process %d (%s)%s is already traced by %d (%s): detach that debugger first",
                 (int)pid, t->comm, thr, tracer, who[0] ? who : "?");
        return MLZ_INJ_EREFUSE;
    }
    t->stopped = state == 'T';
    pid_t parent = shares_memory_with_parent(pid);
    if (parent) {
        mlz__err("process %d (%s) shares its memory with its parent %d (a vfork child before its exec): "
                 "attach after the exec, or to the parent once the child has exec'd", (int)pid, t->comm, (int)parent);
        return MLZ_INJ_EREFUSE;
    }
    int ex = check_exe(pid);
    if (ex == -1) {
        mlz__err("process %d (%s) is not a 64-bit x86_64 program", (int)pid, t->comm);
        return MLZ_INJ_EREFUSE;
    }
    if (t->seccomp == 1) {
        mlz__err("process %d (%s) runs in seccomp strict mode: it may not make the syscalls loading needs",
                 (int)pid, t->comm);
        return MLZ_INJ_EREFUSE;
    }
    if (t->seccomp == 2 && !(flags & MLZ_PRE_ALLOW_SECCOMP)) {
        mlz__err("process %d (%s) runs under a seccomp filter: an injected mmap/memfd_create could kill it "
                 "(--allow-seccomp to try anyway)", (int)pid, t->comm);
        return MLZ_INJ_EREFUSE;
    }
    int mapped = has_libc_and_loader(pid), libc = mapped & 1, ldso = mapped & 2;
    if (mapped != 3 && ex == 1) {
        mlz__err("process %d (%s) is dynamically linked but has not mapped libc.so.6 and its loader after %d ms "
                 "(still starting and stopped, or not a glibc program)", (int)pid, t->comm, STARTUP_WAIT_MS);
        return MLZ_INJ_EREFUSE;
    }
    if (!libc) {
        mlz__err("process %d (%s) is statically linked (no libc.so.6 mapped): cannot load the profiler into it",
                 (int)pid, t->comm);
        return MLZ_INJ_EREFUSE;
    }
    if (!ldso) {
        mlz__err("process %d (%s) has no dynamic loader mapped: statically linked", (int)pid, t->comm);
        return MLZ_INJ_EREFUSE;
    }
    t->payload_mapped = mlz_proc_payload_find(pid, &m) == 0;
    t->payload_active = t->payload_mapped ? payload_active(pid, &m, t) : 0;
    return 0;
}

static void wait_for_startup(pid_t pid)
{
    for (int waited = 0; waited < STARTUP_WAIT_MS; waited += 10) {
        if (check_exe(pid) != 1 || has_libc_and_loader(pid) == 3) return;
        usleep(10000);
    }
}

/* An exec during the preflight (a shell that execs the program it was
 * started for, right after the start) makes what was learnt stale, and
 * maybe the verdict: the new image is looked at afresh, a few times. */
int mlz__preflight(pid_t pid, int flags, mlz_target *t)
{
    int rc = 0;
    for (int i = 0; i < 4; i++) {
        mlz__err_clear();
        wait_for_startup(pid);
        rc = preflight_once(pid, flags, t);
        if (!t->image || mlz__image_id(pid) == t->image) break;
    }
    /* Refused because it is dying? Its maps and threads then say odd
     * things ("statically linked", "pthread_exit in main"): wait for the
     * end (a thread merely exiting in a live process times out, and the
     * first answer stands). */
    for (int waited = 0; rc && waited < 5000 && mlz_proc_exiting(pid); waited += 20) {
        usleep(20000);
        if ((kill(pid, 0) && errno == ESRCH) || mlz_proc_live_tid(pid) == 0) {
            mlz__err_clear();
            mlz__err("process %d exited", (int)pid);
            return MLZ_INJ_ESRCH;
        }
    }
    return rc;
}
