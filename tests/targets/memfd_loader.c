/*
 * memfd_loader.c - loads a payload (argv[1]) the way memlyze-attach does,
 * from a memfd named MEMLYZE_MEMFD_NAME, but then closes the memfd: no
 * descriptor is left to reach the file by. For an ordinary user (no
 * /proc/PID/map_files) the payload's symbols can then be read only from the
 * process's memory. With MEMLYZE_MODE=got the payload samples from its
 * constructor. Holds site_4k 100 x 4096, prints "ready", waits for standard
 * input to close.
 */
#include "info.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

static void *held[100];
static void *volatile sink;
__attribute__((noinline)) void site_4k(int i) { held[i] = sink = malloc(4096); }

int main(int argc, char **argv)
{
    struct stat st;
    int src = argc > 1 ? open(argv[1], O_RDONLY) : -1;
    int mfd = memfd_create(MEMLYZE_MEMFD_NAME, MFD_CLOEXEC);
    if (src < 0 || mfd < 0 || fstat(src, &st)) { perror("memfd_loader"); return 1; }
    for (off_t off = 0; off < st.st_size;)
        if (sendfile(mfd, src, &off, (size_t)(st.st_size - off)) <= 0) { perror("sendfile"); return 1; }
    close(src);
    char name[64];
    snprintf(name, sizeof name, "/proc/self/fd/%d", mfd);
    if (!dlopen(name, RTLD_NOW | RTLD_LOCAL)) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
    close(mfd);
    for (int i = 0; i < 100; i++) site_4k(i);
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {}
    for (int i = 0; i < 100; i++) free(held[i]);
    return 0;
}
