/*
 * graph.c - a heap of known shape for heapdump, leakcheck and retainers.
 * Prints "ready PID" once built, then waits until standard input closes.
 *
 *   g_table  (global array, 16 buckets) -> 200 list nodes of 48 B (site list_node):
 *            retains exactly 9600 B; one more node per line read ("grow")
 *   g_cache  -> cache (64 B, cache_new) @+16 -> entries (128 B, entries_new)
 *            @+8*i -> 16 entries of 32 B (entry_new): g_cache retains 64+128+512 = 704 B
 *   a cycle of 2 x 64 B (cycle_node) that lost its last pointer: leaked
 *   an object of 80 B (stack_only) that only a waiting thread's stack holds
 *   g_mid    points 40 bytes into a 96 B object (mid_obj): reachable
 *   g_xor    holds a 112 B object (xor_obj) XORed with a constant: leaked,
 *            since no word holds its address
 * Sizes are multiples of 16 so no malloc chunk header falls inside one.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))
struct node { struct node *next; long key, pad[4]; };             /* 48 B */
struct entry { long k, v, w, x; };                               /* 32 B */
struct cache { long hits, misses; struct entry **entries; long n, pad[4]; };   /* 64 B */

static struct node *g_table[16];
struct cache *g_cache;
char *g_mid;                 /* not static: the compiler must keep the stores */
uintptr_t g_xor;
static int g_pipe[2];

NOINLINE struct node *list_node(long key) { struct node *n = calloc(1, sizeof *n); n->key = key; return n; }
NOINLINE static void table_add(long key)
{
    struct node *n = list_node(key);
    n->next = g_table[key % 16];
    g_table[key % 16] = n;
}
NOINLINE struct cache *cache_new(void) { return calloc(1, sizeof(struct cache)); }
NOINLINE struct entry **entries_new(void) { return calloc(16, sizeof(struct entry *)); }
NOINLINE struct entry *entry_new(void) { return calloc(1, sizeof(struct entry)); }
NOINLINE void *cycle_node(void) { return calloc(1, 64); }
NOINLINE void *stack_only(void) { return calloc(1, 80); }
NOINLINE char *mid_obj(void) { return calloc(1, 96); }
NOINLINE void *xor_obj(void) { return calloc(1, 112); }

NOINLINE static void make_cycle(void)
{
    void **a = cycle_node(), **b = cycle_node();
    a[0] = b;
    b[0] = a;
    /* Clear our copies so no stale stack slot or register keeps them. */
    a = b = NULL;
    __asm__ volatile("" ::: "memory");
}

static void *holder_thread(void *arg)
{
    (void)arg;
    void *volatile held = stack_only();   /* volatile: lives in this frame */
    char c;
    while (read(g_pipe[0], &c, 1) < 0) {}
    free(held);
    return NULL;
}

/* noipa and the asm: otherwise the compiler sees a memset of a dead local
 * in a function without effects, and drops the memset and then the call. */
__attribute__((noinline, noipa)) static void scrub(void)
{
    /* Overwrite the dead stack below main's frame where callees (and the
     * profiler's hooks under them) left copies of pointers. */
    char pad[16384];
    memset(pad, 0, sizeof pad);
    __asm__ volatile("" : : "r"(pad) : "memory");
}

/* In a function of its own: the loop's pointers live in registers that
 * main's callees would otherwise save on the live stack (glibc's fgets
 * kept &entries[15] there, a root shorter than g_cache's chain). */
NOINLINE static void make_cache(void)
{
    g_cache = cache_new();
    g_cache->entries = entries_new();
    for (int i = 0; i < 16; i++) g_cache->entries[i] = entry_new();
    g_cache->n = 16;
}

int main(int argc, char **argv)
{
    /* argv[1]: a library (dtls_lib.c) whose dtls_set the line "dtls" calls. */
    void (*dtls_set)(void) = NULL;
    if (argc > 1) {
        void *lib = dlopen(argv[1], RTLD_NOW);
        if (!lib || !(dtls_set = (void (*)(void))dlsym(lib, "dtls_set"))) return 1;
    }
    for (long k = 0; k < 200; k++) table_add(k);
    make_cache();
    make_cycle();
    g_mid = mid_obj() + 40;
    g_xor = (uintptr_t)xor_obj() ^ 0x5a5a5a5a5a5a5a5aull;
    if (pipe(g_pipe)) return 1;
    pthread_t t;
    pthread_create(&t, NULL, holder_thread, NULL);
    usleep(50000);
    scrub();
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    char line[64];
    long k = 200;
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "grow", 4)) table_add(k++);
        if (!strncmp(line, "dtls", 4) && dtls_set) dtls_set();
        scrub();
        printf("ok %ld\n", k);
        fflush(stdout);
    }
    if (write(g_pipe[1], "x", 1) != 1) return 1;
    pthread_join(t, NULL);
    free(g_mid - 40);
    free((void *)(g_xor ^ 0x5a5a5a5a5a5a5a5aull));
    return 0;
}
