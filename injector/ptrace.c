/*
 * ptrace.c - thin ptrace wrappers, waiting with a timeout, target memory.
 *
 * Every request is checked here and errno becomes one line that names the
 * cause (permission, YAMA, the thread having exited), so callers only pass
 * the code up. Waiting uses a signalfd on SIGCHLD: the tracer is told of
 * every tracee stop by SIGCHLD, so we sleep in poll() instead of spinning
 * and still wake within microseconds of the stop.
 */
#include "injector.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static int code_of(int err)
{
    if (err == ESRCH) return MLZ_INJ_ESRCH;
    if (err == EPERM || err == EACCES) return MLZ_INJ_EPERM;
    return MLZ_INJ_EREMOTE;
}

static int req(enum __ptrace_request rq, pid_t tid, void *addr, void *data, const char *what)
{
    if (ptrace(rq, tid, addr, data) == 0) return 0;
    int e = errno;
    mlz__err("ptrace %s on thread %d: %s", what, (int)tid,
             e == ESRCH ? "thread is gone or not stopped" : strerror(e));
    return code_of(e);
}

int mlz__pt_seize(pid_t tid)
{
    /* TRACESYSGOOD: syscall stops read SIGTRAP|0x80, never confused with a
     * real SIGTRAP. No EXITKILL: if we die, the target must live on. */
    if (ptrace(PTRACE_SEIZE, tid, 0, (void *)(long)PTRACE_O_TRACESYSGOOD) == 0) return 0;
    return -errno;                     /* caller decides: ESRCH = thread exited */
}

int mlz__pt_interrupt(pid_t tid) { return req(PTRACE_INTERRUPT, tid, 0, 0, "INTERRUPT"); }
int mlz__pt_cont(pid_t tid, int sig) { return req(PTRACE_CONT, tid, 0, (void *)(long)sig, "CONT"); }
int mlz__pt_syscall(pid_t tid, int sig) { return req(PTRACE_SYSCALL, tid, 0, (void *)(long)sig, "SYSCALL"); }
int mlz__pt_detach(pid_t tid, int sig) { return req(PTRACE_DETACH, tid, 0, (void *)(long)sig, "DETACH"); }
int mlz__pt_getregs(pid_t tid, struct user_regs_struct *r) { return req(PTRACE_GETREGS, tid, 0, r, "GETREGS"); }
int mlz__pt_setregs(pid_t tid, const struct user_regs_struct *r)
{
    return req(PTRACE_SETREGS, tid, 0, (void *)r, "SETREGS");
}
int mlz__pt_getsiginfo(pid_t tid, siginfo_t *si) { return req(PTRACE_GETSIGINFO, tid, 0, si, "GETSIGINFO"); }

int mlz__pt_getxstate(pid_t tid, void *buf, size_t *len)
{
    struct iovec iov = { buf, *len };
    int rc = req(PTRACE_GETREGSET, tid, (void *)(long)NT_X86_XSTATE, &iov, "GETREGSET xstate");
    if (!rc) *len = iov.iov_len;
    return rc;
}

int mlz__pt_setxstate(pid_t tid, void *buf, size_t len)
{
    struct iovec iov = { buf, len };
    return req(PTRACE_SETREGSET, tid, (void *)(long)NT_X86_XSTATE, &iov, "SETREGSET xstate");
}

int mlz__pt_getsigmask(pid_t tid, uint64_t *mask)
{
    return req(PTRACE_GETSIGMASK, tid, (void *)sizeof *mask, mask, "GETSIGMASK");
}

int mlz__pt_setsigmask(pid_t tid, uint64_t mask)
{
    return req(PTRACE_SETSIGMASK, tid, (void *)sizeof mask, &mask, "SETSIGMASK");
}

/* ------------------------------------------------------------- waiting */

static int chld_fd = -1;

static int chld_init(void)
{
    if (chld_fd >= 0) return 0;
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGCHLD);
    /* Blocked, so the SIGCHLD of each stop queues on the signalfd. */
    if (sigprocmask(SIG_BLOCK, &s, NULL)) return -1;
    chld_fd = signalfd(-1, &s, SFD_CLOEXEC | SFD_NONBLOCK);
    return chld_fd < 0 ? -1 : 0;
}

int mlz__pt_wait(pid_t tid, int *status, int timeout_ms)
{
    uint64_t deadline = mlz__now_us() + (uint64_t)timeout_ms * 1000u;
    if (chld_init()) { mlz__err("signalfd: %s", strerror(errno)); return MLZ_INJ_EIO; }
    for (;;) {
        pid_t r = waitpid(tid, status, __WALL | WNOHANG);
        if (r == tid) return 0;
        if (r < 0) {
            if (errno == EINTR) continue;
            return MLZ_INJ_ESRCH;
        }
        uint64_t now = mlz__now_us();
        if (now >= deadline) return MLZ_INJ_ETIMEOUT;
        struct pollfd p = { chld_fd, POLLIN, 0 };
        int ms = (int)((deadline - now + 999) / 1000);
        if (poll(&p, 1, ms > 50 ? 50 : ms) > 0) {
            struct signalfd_siginfo si;
            while (read(chld_fd, &si, sizeof si) == sizeof si) {}
        }
    }
}

/* ------------------------------------------------------- causes of EPERM */

static int read_int_file(const char *path, int dflt)
{
    FILE *f = fopen(path, "r");
    int v = dflt;
    if (!f) return dflt;
    if (fscanf(f, "%d", &v) != 1) v = dflt;
    fclose(f);
    return v;
}

static int have_cap_sys_ptrace(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long eff = 0;
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &eff) == 1) break;
    fclose(f);
    return (eff >> 19) & 1;            /* CAP_SYS_PTRACE = 19 */
}

const char *mlz__pt_perm_cause(pid_t pid, int err, char *buf, size_t cap)
{
    if (err == ESRCH) { snprintf(buf, cap, "no such process %d (or it exited)", (int)pid); return buf; }
    if (err != EPERM && err != EACCES) { snprintf(buf, cap, "ptrace attach failed: %s", strerror(err)); return buf; }
    int scope = read_int_file("/proc/sys/kernel/yama/ptrace_scope", 0);
    int cap_ok = have_cap_sys_ptrace();
    char path[64], line[256];
    unsigned uid = (unsigned)-1;
    int tracer = 0;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "TracerPid: %d", &tracer) == 1) continue;
            else if (sscanf(line, "Uid: %u", &uid) == 1) break;
        fclose(f);
    }
    if (tracer > 0 && tracer != (int)getpid()) {
        char who[64];
        snprintf(buf, cap, "it is already traced by %d (%s): detach that debugger first", tracer,
                 mlz__thread_name(tracer, tracer, who, sizeof who));
    } else if (scope == 3)
        snprintf(buf, cap, "permission denied: YAMA ptrace_scope is 3 (no process may ptrace; only a reboot lowers it)");
    else if (scope == 2 && !cap_ok)
        snprintf(buf, cap, "permission denied: YAMA ptrace_scope is 2 (admin only): run as root or with CAP_SYS_PTRACE");
    else if (scope == 1 && !cap_ok)
        snprintf(buf, cap, "permission denied: YAMA ptrace_scope is 1 (only descendants): run with CAP_SYS_PTRACE "
                 "or set /proc/sys/kernel/yama/ptrace_scope to 0");
    else if (uid != (unsigned)-1 && uid != (unsigned)geteuid() && !cap_ok)
        snprintf(buf, cap, "permission denied: target runs as uid %u, you are uid %u without CAP_SYS_PTRACE",
                 uid, (unsigned)geteuid());
    else
        snprintf(buf, cap, "permission denied by the kernel (target not dumpable, setuid, or an LSM policy; "
                 "CAP_SYS_PTRACE %s)", cap_ok ? "held" : "not held");
    return buf;
}

/* -------------------------------------------------------------- memory */

static int mem_fd = -1;
static pid_t mem_pid;

int mlz__mem_open(pid_t pid)
{
    char path[64];
    if (mem_fd >= 0 && mem_pid == pid) return 0;
    mlz__mem_close();
    snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
    mem_fd = open(path, O_RDWR | O_CLOEXEC);
    if (mem_fd < 0) { mlz__err("cannot open %s: %s", path, strerror(errno)); return MLZ_INJ_EIO; }
    mem_pid = pid;
    return 0;
}

void mlz__mem_close(void)
{
    if (mem_fd >= 0) close(mem_fd);
    mem_fd = -1;
}

int mlz__mem_peek(uint64_t addr, void *buf, size_t len)
{
    return pread(mem_fd, buf, len, (off_t)addr) == (ssize_t)len ? 0 : -1;
}

int mlz__mem_read(uint64_t addr, void *buf, size_t len)
{
    ssize_t n = pread(mem_fd, buf, len, (off_t)addr);
    if (n == (ssize_t)len) return 0;
    mlz__err("cannot read target memory at 0x%llx: %s", (unsigned long long)addr, n < 0 ? strerror(errno) : "short read");
    return MLZ_INJ_EIO;
}

int mlz__mem_write(uint64_t addr, const void *buf, size_t len)
{
    /* /proc/PID/mem writes with FOLL_FORCE: read-only text pages included. */
    ssize_t n = pwrite(mem_fd, buf, len, (off_t)addr);
    if (n == (ssize_t)len) return 0;
    /* Some kernels refuse forced /proc/PID/mem writes (proc_mem.force_override):
     * PTRACE_POKEDATA still may, one word at a time. */
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        uint64_t a = addr + done, w;
        size_t k = len - done < 8 ? len - done : 8;
        errno = 0;
        long old = ptrace(PTRACE_PEEKDATA, mem_pid, (void *)a, 0);
        if (errno) goto fail;
        w = (uint64_t)old;
        memcpy(&w, p + done, k);
        if (ptrace(PTRACE_POKEDATA, mem_pid, (void *)a, (void *)w)) goto fail;
        done += k;
    }
    return 0;
fail:
    mlz__err("cannot write target memory at 0x%llx: %s", (unsigned long long)addr, strerror(errno));
    return MLZ_INJ_EIO;
}

int mlz__mem_read_str(uint64_t addr, char *buf, size_t cap)
{
    size_t got = 0;
    while (got + 1 < cap) {
        size_t chunk = cap - 1 - got < 64 ? cap - 1 - got : 64;
        ssize_t n = pread(mem_fd, buf + got, chunk, (off_t)(addr + got));
        if (n <= 0) break;
        void *z = memchr(buf + got, 0, (size_t)n);
        if (z) return 0;
        got += (size_t)n;
    }
    buf[got] = 0;
    return got ? 0 : MLZ_INJ_EIO;
}
