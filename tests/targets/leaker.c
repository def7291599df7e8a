/*
 * leaker.c - a process with a known leak between two snapshots (diff tests).
 *
 *   leaker LEAK_BYTES    (standard input: a fifo the test writes to)
 *
 * Prints "ready" and waits for a line on stdin (time to attach), then, before the first
 * snapshot: steady_site holds 16 MiB it never touches, shrink_site holds
 * 8 MiB, and leak_site has leaked 16 MiB already (a server found leaking).
 * Prints "A" and waits for a line on stdin; then leak_site allocates
 * exactly LEAK_BYTES more (mixed sizes, never freed) and
 * shrink_site frees every other block (about 4 MiB). Prints "B BYTES" (the
 * bytes shrink_site freed) and waits for stdin to close. Sizes come from a fixed generator, so
 * the true growth of each site is known exactly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static unsigned long long state = 12345;
static size_t next_size(size_t lo, size_t hi)   /* lo..2*hi, log-uniform (powers of 2) */
{
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    unsigned octaves = 0;
    while ((lo << octaves) < hi) octaves++;
    size_t base = lo << ((state >> 33) % (octaves + 1));
    return base + (size_t)((state >> 8) % base);
}

static void *keep[1 << 20];
static size_t nkeep;

NOINLINE static void *steady_site(size_t n) { void *p = malloc(n); memset(p, 1, n); return p; }
NOINLINE static void *shrink_site(size_t n) { void *p = malloc(n); memset(p, 2, n); return p; }
NOINLINE static void *leak_site(size_t n) { void *p = malloc(n); memset(p, 3, n); return p; }

static void leak_bytes(size_t leak)
{
    for (size_t done = 0; done < leak;) {
        size_t n = next_size(32, 65536);
        if (n > leak - done) n = leak - done;
        keep[nkeep++] = leak_site(n);
        done += n;
    }
}

static void wait_line(void)
{
    char c;
    while (read(0, &c, 1) == 1 && c != '\n') {}
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: leaker LEAK_BYTES\n"); return 2; }
    size_t leak = strtoull(argv[1], NULL, 10);
    printf("ready\n");
    fflush(stdout);
    wait_line();
    for (size_t done = 0; done < (16u << 20);) {
        size_t n = next_size(64, 65536);
        keep[nkeep++] = steady_site(n);
        done += n;
    }
    static void *shrink[1 << 16];
    static size_t shrink_size[1 << 16];
    size_t nshrink = 0, shrunk = 0;
    for (size_t done = 0; done < (8u << 20);) {
        size_t n = next_size(64, 65536);
        shrink_size[nshrink] = n;
        shrink[nshrink++] = shrink_site(n);
        done += n;
    }
    /* One call site, so the leak before and after A is one site. */
    for (int phase = 0; phase < 2; phase++) {
        leak_bytes(phase ? leak : 16u << 20);
        if (phase) break;
        printf("A\n");
        fflush(stdout);
        wait_line();
    }
    for (size_t i = 0; i < nshrink; i += 2) {
        shrunk += shrink_size[i];
        free(shrink[i]);
    }
    printf("B %zu\n", shrunk);
    fflush(stdout);
    wait_line();
    return 0;
}
