/*
 * phdr_fork.c - forks N children while dl_iterate_phdr runs elsewhere
 * (fork_safety.sh). glibc's fork resets ld.so's load lock in the child but
 * not the lock dl_iterate_phdr takes: a child forked while any thread of
 * the parent walks the modules inherits it held.
 *   phdr_fork walker N     a thread of the program walks the modules all the
 *                          time; each child mallocs 100 blocks and _exits
 *                          (the profiler's child must not walk: it would
 *                          wait forever where the program does not)
 *   phdr_fork childwalk N  each child walks the modules once (C++ exception
 *                          unwinding does), mallocs and exits (the profiler
 *                          must never fork the program while it walks)
 * Each child exits with its number mod 50 + 1; prints "bad=K" (children
 * with another status) and exits 19 when K is 0.
 */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int stop;
static void *volatile keep[100];

static int count_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info, (void)size;
    ++*(long *)arg;
    return 0;
}

static void *walker(void *arg)
{
    long n = 0;
    (void)arg;
    while (!stop) dl_iterate_phdr(count_cb, &n);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    int walk_in_child = !strcmp(argv[1], "childwalk"), n = atoi(argv[2]), bad = 0;
    pthread_t t;
    if (!walk_in_child && pthread_create(&t, NULL, walker, NULL)) return 2;
    for (int c = 0; c < n; c++) {
        pid_t p = fork();
        if (p == 0) {
            long mods = 0;
            if (walk_in_child) dl_iterate_phdr(count_cb, &mods);
            for (int i = 0; i < 100; i++) keep[i] = malloc(500);
            _exit(c % 50 + 1);
        }
        int st;
        if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != c % 50 + 1) bad++;
    }
    stop = 1;
    if (!walk_in_child) pthread_join(t, NULL);
    printf("bad=%d\n", bad);
    return bad ? 1 : 19;
}
