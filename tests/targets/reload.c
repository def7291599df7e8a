/*
 * reload.c - a plugin host that unloads one library and loads another,
 * which the loader puts at the same addresses (dlclose_reuse.sh):
 *   reload LIB_A LIB_B
 * prints "ready", waits for a line, then: dlopen LIB_A, keeps 10 blocks
 * its plugin_alloc() makes, dlclose, dlopen LIB_B (whose constructor
 * keeps one block), keeps 10 of its blocks; prints "reused yes|no" (did
 * LIB_B land where LIB_A was) and "done", then exits at end of input.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

static void *volatile kept[32];

static void *load(const char *path, void **base)
{
    void *h = dlopen(path, RTLD_NOW);
    void *(*fn)(void) = h ? (void *(*)(void))dlsym(h, "plugin_alloc") : NULL;
    Dl_info di;
    if (!fn || !dladdr((void *)fn, &di)) { fprintf(stderr, "reload: %s: %s\n", path, dlerror()); return NULL; }
    *base = di.dli_fbase;
    static int n;
    for (int i = 0; i < 10; i++) kept[n++] = fn();
    return h;
}

int main(int argc, char **argv)
{
    char line[64];
    if (argc != 3) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    if (!fgets(line, sizeof line, stdin)) return 1;
    void *a_base, *b_base;
    void *a = load(argv[1], &a_base);
    if (!a) return 1;
    dlclose(a);
    if (!load(argv[2], &b_base)) return 1;
    printf("reused %s\ndone\n", a_base == b_base ? "yes" : "no");
    while (fgets(line, sizeof line, stdin)) {}
    return 0;
}
