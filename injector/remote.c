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

/* Scratch layout: [code page][stack][data][restore image]. A stack overflow
 * runs into the read-only code page and faults instead of into data. */
#define CODE_LEN   4096u
#define STACK_LEN  (1024u * 1024u)     /* dlopen and payload start-up are not shallow */
#define DATA_LEN   (16u * 1024u)
#define RESTORE_LEN (72u * 1024u)       /* the thread's XSAVE image and errno */
#define OFF_SYSCALL 0                   /* 0f 05, then a jump to the restore code */
#define OFF_CALL    16                  /* call *%r11; mov %rax,%r15, then the restore code */
#define OFF_RESTORE 64
#define CAVE_NEED   512                 /* bytes the first syscall's stub needs in a cave */

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

/* The borrowed thread sleeps (a futex: a lock, likely held by a thread we
 * stopped) rather than runs: no use holding the others any longer. */
static int borrowed_sleeps(mlz_remote *r)
{
    char buf[512];
    const char *f = mlz_proc_stat_fields(r->pid, r->tid, buf, sizeof buf);
    return f && (f[0] == 'S' || f[0] == 'D');
}

static void release_others(mlz_remote *r)
{
    if (!r->release_at_us) return;
    r->release_at_us = 0;
    r->release(r->release_arg);
}

/* Resume the borrowed thread and wait for the stop that ends the step.
 * Group stops and stray interrupt traps are waited through (the thread is
 * resumed again); the stop we stay in is returned in *st. */
static int run_until_stop(mlz_remote *r, int syscall_mode, int *st, int timeout_ms)
{
    uint64_t deadline = mlz__now_us() + (uint64_t)timeout_ms * 1000u;
    if (r->release_at_us && mlz__now_us() >= r->release_at_us) release_others(r);
    int pass = 0;
    for (;;) {
        int rc = syscall_mode ? mlz__pt_syscall(r->tid, pass) : mlz__pt_cont(r->tid, pass);
        pass = 0;
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
        if ((*st >> 16) == PTRACE_EVENT_STOP)
            continue;                 /* resume: a traced thread may run through a group stop, and joins it once let go */
        if (WSTOPSIG(*st) == SIGSTOP) {
            /* Our thread took a SIGSTOP itself (kill -STOP): it is
             * delivered, so the process stops as it was told to, and the
             * group stop that follows is run through like any other.
             * Aborting the call there left the payload half-started for
             * good. (SIGTSTP and the like may have handlers, which must
             * not run inside our call: they still abort it.) */
            pass = SIGSTOP;
            continue;
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

/*
 * Self-restoring code. Every piece of code the borrowed thread runs for us
 * ends in a stub that puts the thread back by itself: its signal mask (the
 * rt_sigprocmask is also the marker the tracer waits for), its priority, its
 * vector state, errno, flags and general registers, its stack pointer, and
 * a jump to where it was - with an interrupted restartable syscall redone as
 * the kernel would (rax = orig_rax, rip -= 2; a restart-block one such as
 * nanosleep returns -EINTR, since its restart block may be gone). While we
 * are alive the thread never runs the stub: a remote syscall ends at its
 * syscall-exit stop, a call at the marker's syscall-entry stop. If we die
 * at any instant (SIGKILL, OOM, a crash), the kernel lets the thread go and
 * it finishes what it was doing, then restores itself: the target never
 * sees a trap meant for a tracer that is gone.
 */
typedef struct emit { uint8_t *c; size_t n, cap; uint64_t at; } emit;

static void e_bytes(emit *e, const void *p, size_t n)
{
    if (e->n + n <= e->cap) memcpy(e->c + e->n, p, n);
    e->n += n;
}
static void e_u8(emit *e, uint8_t b) { e_bytes(e, &b, 1); }
static void e_u32(emit *e, uint32_t v) { e_bytes(e, &v, 4); }
static void e_u64(emit *e, uint64_t v) { e_bytes(e, &v, 8); }
/* mov reg, imm64 (reg numbers as in the ModRM encoding, 8..15 = r8..r15) */
static void e_movabs(emit *e, int reg, uint64_t v) { e_u8(e, reg >= 8 ? 0x49 : 0x48); e_u8(e, (uint8_t)(0xb8 + (reg & 7))); e_u64(e, v); }
static void e_mov32(emit *e, int reg, uint32_t v) { if (reg >= 8) e_u8(e, 0x41); e_u8(e, (uint8_t)(0xb8 + (reg & 7))); e_u32(e, v); }
static void e_rip32(emit *e, uint64_t target) { e_u32(e, (uint32_t)(int32_t)((int64_t)target - (int64_t)(e->at + e->n + 4))); }
enum { RAX, RCX, RDX, RBX, RSP, RBP, RSI, RDI, R8, R9, R10, R11, R12, R13, R14, R15 };

/* The registers the thread gets back: its own, with a syscall that our stop
 * interrupted set up to be issued again. */
static struct user_regs_struct resume_regs(const mlz_remote *r)
{
    struct user_regs_struct s = r->saved;
    int64_t ax = (int64_t)s.rax;
    if ((int64_t)s.orig_rax >= 0) {
        if (ax == -512 || ax == -513 || ax == -514) { s.rax = s.orig_rax; s.rip -= 2; }   /* -ERESTART{SYS,NOINTR,NOHAND} */
        else if (ax == -516) s.rax = (uint64_t)-EINTR;                                    /* -ERESTART_RESTARTBLOCK */
    }
    s.eflags &= ~(uint64_t)0x100;     /* never single-step */
    return s;
}

/* Emit the restore stub at e->at. tmp_stack: a 16-byte aligned place it may
 * push two words below; image: the XSAVE image and errno slots (0 for the
 * cave, where only a syscall ran: vector state and errno are untouched).
 * *marker gets the address just after the marker syscall. */
static void emit_restore(emit *e, const mlz_remote *r, uint64_t tmp_stack, uint64_t image, uint64_t *marker)
{
    struct user_regs_struct s = resume_regs(r);
    e_movabs(e, RSP, tmp_stack);
    e_movabs(e, RAX, r->sigmask);
    e_u8(e, 0x50);                                                     /* push rax */
    e_mov32(e, RAX, SYS_rt_sigprocmask);                               /* the marker: a no-op */
    e_mov32(e, RDI, SIG_SETMASK);
    e_bytes(e, "\x31\xf6", 2);                                         /* xor esi, esi */
    e_bytes(e, "\x31\xd2", 2);                                         /* xor edx, edx */
    e_mov32(e, R10, 8);
    e_bytes(e, "\x0f\x05", 2);                                         /* syscall */
    *marker = e->at + e->n;
    /* From here on the thread restores itself (we died, or let it go). The
     * loader lock, if the session still holds it in this thread, is given
     * back first, signals still blocked: pthread_mutex_unlock(lock) when
     * the lock's owner (+8) is this thread. */
    if (image && r->loader_lock && r->unlock_fn) {
        e_movabs(e, RAX, r->loader_lock);
        e_bytes(e, "\x8b\x40\x08", 3);                                 /* mov eax, [rax+8] */
        e_u8(e, 0x3d); e_u32(e, (uint32_t)r->ns_tid);                  /* cmp eax, tid */
        e_bytes(e, "\x75\x1e", 2);                                     /* jne over the next 30 bytes */
        e_movabs(e, RDI, r->loader_lock);
        e_movabs(e, RAX, r->unlock_fn);
        e_bytes(e, "\x48\x83\xec\x08", 4);                             /* sub rsp, 8: aligned at the call */
        e_bytes(e, "\xff\xd0", 2);                                     /* call rax */
        e_bytes(e, "\x48\x83\xc4\x08", 4);                             /* add rsp, 8 */
    }
    e_mov32(e, RAX, SYS_rt_sigprocmask);                               /* the thread's own mask */
    e_mov32(e, RDI, SIG_SETMASK);
    e_bytes(e, "\x48\x89\xe6", 3);                                     /* mov rsi, rsp */
    e_bytes(e, "\x31\xd2", 2);                                         /* xor edx, edx */
    e_mov32(e, R10, 8);
    e_bytes(e, "\x0f\x05", 2);                                         /* syscall */
    if (r->boosted) {
        e_mov32(e, RAX, SYS_setpriority);
        e_mov32(e, RDI, PRIO_PROCESS);
        e_mov32(e, RSI, (uint32_t)r->tid);
        e_mov32(e, RDX, (uint32_t)r->nice);
        e_bytes(e, "\x0f\x05", 2);
    }
    if (image) {
        uint64_t xs = image, errno_slot = image + RESTORE_LEN - 16;
        e_mov32(e, RAX, 0xffffffffu);
        e_mov32(e, RDX, 0xffffffffu);
        e_bytes(e, "\x48\x0f\xae\x2d", 4); e_rip32(e, xs);               /* xrstor64 [rip+image] */
        e_bytes(e, "\x48\x8b\x05", 3); e_rip32(e, errno_slot);         /* mov rax, [errno address] */
        e_bytes(e, "\x48\x85\xc0", 3);                                 /* test rax, rax */
        e_bytes(e, "\x74\x08", 2);                                     /* jz over the next 8 bytes */
        e_bytes(e, "\x8b\x0d", 2); e_rip32(e, errno_slot + 8);         /* mov ecx, [errno value] */
        e_bytes(e, "\x89\x08", 2);                                     /* mov [rax], ecx */
    }
    e_movabs(e, RAX, s.eflags);
    e_u8(e, 0x50);                                                     /* push rax */
    e_u8(e, 0x9d);                                                     /* popfq */
    const uint64_t v[16] = { s.rax, s.rcx, s.rdx, s.rbx, s.rsp, s.rbp, s.rsi, s.rdi,
                             s.r8, s.r9, s.r10, s.r11, s.r12, s.r13, s.r14, s.r15 };
    for (int reg = RCX; reg <= R15; reg++)
        if (reg != RSP) e_movabs(e, reg, v[reg]);
    e_movabs(e, RAX, s.rax);
    e_movabs(e, RSP, s.rsp);
    e_bytes(e, "\xff\x25\x00\x00\x00\x00", 6);                        /* jmp [rip+0] */
    e_u64(e, s.rip);
}

/* The first syscall (mmap of the scratch) runs in a cave: the unused tail of
 * an executable mapping's last page, which no code ever reaches. Its stub
 * restores the thread from immediates alone, so it needs no memory of ours. */
static int write_cave(mlz_remote *r)
{
    uint8_t buf[CAVE_NEED];
    emit e = { buf, 0, sizeof buf, r->cave };
    uint64_t marker;
    e_bytes(&e, "\x0f\x05", 2);
    emit_restore(&e, r, ((r->saved.rsp - 256) & ~(uint64_t)15) - 16, 0, &marker);
    if (e.n > e.cap) { mlz__err("internal: the cave stub needs %zu bytes", e.n); return MLZ_INJ_EIO; }
    return mlz__mem_write(r->cave, buf, e.n);
}

/* The scratch page's code: the syscall and call entries and their stub. */
static int write_scratch_code(mlz_remote *r)
{
    uint8_t buf[CODE_LEN];
    emit e = { buf, 0, sizeof buf, r->code };
    memset(buf, 0xcc, sizeof buf);
    e_bytes(&e, "\x0f\x05\xe9", 3);                                   /* syscall; jmp restore */
    e_rip32(&e, r->code + OFF_RESTORE);
    e.n = OFF_CALL;
    e_bytes(&e, "\x41\xff\xd3", 3);                                   /* call *%r11 */
    e_bytes(&e, "\x49\x89\xc7\xe9", 4);                               /* mov r15, rax; jmp restore */
    e_rip32(&e, r->code + OFF_RESTORE);
    e.n = OFF_RESTORE;
    emit_restore(&e, r, r->stack_top - 16, r->image, &r->marker);
    if (e.n > e.cap) return MLZ_INJ_EIO;
    int rc = mlz__mem_write(r->image, r->xsave, r->xsave_len);
    if (!rc) rc = mlz__mem_write(r->code, buf, sizeof buf);
    return rc;
}

int mlz__remote_map_scratch(mlz_remote *r, uint64_t cave, size_t cave_len)
{
    int64_t ret;
    int rc;
    size_t len = CODE_LEN + STACK_LEN + DATA_LEN + RESTORE_LEN;
    if (cave_len < CAVE_NEED) { mlz__err("no room for the first syscall's stub"); return MLZ_INJ_EELF; }
    r->cave = cave;
    r->cave_len = CAVE_NEED;
    if ((rc = mlz__mem_read(cave, r->cave_saved, CAVE_NEED))) return rc;
    if ((rc = write_cave(r))) return rc;
    r->cave_written = 1;
    uint64_t a[6] = { 0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, (uint64_t)-1, 0 };
    rc = mlz__remote_syscall_at(r, cave, SYS_mmap, a, &ret);
    if (!rc && (uint64_t)ret > (uint64_t)-4096) {
        mlz__err("mmap in the target failed: %s", strerror((int)-ret));
        rc = MLZ_INJ_EREMOTE;
    }
    if (rc) return rc;
    r->scratch = (uint64_t)ret;
    r->scratch_len = len;
    r->code = r->scratch;
    r->stack_top = (r->scratch + CODE_LEN + STACK_LEN) & ~(uint64_t)15;
    r->data = r->scratch + CODE_LEN + STACK_LEN;
    r->data_len = DATA_LEN;
    r->image = r->data + DATA_LEN;                    /* page-aligned: fine for xrstor */
    if (r->xsave_len + 16 > RESTORE_LEN) { mlz__err("XSAVE area too large"); return MLZ_INJ_EIO; }
    if ((rc = write_scratch_code(r))) return rc;
    uint64_t p[6] = { r->scratch, CODE_LEN, PROT_READ | PROT_EXEC, 0, 0, 0 };
    rc = mlz__remote_syscall_at(r, cave, SYS_mprotect, p, &ret);
    if (!rc && ret) { mlz__err("mprotect in the target failed: %s", strerror((int)-ret)); rc = MLZ_INJ_EREMOTE; }
    return rc;
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
    /* From now on the self-restore puts errno back too. */
    uint64_t slot[2] = { addr, (uint64_t)(uint32_t)v };
    return mlz__mem_write(r->image + RESTORE_LEN - 16, slot, sizeof slot);
}

int mlz__remote_put(mlz_remote *r, size_t off, const void *p, size_t n, uint64_t *at)
{
    if (off + n > r->data_len) { mlz__err("argument too long for the scratch area"); return MLZ_INJ_EIO; }
    *at = r->data + off;
    return mlz__mem_write(*at, p, n);
}

/* A call that does not return in time cannot be undone (dlopen may hold the
 * loader lock): the thread is let go, finishes the call and restores itself
 * through the stub. Its scratch mapping stays (the call's stack is there). */
static int let_go(mlz_remote *r)
{
    int rc = mlz__pt_detach(r->tid, 0);
    if (rc) return rc;
    r->let_go = 1;
    r->boosted = 0;
    return 0;
}

/* At the marker's syscall-entry stop: skip the syscall and take the exit
 * stop, so the next step starts from a syscall stop as after a remote
 * syscall (no user instruction runs in between). */
static int leave_marker(mlz_remote *r, struct user_regs_struct *g)
{
    int st, rc;
    g->orig_rax = (uint64_t)-1;
    if ((rc = mlz__pt_setregs(r->tid, g))) return rc;
    if ((rc = run_until_stop(r, 1, &st, 2000))) return rc;
    if (WSTOPSIG(st) != (SIGTRAP | 0x80)) {
        mlz__err("thread %d: %s instead of the end of the call", (int)r->tid, sig_name(WSTOPSIG(st) & 0x7f));
        return MLZ_INJ_EREMOTE;
    }
    r->last_stop = STOP_SYSCALL;
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
    /* Every syscall stops it (PTRACE_SYSCALL): the marker's entry is the end
     * of the call; the others are the callee's own and go on. */
    uint64_t deadline = mlz__now_us() + (uint64_t)timeout_ms * 1000u;
    for (;;) {
        uint64_t now = mlz__now_us();
        rc = now >= deadline ? MLZ_INJ_ETIMEOUT : run_until_stop(r, 1, &st, (int)((deadline - now + 999) / 1000));
        if (rc == MLZ_INJ_ETIMEOUT) {
            stop_now(r);
            if (!r->tid) return MLZ_INJ_EGONE;
            if (mlz__pt_getregs(r->tid, &g) == 0 && g.rip == r->marker && (int64_t)g.orig_rax == SYS_rt_sigprocmask) {
                *ret = g.r15;          /* it returned as the clock ran out */
                return leave_marker(r, &g);
            }
            if (let_go(r) == 0)
                mlz__err("injected call in thread %d did not return within %d ms; the thread was let go: it "
                         "finishes the call by itself and then resumes where it was (run memlyze-detach %d "
                         "to undo whatever the call did)", (int)r->tid, timeout_ms, (int)r->pid);
            else
                mlz__err("injected call in thread %d did not return within %d ms", (int)r->tid, timeout_ms);
            return rc;
        }
        if (rc) return rc;
        if (WSTOPSIG(st) != (SIGTRAP | 0x80)) break;
        if ((rc = mlz__pt_getregs(r->tid, &g))) return rc;
        if (g.rip == r->marker && (int64_t)g.orig_rax == SYS_rt_sigprocmask && (int64_t)g.rax == -ENOSYS) {
            *ret = g.r15;
            return leave_marker(r, &g);
        }
    }
    /* A signal: the call crashed or was stopped. The signal is not delivered
     * (the next resume passes 0). */
    r->last_stop = STOP_SIGNALISH;
    mlz__pt_getregs(r->tid, &g);
    mlz__err("injected call in thread %d stopped by %s at 0x%llx (aborted)", (int)r->tid,
             sig_name(WSTOPSIG(st) & 0x7f), (unsigned long long)g.rip);
    return MLZ_INJ_EREMOTE;
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
        /* Mid-call: it restores itself. */
        free(r->xsave);
        r->xsave = NULL;
        return 0;
    }
    if (r->errno_addr && (e = mlz__mem_write(r->errno_addr, &r->errno_val, sizeof r->errno_val)) && !rc) rc = e;
    if (r->scratch) {
        /* From the cave: after a munmap issued from the scratch page itself,
         * the thread would sit in unmapped code should we die right then. */
        int64_t ret;
        uint64_t a[6] = { r->scratch, r->scratch_len, 0, 0, 0, 0 };
        e = r->cave_written ? mlz__remote_syscall_at(r, r->cave, SYS_munmap, a, &ret) : MLZ_INJ_EIO;
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
    /* The thread is its own again: the cave can have its bytes back. */
    if (r->cave_written && (e = mlz__mem_write(r->cave, r->cave_saved, r->cave_len)) == 0) r->cave_written = 0;
    free(r->xsave);
    r->xsave = NULL;
    return rc;
}
