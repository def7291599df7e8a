/*
 * execer.c - a target that execs, for tests/e2e/run_exec.sh. Every mode
 * first allocates and holds 30 x 700 B at site_before (the old image's heap,
 * which an exec must end), then:
 *   execer self        execs itself as "execer final" (a new argument)
 *   execer final       holds 40 x 900 B at site_final = 36000 live bytes
 *   execer exec PROG.. execs PROG with its arguments (static, setuid, ...)
 *   execer spawn PROG  posix_spawn's PROG (vfork + exec) and waits for it
 *   execer fail PROG.. an exec that fails (ENOENT), then execs PROG
 *   execer waitexec FILE PROG..  churns until FILE exists, then execs PROG
 *                      (memlyze-attach'ed meanwhile)
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
extern char **environ;
static void *keep[100];
static void *volatile sink;

NOINLINE void *site_before(size_t n) { void *p = malloc(n); sink = p; return p; }
NOINLINE void *site_final(size_t n) { void *p = malloc(n); sink = p; return p; }

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "final")) {
        for (int i = 0; i < 40; i++) keep[i] = site_final(900);
        printf("execer: final image\n");
        return 0;
    }
    for (int i = 0; i < 30; i++) keep[i] = site_before(700);
    if (argc > 1 && !strcmp(argv[1], "self")) {
        execl("/proc/self/exe", argv[0], "final", (char *)NULL);
    } else if (argc > 2 && !strcmp(argv[1], "exec")) {
        execv(argv[2], argv + 2);
    } else if (argc > 2 && !strcmp(argv[1], "fail")) {
        execv("/nonexistent/program", argv + 2);
        for (int i = 30; i < 35; i++) keep[i] = site_before(700);   /* still this image */
        execvp(argv[2], argv + 2);
    } else if (argc > 3 && !strcmp(argv[1], "waitexec")) {
        printf("execer: waiting\n");
        fflush(stdout);
        while (access(argv[2], F_OK)) {
            void *volatile p = site_before(100);
            free(p);
            usleep(2000);
        }
        execv(argv[3], argv + 3);
    } else if (argc > 2 && !strcmp(argv[1], "spawn")) {
        pid_t pid;
        if (posix_spawnp(&pid, argv[2], NULL, NULL, argv + 2, environ)) return 2;
        int st;
        waitpid(pid, &st, 0);
        printf("execer: spawned child exited %d\n", WEXITSTATUS(st));
        return 0;
    } else {
        fprintf(stderr, "usage: execer self|final|exec PROG|spawn PROG|fail PROG\n");
        return 2;
    }
    perror("execer: exec");
    return 127;
}
