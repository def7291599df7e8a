/*
 * remote.c - run code in one stopped thread of the target, then put the
 * thread back exactly as it was.
 *
 * Saved: the general registers (incl. orig_rax, fs/gs base), the full XSAVE
 * area (x87, SSE, AVX, AVX-512 ...) and the blocked-signal mask. Nothing the
 * thread had is written over: code and stack live in a scratch mapping we
 * create, so the thread's own stack and its 128-byte red zone stay untouched.
 *
 * Two ways to run something:
 *  - a syscall: rip at a `syscall` instruction, resumed with PTRACE_SYSCALL;
 *    the result is read at the syscall-exit stop, the instruction after it
 *    never runs. The first mmap borrows two bytes at libc's ELF entry point
 *    (code only run when libc.so.6 is executed as a program) for this;
 *  - a function call: `call *%r11; int3` in the scratch page, on the scratch
 *    stack (16-byte aligned at the call, so the callee sees the ABI's
 *    rsp+8 alignment). Completion is a SIGTRAP, from int3 (si_code SI_KERNEL),
 *    at exactly the address after our int3. Anything else - another signal,
 *    a crash, an exit - aborts and restores; a timeout lets the thread
 *    finish the call by itself and restore itself (let_go()).
 *
 * orig_rax = -1 while we run: the kernel must not take our registers for an
 * interrupted syscall and rewind rip. Syscall restart for the thread's own
 * interrupted syscall (read, futex, epoll_wait, nanosleep: rax holds
 * -ERESTARTSYS & co., orig_rax the syscall number) is left to the kernel:
 * we put back rax, orig_rax and rip exactly while the thread sits in a stop
 * inside get_signal(), and on leaving that stop the kernel does what it
 * would have done without us (rip -= 2, rax = orig_rax, or restart_syscall
 * for -ERESTART_RESTARTBLOCK). A syscall-exit stop is not such a stop, so the
 * last one is turned into a PTRACE_EVENT_STOP before restoring (park()).
 *
 * Asynchronous signals are blocked in the borrowed thread while it runs our
 * code (PTRACE_SETSIGMASK); they stay pending and arrive after we leave.
 * Synchronous ones (SEGV, BUS, ILL, FPE, TRAP, SYS) are left unblocked:
 * blocking them would make the kernel reset the target's own handler to
 * SIG_DFL when one fires (force_sig_info_to_task).
 */
#include "injector.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define SYNC_SIGS ((1ull << (SIGSEGV - 1)) | (1ull << (SIGBUS - 1)) | (1ull << (SIGILL - 1)) | \
                   (1ull << (SIGFPE - 1)) | (1ull << (SIGTRAP - 1)) | (1ull << (SIGSYS - 1)))

/* Scratch layout: [code page][stack][data]. A stack overflow runs into the
 * read-only code page and faults (aborting cleanly) instead of into data. */
#define CODE_LEN   4096u
#define STACK_LEN  (1024u * 1024u)     /* dlopen and payload start-up are not shallow */
#define DATA_LEN   (16u * 1024u)
#define RESTORE_LEN (72u * 1024u)       /* XSAVE image + registers for let_go() */
#define OFF_STUB    64                  /* the self-restoring continuation */
#define OFF_SYSCALL 0                   /* 0f 05          syscall            */
#define OFF_CALL    8                   /* 41 ff d3       call *%r11; cc int3 */
#define CALL_RET    (OFF_CALL + 4)      /* rip after the int3 */
static const uint8_t code_bytes[] = {
    0x0f, 0x05, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc,
    0x41, 0xff, 0xd3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc,
};

enum { STOP_SIGNALISH, STOP_SYSCALL };

int mlz__remote_begin(mlz_remote *r, pid_t pid, pid_t tid, int timeout_ms)
{
    int rc;
    memset(r, 0, sizeof *r);
    r->pid = pid;
    r->tid = tid;
    r->timeout_ms = timeout_ms;
    r->last_stop = STOP_SIGNALISH;
    if ((rc = mlz__mem_open(tid))) return rc;
    if ((rc = mlz__pt_getregs(tid, &r->saved))) return rc;
    r->xsave_len = 64 * 1024;          /* XSAVE areas with AMX are ~11 KiB */
    r->xsave = aligned_alloc(64, r->xsave_len);
    if (!r->xsave) { mlz__err("out of memory"); return MLZ_INJ_EIO; }
    if ((rc = mlz__pt_getxstate(tid, r->xsave, &r->xsave_len))) { free(r->xsave); r->xsave = NULL; return rc; }
    if ((rc = mlz__pt_getsigmask(tid, &r->sigmask))) { free(r->xsave); r->xsave = NULL; return rc; }
    if ((rc = mlz__pt_setsigmask(tid, ~0ull & ~SYNC_SIGS))) { free(r->xsave); r->xsave = NULL; return rc; }
    /* While lent, the thread runs at our priority, so a busy process does
     * not make the load slow (best effort; needs CAP_SYS_NICE; restored). */
    errno = 0;
    r->nice = getpriority(PRIO_PROCESS, (id_t)tid);
    r->boosted = errno == 0 && r->nice > -20 && setpriority(PRIO_PROCESS, (id_t)tid, -20) == 0;
    return 0;
}

static const char *sig_name(int sig)
{
    const char *s = sigabbrev_np(sig);
    return s ? s : "?";
}

/* Resume the borrowed thread and wait for the stop that ends the step.
 * Group stops and stray interrupt traps are waited through (the thread is
 * resumed again); the stop we stay in is returned in *st. */
/* The borrowed thread sleeps (a futex: a lock, likely held by a thread we
 * stopped) rather than runs: no use holding the others any longer. */
static int borrowed_sleeps(mlz_remote *r)
{
    char path[96], buf[512];
    snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)r->pid, (int)r->tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');       /* comm may hold spaces and parens */
    return p && p[1] == ' ' && (p[2] == 'S' || p[2] == 'D');
}

static void release_others(mlz_remote *r)
{
    if (!r->release_at_us) return;
    r->release_at_us = 0;
    r->release(r->release_arg);
}

static int run_until_stop(mlz_remote *r, int syscall_mode, int *st, int timeout_ms)
{
    uint64_t deadline = mlz__now_us() + (uint64_t)timeout_ms * 1000u;
    if (r->release_at_us && mlz__now_us() >= r->release_at_us) release_others(r);
    for (;;) {
        int rc = syscall_mode ? mlz__pt_syscall(r->tid) : mlz__pt_cont(r->tid, 0);
        if (rc) return rc;
    again:;
        uint64_t now = mlz__now_us(), until = deadline;
        if (r->release_at_us && r->release_at_us < until) until = r->release_at_us;
        if (r->release_at_us && now + 1000 < until) until = now + 1000;   /* look every ms */
        rc = mlz__pt_wait(r->tid, st, now >= until ? 0 : (int)((until - now + 999) / 1000));
        if (rc == MLZ_INJ_ETIMEOUT && r->release_at_us && until < deadline) {
            /* Our thread may wait for a lock one of the others holds. */
            if (mlz__now_us() >= r->release_at_us || borrowed_sleeps(r)) release_others(r);
            goto again;
        }
        if (rc == MLZ_INJ_ETIMEOUT) return rc;
        if (rc || WIFEXITED(*st) || WIFSIGNALED(*st)) {
            mlz__err("the target exited while running injected code%s%s",
                     rc == 0 && WIFSIGNALED(*st) ? ", killed by " : "",
                     rc == 0 && WIFSIGNALED(*st) ? sig_name(WTERMSIG(*st)) : "");
            r->tid = 0;
            return MLZ_INJ_EGONE;
        }
        if (!WIFSTOPPED(*st)) goto again;
        if ((*st >> 16) == PTRACE_EVENT_STOP) {
            int s = WSTOPSIG(*st);
            if (s == SIGSTOP || s == SIGTSTP || s == SIGTTIN || s == SIGTTOU) r->group_stop_seen = 1;
            continue;                 /* resume: a traced thread may run through a group stop */
        }
        return 0;
    }
}

/* After a timeout: stop the thread where it is. */
static void stop_now(mlz_remote *r)
{
    int st;
    if (ptrace(PTRACE_INTERRUPT, r->tid, 0, 0)) return;
    while (mlz__pt_wait(r->tid, &st, 2000) == 0) {
        if (WIFEXITED(st) || WIFSIGNALED(st)) { r->tid = 0; return; }
        if (WIFSTOPPED(st)) break;
    }
    r->last_stop = STOP_SIGNALISH;
}

int mlz__remote_syscall_at(mlz_remote *r, uint64_t insn, long nr, const uint64_t a[6], int64_t *ret)
{
    struct user_regs_struct g = r->saved;
    int st, rc;
    if (r->let_go) return MLZ_INJ_EREMOTE;
    g.rip = insn;
    g.rax = (uint64_t)nr;
    g.orig_rax = (uint64_t)-1;
    g.rdi = a[0]; g.rsi = a[1]; g.rdx = a[2]; g.r10 = a[3]; g.r8 = a[4]; g.r9 = a[5];
    if ((rc = mlz__pt_setregs(r->tid, &g))) return rc;
    for (int phase = 0; phase < 2; phase++) {
        rc = run_until_stop(r, 1, &st, r->timeout_ms);
        if (rc == MLZ_INJ_ETIMEOUT) {
            stop_now(r);
            mlz__err("remote syscall %ld did not return within %d ms", nr, r->timeout_ms);
            return rc;
        }
        if (rc) return rc;
        if (WSTOPSIG(st) != (SIGTRAP | 0x80)) {
            r->last_stop = STOP_SIGNALISH;
            mlz__err("remote syscall %ld: thread %d stopped by %s instead", nr, (int)r->tid, sig_name(WSTOPSIG(st)));
            return MLZ_INJ_EREMOTE;
        }
        r->last_stop = STOP_SYSCALL;
    }
    if ((rc = mlz__pt_getregs(r->tid, &g))) return rc;
    if (g.rip != insn + 2) {
        mlz__err("remote syscall %ld ended at an unexpected address", nr);
        return MLZ_INJ_EREMOTE;
    }
    *ret = (int64_t)g.rax;
    return 0;
}

int mlz__remote_syscall(mlz_remote *r, long nr, const uint64_t a[6], int64_t *ret)
{
    return mlz__remote_syscall_at(r, r->code + OFF_SYSCALL, nr, a, ret);
}

int mlz__remote_map_scratch(mlz_remote *r, uint64_t borrow)
{
    static const uint8_t sc[2] = { 0x0f, 0x05 };
    uint8_t saved[2];
    int64_t ret;
    int rc, rc2;
    size_t len = CODE_LEN + STACK_LEN + DATA_LEN + RESTORE_LEN;
    if ((rc = mlz__mem_read(borrow, saved, 2))) return rc;
    if ((rc = mlz__mem_write(borrow, sc, 2))) return rc;
    uint64_t a[6] = { 0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0 };
    rc = mlz__remote_syscall_at(r, borrow, SYS_mmap, a, &ret);
    if (!rc && (uint64_t)ret > (uint64_t)-4096) {
        mlz__err("mmap in the target failed: %s", strerror((int)-ret));
        rc = MLZ_INJ_EREMOTE;
    }
    if (!rc) {
        r->scratch = (uint64_t)ret;
        r->scratch_len = len;
        r->code = r->scratch;
        r->stack_top = (r->scratch + CODE_LEN + STACK_LEN) & ~(uint64_t)15;
        r->data = r->scratch + CODE_LEN + STACK_LEN;
        r->data_len = DATA_LEN;
        rc = mlz__mem_write(r->code, code_bytes, sizeof code_bytes);
        if (!rc) {
            uint64_t p[6] = { r->scratch, CODE_LEN, PROT_READ | PROT_EXEC, 0, 0, 0 };
            rc = mlz__remote_syscall_at(r, borrow, SYS_mprotect, p, &ret);
            if (!rc && ret) { mlz__err("mprotect in the target failed: %s", strerror((int)-ret)); rc = MLZ_INJ_EREMOTE; }
        }
    }
    /* Put the borrowed bytes back whatever happened. */
    rc2 = mlz__mem_write(borrow, saved, 2);
    return rc ? rc : rc2;
}

int mlz__remote_save_errno(mlz_remote *r, uint64_t fn)
{
    uint64_t a[6] = { 0 }, addr;
    int32_t v;
    int rc = mlz__remote_call(r, fn, a, &addr, r->timeout_ms);
    if (rc) return rc;
    if (!addr || (rc = mlz__mem_read(addr, &v, sizeof v))) return rc ? rc : MLZ_INJ_EREMOTE;
    r->errno_addr = addr;
    r->errno_val = v;
    return 0;
}

int mlz__remote_put(mlz_remote *r, size_t off, const void *p, size_t n, uint64_t *at)
{
    if (off + n > r->data_len) { mlz__err("argument too long for the scratch area"); return MLZ_INJ_EIO; }
    *at = r->data + off;
    return mlz__mem_write(*at, p, n);
}

/*
 * A call that does not return in time cannot be undone: dlopen may hold the
 * loader lock, malloc an arena. Instead of abandoning it, the thread is let
 * go to finish the call by itself: the int3 after our `call` becomes a jump
 * to a continuation that restores the thread's saved state in user space
 * (xrstor of its XSAVE image, its general registers and flags, its rsp) and
 * jumps to its saved rip. An interrupted restartable syscall is redone the
 * way the kernel would (rax = orig_rax, rip -= 2); a restart-block one
 * (nanosleep) returns -EINTR instead, since its restart block may be gone.
 * The scratch mapping stays (it holds the call's stack and the image).
 */
static void put32(uint8_t *p, int64_t v) { int32_t x = (int32_t)v; memcpy(p, &x, 4); }

static int let_go(mlz_remote *r)
{
    uint64_t R = r->data + DATA_LEN, G;                    /* 64-aligned: data is page-aligned + 16K */
    uint64_t xlen = (r->xsave_len + 63) & ~(uint64_t)63;
    struct user_regs_struct s = r->saved;
    int rc;
    if (!r->scratch || xlen + 20 * 8 > RESTORE_LEN) return MLZ_INJ_EIO;
    G = R + xlen;
    int64_t ax = (int64_t)s.rax;
    if ((int64_t)s.orig_rax >= 0) {
        if (ax == -512 || ax == -513 || ax == -514) { s.rax = s.orig_rax; s.rip -= 2; }   /* -ERESTART{SYS,NOINTR,NOHAND} */
        else if (ax == -516) s.rax = (uint64_t)-EINTR;                                    /* -ERESTART_RESTARTBLOCK */
    }
    uint64_t gpr[20] = { s.r15, s.r14, s.r13, s.r12, s.rbp, s.rbx, s.r11, s.r10, s.r9, s.r8,
                         s.rax, s.rcx, s.rdx, s.rsi, s.rdi, s.eflags & ~(uint64_t)0x100, s.rsp, s.rip,
                         r->errno_addr, (uint64_t)(uint32_t)r->errno_val };
    if ((rc = mlz__mem_write(R, r->xsave, r->xsave_len)) || (rc = mlz__mem_write(G, gpr, sizeof gpr))) return rc;

    uint8_t c[96];
    size_t n = 0;
    uint64_t at = r->code + OFF_STUB;
    /* xrstor first, on the scratch stack: a signal arriving later pushes
     * its frame below rsp, i.e. over the image already consumed. */
    c[n++] = 0xb8; put32(c + n, -1); n += 4;                          /* mov eax, -1 */
    c[n++] = 0xba; put32(c + n, -1); n += 4;                          /* mov edx, -1 */
    c[n++] = 0x48; c[n++] = 0x0f; c[n++] = 0xae; c[n++] = 0x2d;       /* xrstor64 [rip+R] */
    put32(c + n, (int64_t)R - (int64_t)(at + n + 4)); n += 4;
    if (r->errno_addr) {
        /* errno back: mov rax, [rip+G+144]; mov ecx, [rip+G+152]; mov [rax], ecx */
        c[n++] = 0x48; c[n++] = 0x8b; c[n++] = 0x05;
        put32(c + n, (int64_t)(G + 18 * 8) - (int64_t)(at + n + 4)); n += 4;
        c[n++] = 0x8b; c[n++] = 0x0d;
        put32(c + n, (int64_t)(G + 19 * 8) - (int64_t)(at + n + 4)); n += 4;
        c[n++] = 0x89; c[n++] = 0x08;
    }
    c[n++] = 0x48; c[n++] = 0x8d; c[n++] = 0x25;                      /* lea rsp, [rip+G] */
    put32(c + n, (int64_t)G - (int64_t)(at + n + 4)); n += 4;
    static const uint8_t pops[] = { 0x41, 0x5f, 0x41, 0x5e, 0x41, 0x5d, 0x41, 0x5c, 0x5d, 0x5b, 0x41, 0x5b,
                                    0x41, 0x5a, 0x41, 0x59, 0x41, 0x58, 0x58, 0x59, 0x5a, 0x5e, 0x5f, 0x9d };
    memcpy(c + n, pops, sizeof pops);                                 /* r15..rdi, popfq */
    n += sizeof pops;
    c[n++] = 0x48; c[n++] = 0x8b; c[n++] = 0x25;                      /* mov rsp, [rip+G+128] */
    put32(c + n, (int64_t)(G + 16 * 8) - (int64_t)(at + n + 4)); n += 4;
    c[n++] = 0xff; c[n++] = 0x25;                                     /* jmp [rip+G+136] */
    put32(c + n, (int64_t)(G + 17 * 8) - (int64_t)(at + n + 4)); n += 4;
    if ((rc = mlz__mem_write(at, c, n))) return rc;
    uint8_t j[5] = { 0xe9 };                                          /* int3 -> jmp stub */
    put32(j + 1, (int64_t)at - (int64_t)(r->code + OFF_CALL + 3 + 5));
    if ((rc = mlz__mem_write(r->code + OFF_CALL + 3, j, sizeof j))) return rc;
    /* Its own signal mask and priority from now on: it runs the rest as
     * if it had called dlopen itself. */
    mlz__pt_setsigmask(r->tid, r->sigmask);
    if (r->boosted) setpriority(PRIO_PROCESS, (id_t)r->tid, r->nice);
    r->boosted = 0;
    r->let_go = 1;
    return 0;
}

int mlz__remote_call(mlz_remote *r, uint64_t fn, const uint64_t a[6], uint64_t *ret, int timeout_ms)
{
    struct user_regs_struct g = r->saved;
    int st, rc;
    if (r->let_go) return MLZ_INJ_EREMOTE;
    g.rip = r->code + OFF_CALL;
    g.r11 = fn;
    g.rax = 0;                          /* no vector args, should fn be variadic */
    g.rsp = r->stack_top;
    g.orig_rax = (uint64_t)-1;
    g.eflags &= ~(uint64_t)(0x400 | 0x100);   /* DF clear (ABI), no single-step */
    g.rdi = a[0]; g.rsi = a[1]; g.rdx = a[2]; g.rcx = a[3]; g.r8 = a[4]; g.r9 = a[5];
    if ((rc = mlz__pt_setregs(r->tid, &g))) return rc;
    rc = run_until_stop(r, 0, &st, timeout_ms);
    if (rc == MLZ_INJ_ETIMEOUT) {
        stop_now(r);
        if (r->tid && mlz__pt_getregs(r->tid, &g) == 0 && g.rip == r->code + CALL_RET) {
            *ret = g.rax;              /* it returned as the clock ran out */
            return 0;
        }
        if (r->tid && let_go(r) == 0) {
            mlz__err("injected call in thread %d did not return within %d ms; the thread was let go to finish "
                     "it by itself and then resume where it was (memlyze-detach undoes the rest)",
                     (int)r->tid, timeout_ms);
        } else {
            mlz__err("injected call in thread %d did not return within %d ms", (int)r->tid, timeout_ms);
        }
        return rc;
    }
    if (rc) return rc;
    r->last_stop = STOP_SIGNALISH;
    if ((rc = mlz__pt_getregs(r->tid, &g))) return rc;
    int sig = WSTOPSIG(st);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (sig == SIGTRAP) mlz__pt_getsiginfo(r->tid, &si);
    if (sig != SIGTRAP || g.rip != r->code + CALL_RET || si.si_code != SI_KERNEL) {
        /* The signal is not delivered: the next resume passes 0. */
        mlz__err("injected call in thread %d stopped by %s at 0x%llx (%s)", (int)r->tid, sig_name(sig & 0x7f),
                 (unsigned long long)g.rip, sig == SIGTRAP ? "not our breakpoint" : "aborted");
        return MLZ_INJ_EREMOTE;
    }
    *ret = g.rax;
    return 0;
}

/* Turn a syscall-exit stop into a PTRACE_EVENT_STOP: only from a stop inside
 * get_signal() does the kernel apply syscall restart to the registers we
 * put back. No user instruction runs in between: the interrupt trap is taken
 * on the way out of the kernel. */
static int park(mlz_remote *r)
{
    int st, rc;
    if (r->last_stop != STOP_SYSCALL) return 0;
    if ((rc = mlz__pt_interrupt(r->tid))) return rc;
    if ((rc = mlz__pt_cont(r->tid, 0))) return rc;
    for (;;) {
        if ((rc = mlz__pt_wait(r->tid, &st, 2000))) { mlz__err("thread %d did not stop to be restored", (int)r->tid); return rc; }
        if (WIFEXITED(st) || WIFSIGNALED(st)) { r->tid = 0; return MLZ_INJ_EGONE; }
        if (WIFSTOPPED(st) && (st >> 16) == PTRACE_EVENT_STOP) break;
        if (WIFSTOPPED(st)) {
            mlz__err("thread %d: unexpected %s while being restored", (int)r->tid, sig_name(WSTOPSIG(st) & 0x7f));
            if ((rc = mlz__pt_cont(r->tid, 0))) return rc;
        }
    }
    r->last_stop = STOP_SIGNALISH;
    return 0;
}

int mlz__remote_end(mlz_remote *r)
{
    int rc = 0, e;
    if (!r->tid) { free(r->xsave); r->xsave = NULL; return MLZ_INJ_EGONE; }
    if (r->let_go) {
        /* Mid-call: its registers are the call's; it restores itself. */
        free(r->xsave);
        r->xsave = NULL;
        return 0;
    }
    if (r->errno_addr && (e = mlz__mem_write(r->errno_addr, &r->errno_val, sizeof r->errno_val)) && !rc) rc = e;
    if (r->scratch) {
        int64_t ret;
        uint64_t a[6] = { r->scratch, r->scratch_len, 0, 0, 0, 0 };
        e = mlz__remote_syscall(r, SYS_munmap, a, &ret);
        if (!e && ret) { mlz__err("munmap in the target failed: %s", strerror((int)-ret)); e = MLZ_INJ_EREMOTE; }
        if (!rc) rc = e;
        if (!e) r->scratch = 0;
    }
    if ((e = park(r)) && !rc) rc = e;
    if (!r->tid) { free(r->xsave); r->xsave = NULL; return rc ? rc : MLZ_INJ_EGONE; }
    if ((e = mlz__pt_setregs(r->tid, &r->saved)) && !rc) rc = e;
    if (r->xsave && (e = mlz__pt_setxstate(r->tid, r->xsave, r->xsave_len)) && !rc) rc = e;
    if ((e = mlz__pt_setsigmask(r->tid, r->sigmask)) && !rc) rc = e;
    if (r->boosted && setpriority(PRIO_PROCESS, (id_t)r->tid, r->nice) && !rc) {
        mlz__err("cannot give thread %d its priority (nice %d) back: %s", (int)r->tid, r->nice, strerror(errno));
        rc = MLZ_INJ_EREMOTE;
    }
    r->boosted = 0;
    free(r->xsave);
    r->xsave = NULL;
    return rc;
}
