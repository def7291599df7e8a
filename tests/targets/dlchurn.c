/*
 * dlchurn.c - two threads dlopen, call and dlclose DIR/libchurn0..7.so
 * without end; on each line "keep" read from standard input, main dlopens
 * the next four of DIR/libkeep0..7.so, keeps them, and allocates 100 blocks
 * through each one's lib_keep right after its dlopen returned; answers
 * "done". (fork_safety.sh: a refresh of the profiler's module table that
 * another had begun before the dlopen finished left the new library out,
 * and its first blocks lost their callers.) Prints "ready"; exits 0 at the
 * end of input.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;
static volatile int stop;
static void *volatile kept[800];

static void *churn(void *arg)
{
    char path[4096];
    for (unsigned it = (unsigned)(long)arg; !stop; it++) {
        snprintf(path, sizeof path, "%s/libchurn%u.so", dir, it % 8);
        void *h = dlopen(path, RTLD_NOW);
        if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); exit(3); }
        ((void (*)(int))dlsym(h, "lib_churn"))(50);
        dlclose(h);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    dir = argv[1];
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, churn, (void *)i);
    char line[64], path[4096];
    int next = 0, n = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        for (int k = 0; !strncmp(line, "keep", 4) && k < 4 && next < 8; k++, next++) {
            snprintf(path, sizeof path, "%s/libkeep%d.so", dir, next);
            void *h = dlopen(path, RTLD_NOW);
            if (!h) return 3;
            void *(*keep)(size_t) = (void *(*)(size_t))dlsym(h, "lib_keep");
            for (int i = 0; i < 100; i++) kept[n++] = keep(1000);
        }
        printf("done\n");
    }
    stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return 0;
}
