/*
 * injector.h - what the files of memlyze-attach / memlyze-detach share.
 *
 * The injector stops a running process with ptrace, borrows one of its
 * threads at a safe point, makes it map a scratch page, load the payload
 * from a memfd with the target's own dlopen and call the payload's entry
 * points, then puts the thread back exactly as it was. Nothing here runs
 * inside the target: every step is a ptrace request or a remote call.
 *
 * Errors: functions return 0 or a negative MLZ_INJ_E* code and record one
 * line naming the cause with mlz__err(); the first recorded cause wins, so a
 * cleanup failure never hides the root cause.
 */
#ifndef MLZ_INJECTOR_H
#define MLZ_INJECTOR_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/user.h>

#include "proc.h"

enum {
    MLZ_INJ_OK = 0,
    MLZ_INJ_EPERM = -1,      /* ptrace not allowed */
    MLZ_INJ_ESRCH = -2,      /* no such process, or it exited */
    MLZ_INJ_EREFUSE = -3,    /* preflight refused the target */
    MLZ_INJ_ETIMEOUT = -4,   /* the target did not reach a stop / safe point in time */
    MLZ_INJ_EREMOTE = -5,    /* a remote syscall or call failed or stopped unexpectedly */
    MLZ_INJ_EELF = -6,       /* symbol or module not found */
    MLZ_INJ_EIO = -7,        /* /proc, files, memory access */
    MLZ_INJ_ESTATE = -8,     /* not attached / already attached / bad state file */
    MLZ_INJ_EGONE = -9,      /* the target exited while we worked on it */
};

/* ---- errmsg.c */
void mlz__err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *mlz__errmsg(void);          /* "" when nothing was recorded */
void mlz__err_clear(void);
extern int mlz__verbose;                /* -v: progress lines on stderr */
void mlz__note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t mlz__now_us(void);             /* CLOCK_MONOTONIC */

/* ---- ptrace.c: thin ptrace wrappers; errno turned into one-line causes */
int  mlz__pt_seize(pid_t tid);
int  mlz__pt_interrupt(pid_t tid);
int  mlz__pt_cont(pid_t tid, int sig);
int  mlz__pt_syscall(pid_t tid, int sig);
int  mlz__pt_detach(pid_t tid, int sig);
int  mlz__pt_getregs(pid_t tid, struct user_regs_struct *r);
int  mlz__pt_setregs(pid_t tid, const struct user_regs_struct *r);
int  mlz__pt_getxstate(pid_t tid, void *buf, size_t *len);   /* NT_X86_XSTATE, len in/out */
int  mlz__pt_setxstate(pid_t tid, void *buf, size_t len);
int  mlz__pt_getsigmask(pid_t tid, uint64_t *mask);
int  mlz__pt_setsigmask(pid_t tid, uint64_t mask);
int  mlz__pt_getsiginfo(pid_t tid, siginfo_t *si);
/* waitpid(tid, __WALL) with a timeout; 0 and *status, MLZ_INJ_ETIMEOUT, or
 * MLZ_INJ_ESRCH (no such child). */
int  mlz__pt_wait(pid_t tid, int *status, int timeout_ms);
/* The cause of a failed PTRACE_SEIZE, naming YAMA, CAP_SYS_PTRACE, uid. */
const char *mlz__pt_perm_cause(pid_t pid, int err, char *buf, size_t cap);
/* Target memory through /proc/PID/mem (writes reach read-only pages). */
int  mlz__mem_open(pid_t pid);
void mlz__mem_close(void);
int  mlz__mem_read(uint64_t addr, void *buf, size_t len);
/* A read whose failure is an answer (a probe): no error is recorded, so
 * it cannot stand in for the error of a later step (only the first one
 * recorded is printed). 0 or -1. */
int  mlz__mem_peek(uint64_t addr, void *buf, size_t len);
int  mlz__mem_write(uint64_t addr, const void *buf, size_t len);
int  mlz__mem_read_str(uint64_t addr, char *buf, size_t cap);

/* ---- threads.c: stop every thread of a process and put them back */
enum mlz_tstate {
    MLZ_T_RUNNING,     /* seized, not known to be stopped */
    MLZ_T_TRAP,        /* PTRACE_EVENT_STOP after our interrupt */
    MLZ_T_GROUP,       /* PTRACE_EVENT_STOP for a group stop (SIGSTOP & co.) */
    MLZ_T_SIGNAL,      /* signal-delivery-stop: `sig` must be delivered on resume */
    MLZ_T_GONE,        /* exited */
    MLZ_T_DETACHED,
};
typedef struct mlz_thread {
    pid_t tid;
    int state;
    int sig;                     /* signal to deliver on resume/detach (MLZ_T_SIGNAL) */
    int group_sig;               /* stop signal of the group stop it sits in */
    struct user_regs_struct regs;/* at the stop (safe point scan, syscall checks) */
    int unsafe;                  /* last scan: in the allocator, loader or payload */
} mlz_thread;

typedef struct mlz_tgroup {
    pid_t pid;
    mlz_thread *t;
    int n, cap;
    int group_stopped;           /* the process was in a group stop when we came */
    pid_t want;                  /* borrow only this thread (--thread, for tests) */
    uint64_t stop_us;            /* when the last all-stop began (pause accounting) */
    uint64_t paused_us;          /* total time every thread was held */
} mlz_tgroup;

int  mlz__threads_stop_all(mlz_tgroup *g, int timeout_ms);      /* seize + interrupt until stable */
int  mlz__threads_run(mlz_tgroup *g, int ms);                   /* let them run, then stop again */
void mlz__threads_detach_all(mlz_tgroup *g, pid_t keep);        /* every thread but `keep` */
int  mlz__threads_detach_one(mlz_tgroup *g, pid_t tid);
mlz_thread *mlz__threads_find(mlz_tgroup *g, pid_t tid);
/* The thread's name (comm), "?" if gone. */
const char *mlz__thread_name(pid_t pid, pid_t tid, char *buf, size_t cap);
/* The thread's id in its own PID namespace (what gettid() says there, and
 * what its mutexes record as owner): the last NSpid field. */
pid_t mlz__ns_tid(pid_t pid, pid_t tid);
void mlz__threads_free(mlz_tgroup *g);

/* ---- the target's modules, their symbols and the payload are read by the
 * proc library (proc/proc.h), shared with memlyze snapshot. errmsg.c:
 * records mlz_proc_error() as our cause and turns its MLZ_PROC_E* code
 * into MLZ_INJ_EIO or MLZ_INJ_EELF. */
int mlz__proc_err(int rc);

/* ---- preflight.c: refuse clearly before touching the target */
typedef struct mlz_target {
    pid_t pid;
    uid_t uid;
    char comm[64];
    int stopped;                 /* State: T (group-stopped) */
    int payload_mapped;          /* our payload is already in it */
    int payload_active;          /* ... and sampling: 1, inert: 0, a fork child's inherited: 2, unknown: -1 */
    /* An inert payload's per-thread sampler state (resample.c): offsets
     * from a thread's fs base of its countdown, initialized and rate_shift
     * fields, and their widths; nsampler = 0 when not to be reset. */
    int nsampler;
    int64_t sampler_at[3];
    int sampler_width[3];
    int seccomp;                 /* 0 none, 1 strict, 2 filter */
    uint64_t image;              /* mlz__image_id at the preflight */
} mlz_target;
enum { MLZ_PRE_ALLOW_SECCOMP = 1 };
int mlz__preflight(pid_t pid, int flags, mlz_target *t);
/* resample.c: in every thread held stopped, the sampler state an earlier
 * session left is cleared, so each draws afresh at the new rate. */
void mlz__resample_threads(const mlz_tgroup *g, const mlz_target *t);
/* Which program image pid runs: a hash of its auxiliary vector, which every
 * exec writes anew (entry point, program headers, AT_RANDOM's address on
 * the new stack). 0 if it cannot be read. */
uint64_t mlz__image_id(pid_t pid);

/* ---- remote.c: run code in one stopped thread and put it back */
typedef struct mlz_remote {
    pid_t pid, tid;
    struct user_regs_struct saved;   /* the thread's registers at the stop */
    uint8_t *xsave;                  /* its full XSAVE area */
    size_t xsave_len;
    uint64_t sigmask;                /* its blocked-signal mask */
    uint64_t scratch;                /* our mapping in the target, 0 until mapped */
    size_t scratch_len;
    uint64_t code;                   /* stubs inside scratch */
    uint64_t data;                   /* argument area inside scratch */
    size_t data_len;
    uint64_t stack_top;              /* 16-byte aligned */
    uint64_t image;                  /* the thread's XSAVE image and errno, for the self-restore */
    uint64_t marker;                 /* rip after the restore stub's marker syscall */
    uint64_t cave;                   /* the first syscall's stub (remote.c), and its old bytes */
    size_t cave_len;
    uint8_t cave_saved[512];
    int cave_written;
    int last_stop;                   /* what kind of stop the thread sits in */
    int timeout_ms;
    int nice, boosted;               /* its nice value, raised while lent */
    int let_go;                      /* a call timed out: detached, it finishes and restores itself */
    uint64_t errno_addr;             /* the thread's errno (its TLS), put back at the end */
    int32_t errno_val;
    /* The other threads stay held while we run, until release_at_us: then
     * release(release_arg) lets them go (a lock one of them holds may be
     * what our thread waits for). 0: nothing held. */
    uint64_t release_at_us;
    void (*release)(void *arg);
    void *release_arg;
    /* The loader lock (_dl_load_lock) the session takes in this thread, and
     * libc's pthread_mutex_unlock: a thread that restores itself gives the
     * lock back first (set before the scratch is mapped; 0: not used). */
    uint64_t loader_lock, unlock_fn;
    pid_t ns_tid;                    /* tid as the target sees it: the lock's owner field */
    int loader_locked;               /* taken, not given back yet */
} mlz_remote;

int  mlz__remote_begin(mlz_remote *r, pid_t pid, pid_t tid, int timeout_ms);
/* Remote syscall executed at `insn` (which must hold 0f 05); result in *ret. */
int  mlz__remote_syscall_at(mlz_remote *r, uint64_t insn, long nr, const uint64_t a[6], int64_t *ret);
int  mlz__remote_syscall(mlz_remote *r, long nr, const uint64_t a[6], int64_t *ret);
/* Map the scratch area (code, data, stack, the self-restore); `cave` is
 * unused executable memory (cave_len bytes) for the one syscall that maps it. */
int  mlz__remote_map_scratch(mlz_remote *r, uint64_t cave, size_t cave_len);
/* Call fn(a0..a5) on the scratch stack; result (rax) in *ret. */
int  mlz__remote_call(mlz_remote *r, uint64_t fn, const uint64_t a[6], uint64_t *ret, int timeout_ms);
/* Find the thread's errno (libc's __errno_location at `fn`) and remember
 * its value: the functions we call may change it. */
int  mlz__remote_save_errno(mlz_remote *r, uint64_t fn);
/* Bytes into the data area; their target address in *at. */
int  mlz__remote_put(mlz_remote *r, size_t off, const void *p, size_t n, uint64_t *at);
/* Unmap scratch, restore registers, xstate and mask exactly; the thread
 * stays stopped (in a stop from which the kernel redoes an interrupted
 * syscall). 0, or < 0 if the thread could not be restored. */
int  mlz__remote_end(mlz_remote *r);

/* ---- locks.c: glibc's locks an injected call may wait for, read from outside */
typedef struct mlz_glibc_locks {
    uint64_t rtld[3];                /* _dl_load_lock, _dl_load_write_lock, _dl_load_tls_lock */
    uint64_t stack_cache;            /* _dl_stack_cache_lock (an int) */
    uint64_t main_arena;             /* struct malloc_state: its mutex comes first */
    uint64_t arena_next;             /* offset of malloc_state.next */
    char source[96];                 /* where the offsets came from */
} mlz_glibc_locks;
enum { MLZ_LOCK_LOADER = 1, MLZ_LOCK_STACKS = 2, MLZ_LOCK_ARENA = 4 };
/* Locate the locks in process pid; 0, or MLZ_INJ_EELF when this glibc is
 * unknown and has no debug info (callers then rely on unwinding alone). */
int mlz__locks_find(pid_t pid, mlz_glibc_locks *L);
/* With every thread of g stopped: 0 if none is held, else the MLZ_LOCK_*
 * kind of the first held one and a line in why ("thread 4711 (worker)
 * holds ..."); *holder: the tid holding the loader lock, when known. */
int mlz__locks_busy(const mlz_glibc_locks *L, mlz_tgroup *g, char *why, size_t cap, pid_t *holder);
/* The addresses of the process's malloc arenas (each starts with its
 * mutex), at most cap of them; how many. */
#define MLZ_ARENAS_MAX 4096
int mlz__locks_arenas(const mlz_glibc_locks *L, uint64_t *out, int cap);

/* ---- safepoint.c: pick a thread that holds no allocator or loader lock */
/* Stops all threads (g), scans them and the locks L (NULL: unknown), runs
 * them briefly and retries until a thread is at a safe point and no lock is
 * held, or timeout_ms passes. *tid gets the thread. */
int mlz__safepoint_find(mlz_tgroup *g, const mlz_glibc_locks *L, int timeout_ms, pid_t *tid);

/* ---- load.c: put the payload into the target and call it */
typedef struct mlz_loaded {
    uint64_t handle;                 /* dlopen handle, 0 if found already mapped */
    uint64_t fn_attach, fn_detach, fn_strerror;
    uint64_t fn_stats;               /* memlyze_attach_stats(int *modules, int *slots), optional */
    uint64_t fn_inline;              /* memlyze_inline_sites (payload/inline_sites.h), optional */
    int reused;                      /* payload was already mapped */
    char name[64];                   /* the name dlopen saw */
} mlz_loaded;
/* Loads `payload_path` (already checked) through a memfd unless the payload
 * is mapped already; resolves the entry points named by `entry[]`. */
int mlz__load_payload(mlz_remote *r, const char *payload_path, mlz_loaded *out);
/* Map the scratch area (borrowing libc's entry point for the first
 * syscall) and save the borrowed thread's errno. */
int mlz__remote_prepare(mlz_remote *r);
/* Entry points of the payload already mapped in the target. */
int mlz__find_loaded(mlz_remote *r, mlz_loaded *out);
/* The payload file may be written by nobody but root or us. */
int mlz__check_payload_file(const char *path);
/* Call an int-returning entry point with a string argument (may be NULL). */
int mlz__call_entry(mlz_remote *r, uint64_t fn, const char *arg, int *ret, int timeout_ms);
/* Modules and slots patched, via memlyze_attach_stats; -1 when unknown. */
void mlz__payload_stats(mlz_remote *r, const mlz_loaded *l, int *modules, int *slots);
/* The payload's message for a code, via memlyze_strerror. */
void mlz__payload_strerror(mlz_remote *r, const mlz_loaded *l, int code, char *buf, size_t cap);

/* ---- session.c: the sequence both commands share */
typedef struct mlz_session {
    mlz_tgroup g;
    mlz_remote r;
    int stopped_all;                 /* every thread held */
    int remote_active;               /* a thread is borrowed */
    sigset_t oldmask;                /* our SIGINT/TERM/HUP state before the window */
    int blocked;
    uint64_t t0_us;
    uint64_t pause_all_us;           /* every thread held */
    uint64_t lend_us;                /* the borrowed thread held */
    int others_held;                 /* the other threads are still stopped */
} mlz_session;
/* hold_ms: how long the other threads may stay stopped while the borrowed
 * one runs injected code (0: let them go before it runs). */
int  mlz__session_begin(mlz_session *s, const mlz_target *t, pid_t want_tid, int timeout_ms, int hold_ms);
int  mlz__session_end(mlz_session *s);     /* restore everything, detach; keeps first error */

/* ---- state.c: what attach leaves for detach, and the finalize step */
typedef struct mlz_state {
    char output[4096];               /* absolute path of the final .mlyze */
    char spool[4096];                /* the spool, as the target names it */
    char spool_ours[4200];           /* the same file, as we reach it (/proc/PID/root/...) */
    char dir_ours[200];
    uint64_t dir_dev, dir_ino;       /* the directory itself, made by state_prepare (0: not known) */
    uint64_t rate;
    long long attached_at;           /* unix seconds */
} mlz_state;
/* Create (or check) the private state directory, mode 0700, owned by `uid`. */
int  mlz__state_prepare(pid_t pid, uid_t uid, mlz_state *s);
int  mlz__state_write(pid_t pid, const mlz_state *s);   /* as state.new */
int  mlz__state_commit(const mlz_state *s);              /* state.new -> state */
/* The spool the payload left (sealed, or unsealed after an exec) into out. */
int  mlz__state_spool_left(pid_t pid, const mlz_state *s, char *out, size_t cap);
void mlz__state_abort(pid_t pid, const mlz_state *s);               /* a failed attach: drop ours only */
int  mlz__state_read(pid_t pid, mlz_state *s);      /* MLZ_INJ_ESTATE when there is none */
/* The record of PID that exited while attached (read through our /tmp), and
 * the owner of its directory; MLZ_INJ_ESTATE when there is none to trust. */
int  mlz__state_read_exited(pid_t pid, mlz_state *s, uid_t *owner);
/* 1 if PID's record is of an earlier process given the same pid: it exited
 * while attached (its start time differs from the live one's). */
int  mlz__state_stale(pid_t pid);
void mlz__state_remove(pid_t pid, const mlz_state *s, int keep_spool);
/* p made absolute against our working directory. */
int  mlz__abspath(const char *p, char *out, size_t cap);
/* The payload next to our binary (or $MEMLYZE_PAYLOAD). */
int  mlz__default_payload(char *buf, size_t cap);
/* Runs `memlyze finalize --pid PID -o OUT SPOOL` (PID: the process the
 * spool came from, as numbered here); 0 on success. */
int  mlz__finalize(const char *spool, const char *out, pid_t pid);

/* ---- cli.c: what attach_main.c and detach_main.c share */
typedef struct mlz_cli {
    const char *output;              /* -o */
    int timeout_ms, hold_ms, quiet;
    pid_t thread;                    /* --thread: borrow only this one */
} mlz_cli;
enum { MLZ_OPT_TIMEOUT = 256, MLZ_OPT_HOLD, MLZ_OPT_THREAD, MLZ_OPT_FIRST_OWN };
/* getopt_long entries of the shared options (end a command's own list). */
#define MLZ_CLI_OPTIONS                                                                          \
    { "output", required_argument, 0, 'o' }, { "timeout", required_argument, 0, MLZ_OPT_TIMEOUT }, \
    { "hold", required_argument, 0, MLZ_OPT_HOLD }, { "thread", required_argument, 0, MLZ_OPT_THREAD }, \
    { "verbose", no_argument, 0, 'v' }, { "quiet", no_argument, 0, 'q' }, { "help", no_argument, 0, 'h' }, \
    { 0, 0, 0, 0 }
/* 1 when c was a shared option (taken into o), 0 when not, -1 on a bad
 * value (*bad says which). */
int   mlz__cli_option(int c, const char *arg, mlz_cli *o, const char **bad);
/* "PROG: MSG" and the usage on stderr; returns 2, the usage exit code. */
int   mlz__cli_usage(const char *prog, const char *usage, const char *msg);
/* The PID argument (-1 if it is not one); also raises our priority. */
pid_t mlz__cli_pid(const char *arg);
/* The one PID left after the options; -1 and *bad when missing or wrong. */
pid_t mlz__cli_pid_arg(int argc, char **argv, int optind, const char **bad);

/* ---- inline.c: the payload's inline-hook jumps, written with every thread
 * stopped and none inside the bytes replaced (payload/inline_sites.h) */
struct memlyze_inline_site;
/* In the session, after memlyze_attach("...;inline=remote"): the jumps to
 * write (names read into names[i], 32 bytes each). Returns how many, 0 when
 * the payload has none, < 0 on error. */
int mlz__inline_fetch(mlz_remote *r, const mlz_loaded *l, struct memlyze_inline_site *s, int cap,
                      char (*names)[32]);
/* After the session: stop every thread, wait (letting them run 1 ms at a
 * time, up to timeout_ms) until no PC is inside a site's range, write the
 * jumps whose bytes are still the originals. Returns how many were written;
 * *paused_us is how long every thread was held. */
int mlz__inline_write(pid_t pid, const struct memlyze_inline_site *s, int n, int timeout_ms,
                      const char (*names)[32], uint64_t *paused_us);
/* (session.c) epoll_wait/semop that our stop made return -EINTR: issue again. */
void mlz__undo_eintr(mlz_tgroup *g);

#endif
