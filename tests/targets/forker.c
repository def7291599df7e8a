/* forker.c - allocations before and after fork() and a vfork()+exec, for
 * the e2e tests of fork handling. The vfork child frees a block of the
 * parent before it execs: the block is gone from the (shared) heap, so the
 * parent's trace must not show it live. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
static void *volatile sink;
NOINLINE void site_parent(void) { sink = malloc(5000); }
NOINLINE void site_child(void) { sink = malloc(7000); }
NOINLINE void *site_shared(void) { void *p = malloc(3000); sink = p; return p; }  /* no tail call */

int main(void)
{
    for (int i = 0; i < 10; i++) site_parent();          /* 50000 B in the parent */
    pid_t c = fork();
    if (c == 0) {
        for (int i = 0; i < 10; i++) site_child();       /* 70000 B in the child */
        printf("child done\n");
        fflush(stdout);
        exit(0);
    }
    waitpid(c, NULL, 0);
    void *shared = site_shared();
    sink = malloc(64);      /* keeps the freed block from merging into the top chunk (and reuse) */
    pid_t v = vfork();
    if (v == 0) {
        free(shared);
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(v, &st, 0);
    printf("parent done %d\n", WEXITSTATUS(st));
    return 0;
}
