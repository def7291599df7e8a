/*
 * exec_hooks.c - the exec family and _exit, exported by
 * libmemlyze-preload.so only: each flushes the profile (exec.c) and then
 * calls the real function. The glibc functions call execve internally
 * without the PLT, so every entry point a program may use is wrapped here,
 * not just execve.
 */
#include "payload.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);

extern char **environ;

/* Resolved at load time: a vfork child (sharing our memory while the
 * parent's other threads run) must not be the one calling dlsym. */
static execve_fn real_execve, real_execvpe;
static execv_fn real_execv, real_execvp;
static fexecve_fn real_fexecve;
static void (*real_exit_now)(int);

static void seal_before_exit(void);

__attribute__((constructor)) static void resolve_exec(void)
{
    real_execve = (execve_fn)dlsym(RTLD_NEXT, "execve");
    real_execvpe = (execve_fn)dlsym(RTLD_NEXT, "execvpe");
    real_execv = (execv_fn)dlsym(RTLD_NEXT, "execv");
    real_execvp = (execv_fn)dlsym(RTLD_NEXT, "execvp");
    real_fexecve = (fexecve_fn)dlsym(RTLD_NEXT, "fexecve");
    real_exit_now = (void (*)(int))dlsym(RTLD_NEXT, "_exit");
    /* quick_exit calls _exit without the PLT, after the handlers
     * registered with at_quick_exit, last first: this one, registered
     * before the program's, seals the profile after theirs have run. */
    at_quick_exit(seal_before_exit);
}

/* _exit runs no destructor, so the profile is sealed here, as exit would
 * (shells end their children so, dash itself, and many fork children).
 * Only by the process that owns the spool, and not from inside our own
 * code (a signal handler that interrupted a sample path). A raw
 * exit_group reaches no code of ours: its profile ends with the drain's
 * last write, as after a kill. */
static void seal_before_exit(void)
{
    if (mlz__g.ready && (pid_t)syscall(SYS_getpid) == mlz__g.pid && !mlz__tls.s.in_hook)
        mlz__shutdown();
}

static _Noreturn void exit_now(int status)
{
    seal_before_exit();
    if (real_exit_now) real_exit_now(status);
    for (;;) syscall(SYS_exit_group, status);
}

MLZ_EXPORT _Noreturn void _exit(int status) { exit_now(status); }
MLZ_EXPORT _Noreturn void _Exit(int status) { exit_now(status); }

/* Runs the real call between mlz__exec_before and mlz__exec_failed. */
#define WRAP(call)                                   \
    do {                                             \
        int rc_ = (call);                            \
        int e_ = errno;                              \
        mlz__exec_failed();                          \
        errno = e_;                                  \
        return rc_;                                  \
    } while (0)

MLZ_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    execve_fn f = real_execve;
    if (!f) { errno = ENOSYS; return -1; }
    mlz__exec_before(path, 0, argv, envp);
    WRAP(f(path, argv, envp));
}

MLZ_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    execve_fn f = real_execvpe;
    if (!f) { errno = ENOSYS; return -1; }
    mlz__exec_before(file, 1, argv, envp);
    WRAP(f(file, argv, envp));
}

MLZ_EXPORT int execv(const char *path, char *const argv[])
{
    execv_fn f = real_execv;
    if (!f) { errno = ENOSYS; return -1; }
    mlz__exec_before(path, 0, argv, environ);
    WRAP(f(path, argv));
}

MLZ_EXPORT int execvp(const char *file, char *const argv[])
{
    execv_fn f = real_execvp;
    if (!f) { errno = ENOSYS; return -1; }
    mlz__exec_before(file, 1, argv, environ);
    WRAP(f(file, argv));
}

MLZ_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    fexecve_fn f = real_fexecve;
    if (!f) { errno = ENOSYS; return -1; }
    mlz__exec_before(NULL, 0, argv, envp);
    WRAP(f(fd, argv, envp));
}

/* execl, execlp, execle: the variadic list as an argv array on the stack. */
static size_t count_args(va_list ap)
{
    size_t n = 1;
    while (va_arg(ap, char *)) n++;
    return n;
}

/* Declares argv: arg and the variadic arguments up to their NULL (copied
 * too), on the stack; leaves ap just past that NULL (execle's envp). */
#define ARGV_FROM_VA(arg, argv, ap)                                     \
    va_list ap, cp_;                                                    \
    va_start(ap, arg);                                                  \
    va_copy(cp_, ap);                                                   \
    size_t n_ = count_args(cp_);                                        \
    va_end(cp_);                                                        \
    char *argv[n_ + 1];                                                 \
    argv[0] = (char *)(arg);                                            \
    for (size_t i_ = 1; i_ <= n_; i_++) argv[i_] = va_arg(ap, char *);

MLZ_EXPORT int execl(const char *path, const char *arg, ...)
{
    ARGV_FROM_VA(arg, argv, ap);
    va_end(ap);
    return execv(path, argv);
}

MLZ_EXPORT int execlp(const char *file, const char *arg, ...)
{
    ARGV_FROM_VA(arg, argv, ap);
    va_end(ap);
    return execvp(file, argv);
}

MLZ_EXPORT int execle(const char *path, const char *arg, ...)
{
    ARGV_FROM_VA(arg, argv, ap);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}
