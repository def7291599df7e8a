/*
 * linecmd.c - a target driven by lines on standard input, each answered by
 * one line "done" (attach_nofd.sh, attach_spool_full.sh):
 *   keep    100 blocks of 1000 B from kept_site, kept
 *   many    5000 blocks of 24 B from many_site, kept (max_live.sh)
 *   stash   100 blocks of 200 B from stash_site, kept only in a table
 *           allocated at the start, before any attach (heapgraph.sh)
 *   churn   200000 malloc/free of 32 B (about 2.4 MB of exact-mode spool)
 *   fill    opens /dev/null until no descriptor is left (RLIMIT_NOFILE is
 *           128 from the start); unfill closes them again
 *   limit   RLIMIT_FSIZE of 1 MiB
 *   drop    setresuid(65534): a daemon dropping root
 *   fork    a child that frees the kept blocks and waits to be killed;
 *           answered "child PID" once they are freed
 * Prints "ready" first; exits 0 at the end of input.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void *volatile sink;
static void *volatile keep[1000];   /* volatile, or the compiler drops the calls */
static int nkeep, fds[256], nfds;

__attribute__((noinline)) static void kept_site(void) { keep[nkeep++] = malloc(1000); }
static void *volatile *many, **stash;
__attribute__((noinline)) static void stash_site(int i) { stash[i] = malloc(200); }
__attribute__((noinline)) static void many_site(int i) { many[i] = malloc(24); }

int main(void)
{
    struct rlimit files = { 128, 128 }, size = { 1 << 20, 1 << 20 };
    setrlimit(RLIMIT_NOFILE, &files);
    char line[32];
    setvbuf(stdout, NULL, _IOLBF, 0);
    stash = calloc(100, sizeof *stash);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        int fd;
        if (!strncmp(line, "keep", 4))
            for (int i = 0; i < 100 && nkeep < 1000; i++) kept_site();
        if (!strncmp(line, "many", 4) && !many && (many = calloc(5000, sizeof *many)))
            for (int i = 0; i < 5000; i++) many_site(i);
        if (!strncmp(line, "stash", 5) && stash)
            for (int i = 0; i < 100; i++) stash_site(i);
        if (!strncmp(line, "churn", 5))
            for (int i = 0; i < 200000; i++) { sink = malloc(32); free(sink); }
        if (!strncmp(line, "fill", 4))
            while (nfds < 256 && (fd = open("/dev/null", O_RDONLY)) >= 0) fds[nfds++] = fd;
        if (!strncmp(line, "unfill", 6)) while (nfds) close(fds[--nfds]);
        if (!strncmp(line, "limit", 5)) setrlimit(RLIMIT_FSIZE, &size);
        if (!strncmp(line, "drop", 4) && setresuid(65534, 65534, 65534)) return 2;
        if (!strncmp(line, "fork", 4)) {
            int ready[2];
            char c;
            if (pipe(ready)) return 2;
            pid_t child = fork();
            if (child == 0) {
                while (nkeep) free(keep[--nkeep]);
                if (write(ready[1], "x", 1) != 1) _exit(2);
                for (;;) pause();
            }
            if (child < 0 || read(ready[0], &c, 1) != 1) return 2;
            close(ready[0]);
            close(ready[1]);
            printf("child %d\n", (int)child);
            continue;
        }
        printf("done\n");
    }
    return 0;
}
