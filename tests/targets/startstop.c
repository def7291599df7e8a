/*
 * startstop.c - starts a program stopped before its first instruction:
 * only the program, its dynamic loader and the stack are mapped (not
 * libc.so.6), and no tracer holds it. Prints the pid and exits (the child
 * goes on, stopped, until a SIGCONT). tests/e2e/attach_exec.sh attaches to
 * it as to a program caught in its start-up.
 *
 *   startstop PROG [ARGS...]
 */
#include <signal.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) { fprintf(stderr, "usage: startstop PROG [ARGS...]\n"); return 2; }
    pid_t c = fork();
    if (c < 0) { perror("fork"); return 1; }
    if (c == 0) {
        ptrace(PTRACE_TRACEME, 0, NULL, NULL);
        execvp(argv[1], argv + 1);
        _exit(127);
    }
    int st;
    /* The exec's SIGTRAP stop: the new image, nothing of it run yet. */
    if (waitpid(c, &st, 0) != c || !WIFSTOPPED(st)) { fprintf(stderr, "startstop: no exec stop\n"); return 1; }
    /* Let go with SIGSTOP in place of the trap: it stops before running. */
    if (ptrace(PTRACE_DETACH, c, NULL, (void *)(long)SIGSTOP)) { perror("PTRACE_DETACH"); return 1; }
    printf("%d\n", (int)c);
    return 0;
}
