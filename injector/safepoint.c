/*
 * safepoint.c - choose the thread to borrow, and the moment: no thread may
 * hold a lock the injected calls will take.
 *
 * dlopen takes the loader's locks and allocates; the payload's start-up
 * allocates and creates a thread, its detach joins one. A lock held by ANY
 * thread can block the borrowed one forever: the holder may wait for the
 * thread we borrowed (a library constructor waiting for the main thread),
 * or be the borrowed thread itself (stopped inside its own pthread_join).
 * So, with every thread stopped:
 *   1. the lock words themselves are read (locks.c): the loader's locks
 *      and the thread-stack cache lock must be free; a held malloc arena
 *      lock is allowed only while no holder is parked in a system call
 *      inside the allocator (malloc_info writing into a full pipe);
 *   2. the candidate is unwound from outside with libdw (the thread is
 *      ptrace-stopped; libdw reads its registers and stack and walks
 *      .eh_frame), and rejected if any frame is in ld.so, in libc's dl* /
 *      _dl_* functions, in libc's allocator, in fork or pthread internals, or
 *      in the payload (except the payload's own idle drain thread, the
 *      safest of all to borrow for a detach). This catches glibcs whose lock
 *      layout we do not know.
 * Debian's libc has no .symtab: names come from .dynsym, where static
 * functions are holes ("?"). malloc.c is one translation unit and its code
 * is contiguous, so the span from the exported symbol before the first
 * allocator export to the one after the last is treated as "in malloc".
 *
 * When a lock is held or no thread is safe, all threads run for a few ms
 * and everything is looked at again, until the timeout; then the refusal
 * names the thread and what it holds.
 */
#include "injector.h"
#include "info.h"

#include <elfutils/libdwfl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#define RETRY_RUN_MS 3          /* the first time the threads run between scans... */
#define RETRY_RUN_MAX_MS 50     /* ...doubling up to this: a fork (or any syscall our stop
                                 * interrupts and the kernel restarts) that takes longer than
                                 * one window would otherwise never finish */

static const char *const unsafe_exact[] = {
    "malloc", "free", "calloc", "realloc", "reallocarray", "memalign", "posix_memalign", "aligned_alloc",
    "valloc", "pvalloc", "cfree", "malloc_trim", "malloc_stats", "malloc_info", "mallinfo", "mallinfo2",
    "malloc_usable_size", "mallopt", "fork", "_Fork", "vfork", "pthread_create", "pthread_join",
    "pthread_tryjoin_np", "pthread_timedjoin_np", "pthread_clockjoin_np", "pthread_detach", "pthread_exit",
    "__pthread_clockjoin_ex",
    "exit", "_exit", "backtrace", "iconv_open", "getaddrinfo", "getpwnam", "getpwuid", NULL,
};
static const char *const unsafe_prefix[] = {
    "dl", "_dl_", "__dl", "__libc_dl", "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
    "__libc_memalign", "__libc_valloc", "__libc_pvalloc", "__libc_mallinfo", "__libc_fork", "_int_",
    "tcache_", "arena_", "sysmalloc", "malloc_", "__malloc_", "__nptl_", "__pthread_create", "__pthread_join", "__pthread_clockjoin", "_IO_cleanup",
    NULL,
};

/* Exported functions of glibc's malloc.c (the translation unit whose span
 * we reject); a pc anywhere between their neighbours is inside malloc.c. */
static const char *const malloc_tu[] = {
    "malloc", "free", "calloc", "realloc", "memalign", "valloc", "pvalloc", "posix_memalign",
    "aligned_alloc", "malloc_trim", "malloc_usable_size", "mallinfo", "mallinfo2", "malloc_stats",
    "mallopt", "malloc_info", "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc",
    "__libc_memalign", "__libc_valloc", "__libc_pvalloc", "__libc_mallopt", "__libc_mallinfo",
    "__default_morecore", "cfree", NULL,
};

typedef struct scan {
    int unsafe;
    int in_alloc;                    /* the unsafe frame is in libc's allocator */
    int drain_ok;                    /* the payload's drain thread may be borrowed */
    int lockish;                     /* the unsafe frame may hold a loader or thread lock */
    char module[128];                /* innermost frame outside libc and ld.so, below a loader frame */
    int below_loader;
    int frames;
    int past_libc;                   /* a frame outside libc was seen */
    int max_frames;                  /* how deep to look */
    char why[256];
    uint64_t malloc_lo, malloc_hi;   /* runtime span of libc's malloc.c, or 0 */
} scan;

static int in_list(const char *n, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(n, list[i]) == 0) return 1;
    return 0;
}

/* The span of malloc.c inside libc, from its exported functions. */
static void malloc_span(Dwfl_Module *m, uint64_t *lo, uint64_t *hi)
{
    int n = dwfl_module_getsymtab(m);
    uint64_t flo = UINT64_MAX, fhi = 0, below = 0, above = UINT64_MAX;
    *lo = *hi = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i < n; i++) {
            GElf_Sym sym;
            GElf_Addr addr;
            const char *nm = dwfl_module_getsym_info(m, i, &sym, &addr, NULL, NULL, NULL);
            if (!nm || GELF_ST_TYPE(sym.st_info) != STT_FUNC || sym.st_shndx == SHN_UNDEF) continue;
            int fam = in_list(nm, malloc_tu);
            if (pass == 0 && fam) {
                if (addr < flo) flo = addr;
                if (addr + sym.st_size > fhi) fhi = addr + sym.st_size;
            } else if (pass == 1 && !fam) {
                if (addr + sym.st_size <= flo && addr + sym.st_size > below) below = addr + sym.st_size;
                if (addr >= fhi && addr < above) above = addr;
                if (addr < fhi && addr + sym.st_size > flo) return;   /* not contiguous: names only */
            }
        }
        if (pass == 0 && fhi == 0) return;
    }
    *lo = below ? below : flo;
    *hi = above != UINT64_MAX ? above : fhi;
}

static int name_unsafe(const char *n)
{
    for (int i = 0; unsafe_exact[i]; i++)
        if (strcmp(n, unsafe_exact[i]) == 0) return 1;
    for (int i = 0; unsafe_prefix[i]; i++)
        if (strncmp(n, unsafe_prefix[i], strlen(unsafe_prefix[i])) == 0) return 1;
    return 0;
}

/* Whether m is a replacement allocator: a module other than libc that
 * defines malloc (jemalloc, tcmalloc, mimalloc, preloaded or linked). The
 * injected calls allocate through it, and it is no more re-entrant than
 * glibc's: a thread stopped inside it is not borrowed (mimalloc's free
 * lists were corrupted so). Answered once per module (its userdata). */
enum { ALLOC_NO = 1, ALLOC_MODULE, ALLOC_BY_NAME };
static int allocator_module(Dwfl_Module *m)
{
    void **ud = NULL;
    dwfl_module_info(m, &ud, NULL, NULL, NULL, NULL, NULL, NULL);
    if (ud && *ud) return (int)(uintptr_t)*ud;
    int n = dwfl_module_getsymtab(m), kind = ALLOC_NO;
    for (int i = 1; i < n && kind == ALLOC_NO; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *nm = dwfl_module_getsym_info(m, i, &sym, &addr, NULL, NULL, NULL);
        if (nm && sym.st_shndx != SHN_UNDEF && !strcmp(nm, "malloc") &&
            (GELF_ST_TYPE(sym.st_info) == STT_FUNC || GELF_ST_TYPE(sym.st_info) == STT_GNU_IFUNC))
            kind = ALLOC_MODULE;
    }
    /* An executable with an allocator linked in: only the allocator's
     * functions count, by name (the rest of the program is not inside). */
    GElf_Addr bias;
    Elf *e = kind == ALLOC_MODULE ? dwfl_module_getelf(m, &bias) : NULL;
    size_t nph = 0;
    for (size_t i = 0; e && !elf_getphdrnum(e, &nph) && i < nph; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_INTERP) kind = ALLOC_BY_NAME;
    }
    if (ud) *ud = (void *)(uintptr_t)kind;
    return kind;
}

static int allocator_name(const char *sym)
{
    return sym && (name_unsafe(sym) || !strncmp(sym, "je_", 3) || !strncmp(sym, "tc_", 3) || !strncmp(sym, "mi_", 3) ||
                   !strncmp(sym, "_mi_", 4));
}

static int frame_cb(Dwfl_Frame *f, void *arg)
{
    scan *s = arg;
    Dwarf_Addr pc;
    bool act;
    if (!dwfl_frame_pc(f, &pc, &act)) return DWARF_CB_ABORT;
    if (!act && pc) pc--;              /* a return address: look at the call */
    s->frames++;
    Dwfl_Module *m = dwfl_addrmodule(dwfl_thread_dwfl(dwfl_frame_thread(f)), pc);
    const char *mname = m ? dwfl_module_info(m, NULL, NULL, NULL, NULL, NULL, NULL, NULL) : NULL;
    if (!mname || !mlz_proc_is_libc(mname)) s->past_libc = 1;
    if (!m) return s->frames > 64 ? DWARF_CB_ABORT : DWARF_CB_OK;
    const char *sym = dwfl_module_addrname(m, pc);
    if (mlz__verbose > 1)
        mlz__note("  #%d 0x%llx %s in %s", s->frames - 1, (unsigned long long)pc, sym ? sym : "?", mname ? mname : "?");
    if (mname && mlz_proc_is_ldso(mname)) {
        snprintf(s->why, sizeof s->why, "in the dynamic loader (%s)", sym ? sym : "ld.so");
        s->unsafe = s->lockish = 1;
    } else if (mname && mlz_proc_is_payload(mname)) {
        if (s->drain_ok) return DWARF_CB_ABORT;     /* its idle loop: nothing held */
        snprintf(s->why, sizeof s->why, "in the memlyze payload (%s)", sym ? sym : "?");
        s->unsafe = 1;
    } else if (mname && mlz_proc_is_libc(mname)) {
        if (!s->malloc_lo && !s->malloc_hi) malloc_span(m, &s->malloc_lo, &s->malloc_hi);
        if (sym && name_unsafe(sym)) {
            snprintf(s->why, sizeof s->why, "in libc's %s", sym);
            s->unsafe = 1;
            s->lockish = !(pc >= s->malloc_lo && pc < s->malloc_hi);
        } else if (pc >= s->malloc_lo && pc < s->malloc_hi) {
            snprintf(s->why, sizeof s->why, "in libc's allocator (%s)", sym ? sym : "malloc.c internals");
            s->unsafe = s->in_alloc = 1;
        }
    } else if (mname) {
        int a = allocator_module(m);
        if (a == ALLOC_MODULE || (a == ALLOC_BY_NAME && allocator_name(sym))) {
            const char *b = strrchr(mname, '/');
            snprintf(s->why, sizeof s->why, "in its allocator (%s in %s)", sym ? sym : "?", b ? b + 1 : mname);
            s->unsafe = 1;
        }
    }
    if (s->unsafe) return DWARF_CB_ABORT;
    return s->frames >= s->max_frames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

/* Threads whose stop we would rather not borrow: a signal-delivery-stop
 * (mid-delivery) and syscalls that swap the signal mask for their duration
 * (the kernel's saved mask would not survive our own return to user mode). */
static int candidate(const mlz_thread *t)
{
    if (t->state != MLZ_T_TRAP && t->state != MLZ_T_GROUP) return 0;
    switch ((long)t->regs.orig_rax) {
    case SYS_rt_sigsuspend: case SYS_ppoll: case SYS_pselect6: case SYS_epoll_pwait:
    case SYS_epoll_pwait2: case SYS_io_pgetevents:
        return 0;
    }
    return 1;
}

static int find_debuginfo_none(Dwfl_Module *m, void **ud, const char *mod, Dwarf_Addr b,
                               const char *file, const char *dl, GElf_Word crc, char **dpath)
{
    (void)m; (void)ud; (void)mod; (void)b; (void)file; (void)dl; (void)crc; (void)dpath;
    return -1;                         /* .dynsym and .eh_frame are enough; no debuginfo search */
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = find_debuginfo_none,
};

/* The payload's drain thread, idle in its sleep: it holds nothing, and the
 * payload's detach knows not to wait for itself when run on it. */
static int is_idle_drain(pid_t pid, const mlz_thread *t)
{
    char name[64];
    long nr = (long)t->regs.orig_rax;
    return (nr == SYS_nanosleep || nr == SYS_clock_nanosleep || nr == SYS_futex) &&
           !strcmp(mlz__thread_name(pid, t->tid, name, sizeof name), MEMLYZE_DRAIN_THREAD_NAME);
}

/* Blocked inside a system call (not merely returned from one): its stop
 * interrupted the call, which will be restarted or return EINTR. */
static int blocked_in_syscall(const mlz_thread *t)
{
    int64_t ax = (int64_t)t->regs.rax;
    return (int64_t)t->regs.orig_rax >= 0 && (ax == -4 || (ax <= -512 && ax >= -516));
}

/* Blocked in futex on an arena's own mutex (arena[0..n) as read once per
 * scan): a waiter. malloc.c takes those mutexes one at a time (fork's
 * handler takes them all, in order, but waits only for holders that go on
 * once let go), so such a thread holds none, and the holder it waits for is
 * judged by itself. With 64 churning threads on 2 CPUs some thread always
 * waits so: counted as parked holders, they refused every attach. */
static int waits_for_arena(const mlz_thread *t, const uint64_t *arena, int n)
{
    if ((long)t->regs.orig_rax != SYS_futex) return 0;
    for (int i = 0; i < n; i++)
        if (arena[i] == t->regs.rdi) return 1;
    return 0;
}

/* A held arena lock is harmless while its holder runs malloc code; it is a
 * trap when the holder is parked in a system call inside the allocator
 * (malloc_info's fprintf into a full pipe). */
static int parked_in_allocator(Dwfl *d, mlz_tgroup *g, const mlz_glibc_locks *L, char *why, size_t cap)
{
    uint64_t arena[MLZ_ARENAS_MAX];
    int narena = mlz__locks_arenas(L, arena, MLZ_ARENAS_MAX);
    for (int i = 0; i < g->n; i++) {
        mlz_thread *t = &g->t[i];
        if ((t->state != MLZ_T_TRAP && t->state != MLZ_T_GROUP) || !blocked_in_syscall(t) ||
            waits_for_arena(t, arena, narena))
            continue;
        scan s;
        memset(&s, 0, sizeof s);
        s.max_frames = 64;
        dwfl_getthread_frames(d, t->tid, frame_cb, &s);
        if (s.in_alloc) {
            char name[64];
            snprintf(why, cap, "thread %d (%s) waits in a system call %s, holding a malloc arena lock", (int)t->tid,
                     mlz__thread_name(g->pid, t->tid, name, sizeof name), s.why);
            return 1;
        }
    }
    return 0;
}

/* What a thread holding the loader lock is doing, for the refusal: the
 * library whose constructor it runs, when a frame below the loader's is in
 * one ("running a constructor of libfoo.so"). */
static int loader_frame_cb(Dwfl_Frame *f, void *arg)
{
    scan *s = arg;
    Dwarf_Addr pc;
    bool act;
    if (!dwfl_frame_pc(f, &pc, &act) || ++s->frames > 64) return DWARF_CB_ABORT;
    if (!act && pc) pc--;
    Dwfl_Module *m = dwfl_addrmodule(dwfl_thread_dwfl(dwfl_frame_thread(f)), pc);
    const char *mname = m ? dwfl_module_info(m, NULL, NULL, NULL, NULL, NULL, NULL, NULL) : NULL;
    if (!mname) return DWARF_CB_OK;
    if (mlz_proc_is_ldso(mname)) { s->below_loader = 1; return DWARF_CB_ABORT; }
    if (!mlz_proc_is_libc(mname) && !s->module[0])
        snprintf(s->module, sizeof s->module, "%s", strrchr(mname, '/') ? strrchr(mname, '/') + 1 : mname);
    return DWARF_CB_OK;
}

static void name_loader_work(Dwfl *d, pid_t holder, char *why, size_t cap)
{
    scan s;
    memset(&s, 0, sizeof s);
    dwfl_getthread_frames(d, holder, loader_frame_cb, &s);
    size_t n = strlen(why);
    if (s.below_loader && s.module[0] && n + 40 < cap)
        snprintf(why + n, cap - n, ", running a constructor of %s", s.module);
}

/* Without the lock layout: every thread is unwound, and one that is inside
 * the loader or thread creation/joining may hold their locks. */
static int lockish_thread(Dwfl *d, mlz_tgroup *g, pid_t skip, char *why, size_t cap)
{
    for (int i = 0; i < g->n; i++) {
        mlz_thread *t = &g->t[i];
        if (t->tid == skip || (t->state != MLZ_T_TRAP && t->state != MLZ_T_GROUP && t->state != MLZ_T_SIGNAL)) continue;
        scan s;
        memset(&s, 0, sizeof s);
        s.max_frames = 256;
        dwfl_getthread_frames(d, t->tid, frame_cb, &s);
        if (s.lockish || (s.in_alloc && blocked_in_syscall(t))) {
            char name[64];
            snprintf(why, cap, "thread %d (%s) is %s and may hold a lock we need", (int)t->tid,
                     mlz__thread_name(g->pid, t->tid, name, sizeof name), s.why);
            return 1;
        }
    }
    return 0;
}

/* One scan of the stopped threads; *tid set when one is safe. */
static int scan_once(mlz_tgroup *g, const mlz_glibc_locks *L, pid_t *tid, char *last_why, size_t cap)
{
    Dwfl *d = dwfl_begin(&callbacks);
    if (!d) { mlz__err("libdw: %s", dwfl_errmsg(-1)); return MLZ_INJ_EIO; }
    int rc = dwfl_linux_proc_report(d, g->pid);
    if (rc == 0) rc = dwfl_report_end(d, NULL, NULL);
    if (rc == 0) rc = dwfl_linux_proc_attach(d, g->pid, true);
    if (rc) {
        mlz__err("libdw cannot read process %d: %s", (int)g->pid, rc > 0 ? strerror(rc) : dwfl_errmsg(-1));
        dwfl_end(d);
        return MLZ_INJ_EIO;
    }
    *tid = 0;
    /* Threads are looked at until one is safe (unwinding costs ~0.1-1 ms a
     * thread). Those found unsafe on the way are marked: the session lets
     * them (possible lock holders) go at once and holds the rest while the
     * borrowed thread loads. */
    for (int i = 0; i < g->n; i++) g->t[i].unsafe = 0;
    int cands = 0;
    for (int i = 0; i < g->n && !*tid; i++) {
        mlz_thread *t = &g->t[i];
        int cand = g->want ? t->tid == g->want : candidate(t);
        if (!cand) continue;
        cands++;
        scan s;
        memset(&s, 0, sizeof s);
        s.drain_ok = is_idle_drain(g->pid, t);
        s.max_frames = 256;
        if (mlz__verbose > 1)
            mlz__note("unwinding thread %d (stop %d, rax %lld, orig_rax %lld)", (int)t->tid, t->state,
                      (long long)t->regs.rax, (long long)t->regs.orig_rax);
        int rc = dwfl_getthread_frames(d, t->tid, frame_cb, &s);
        if (rc && mlz__verbose > 1)
            mlz__note("  unwind of %d ended: %s", (int)t->tid, dwfl_errmsg(-1));
        /* An unwind that failed before leaving libc tells nothing of what
         * the thread holds: with libc mapped twice (a dlmopen namespace) it
         * stopped at malloc_consolidate, whose malloc.c span could not be
         * looked up, and the borrowed thread's calloc waited for its own
         * arena's lock for good. */
        if (rc < 0 && !s.unsafe && !s.past_libc && s.frames > 0) {
            snprintf(s.why, sizeof s.why, "stopped in libc, where its stack could not be unwound");
            s.unsafe = 1;
        }
        t->unsafe = s.unsafe || s.frames == 0;
        if (!s.unsafe && s.frames > 0) *tid = t->tid;
        else if (s.unsafe) {
            snprintf(last_why, cap, "thread %d %s", (int)t->tid, s.why);
            mlz__note("thread %d not at a safe point: %s", (int)t->tid, s.why);
        } else {
            snprintf(last_why, cap, "thread %d could not be unwound", (int)t->tid);
        }
    }
    if (!cands && !g->want)
        snprintf(last_why, cap, "every thread is stopped in a signal delivery or waits in a call that swaps its "
                 "signal mask for its duration (sigsuspend, ppoll, pselect, epoll_pwait), which is not borrowed");
    /* The locks: none may be held, by any thread, the chosen one included. */
    char lock_why[320];
    pid_t holder = 0;
    int busy = L ? mlz__locks_busy(L, g, lock_why, sizeof lock_why, &holder)
                 : *tid && lockish_thread(d, g, *tid, lock_why, sizeof lock_why);
    if (busy == MLZ_LOCK_ARENA && !parked_in_allocator(d, g, L, lock_why, sizeof lock_why)) busy = 0;
    if (busy == MLZ_LOCK_LOADER && holder > 0) name_loader_work(d, holder, lock_why, sizeof lock_why);
    if (busy) {
        snprintf(last_why, cap, "%s", lock_why);
        mlz__note("not now: %s", last_why);
        *tid = 0;
    }
    dwfl_end(d);
    return 0;
}

int mlz__safepoint_find(mlz_tgroup *g, const mlz_glibc_locks *L, int timeout_ms, pid_t *tid)
{
    uint64_t deadline = mlz__now_us() + (uint64_t)timeout_ms * 1000u;
    char why[320] = "no thread could be borrowed";
    int tries = 0, run_ms = RETRY_RUN_MS;
    for (;;) {
        int rc = scan_once(g, L, tid, why, sizeof why);
        tries++;
        if (rc) return rc;
        if (*tid) {
            mlz__note("thread %d is at a safe point (scan %d)", (int)*tid, tries);
            return 0;
        }
        /* A group-stopped process does not move: waiting cannot help. */
        int movable = 0;
        for (int i = 0; i < g->n; i++) movable |= g->t[i].state == MLZ_T_TRAP || g->t[i].state == MLZ_T_SIGNAL;
        if (!movable || mlz__now_us() >= deadline) break;
        if ((rc = mlz__threads_run(g, run_ms))) return rc;
        if ((run_ms *= 2) > RETRY_RUN_MAX_MS) run_ms = RETRY_RUN_MAX_MS;
    }
    mlz__err("no thread reached a safe point within %d ms (%d scans; last: %s); try again later", timeout_ms, tries, why);
    return MLZ_INJ_ETIMEOUT;
}
