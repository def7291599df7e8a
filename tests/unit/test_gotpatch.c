/*
 * test_gotpatch.c - gotpatch inside this very process.
 *
 * The test executable links gotpatch and patches itself (MLZ_GOT_PATCH_SELF),
 * so it runs under ASan/UBSan too: there the global malloc is ASan's, which
 * is then what `real` must be. Only the executable's own direct calls are
 * counted exactly here (under ASan, strdup & co are intercepted by ASan and
 * never reach a GOT slot); libc-internal callers, PIE/non-PIE/RELRO variants,
 * C++ and dlopen are covered by test_gotpatch_targets with child processes
 * built without sanitizers.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../check.h"
#include "gotpatch.h"

enum { H_MALLOC, H_CALLOC, H_REALLOC, H_FREE, H_POSIX_MEMALIGN, H_ALIGNED_ALLOC, H_MEMALIGN,
       H_VALLOC, H_PVALLOC, H_REALLOCARRAY, H_DLOPEN, H_DLCLOSE, H_N };

static atomic_ulong cnt[H_N];
static __thread unsigned long t_malloc, t_free;   /* initial-exec TLS: no allocation */
static __thread void *t_expect_free;              /* the pointer this thread is about to free */
static atomic_ulong bad_free;

static mlz_got_hook H[H_N];
#define REAL(i, T) ((T)H[i].real)

static void *h_malloc(size_t n) { cnt[H_MALLOC]++; t_malloc++; return REAL(H_MALLOC, void *(*)(size_t))(n); }
static void *h_calloc(size_t a, size_t b) { cnt[H_CALLOC]++; return REAL(H_CALLOC, void *(*)(size_t, size_t))(a, b); }
static void *h_realloc(void *p, size_t n) { cnt[H_REALLOC]++; return REAL(H_REALLOC, void *(*)(void *, size_t))(p, n); }
static void h_free(void *p)
{
    cnt[H_FREE]++;
    t_free++;
    if (t_expect_free && p != t_expect_free) bad_free++;
    REAL(H_FREE, void (*)(void *))(p);
}
static int h_posix_memalign(void **p, size_t a, size_t n) { cnt[H_POSIX_MEMALIGN]++; return REAL(H_POSIX_MEMALIGN, int (*)(void **, size_t, size_t))(p, a, n); }
static void *h_aligned_alloc(size_t a, size_t n) { cnt[H_ALIGNED_ALLOC]++; return REAL(H_ALIGNED_ALLOC, void *(*)(size_t, size_t))(a, n); }
static void *h_memalign(size_t a, size_t n) { cnt[H_MEMALIGN]++; return REAL(H_MEMALIGN, void *(*)(size_t, size_t))(a, n); }
static void *h_valloc(size_t n) { cnt[H_VALLOC]++; return REAL(H_VALLOC, void *(*)(size_t))(n); }
static void *h_pvalloc(size_t n) { cnt[H_PVALLOC]++; return REAL(H_PVALLOC, void *(*)(size_t))(n); }
static void *h_reallocarray(void *p, size_t a, size_t b) { cnt[H_REALLOCARRAY]++; return REAL(H_REALLOCARRAY, void *(*)(void *, size_t, size_t))(p, a, b); }
static void *h_dlopen(const char *f, int m) { cnt[H_DLOPEN]++; return mlz_got_dlopen(f, m, __builtin_return_address(0)); }
static int h_dlclose(void *h) { cnt[H_DLCLOSE]++; return mlz_got_dlclose(h); }

static void setup_hooks(void)
{
    static const struct { const char *n; void *h; } t[H_N] = {
        { "malloc", (void *)h_malloc }, { "calloc", (void *)h_calloc }, { "realloc", (void *)h_realloc },
        { "free", (void *)h_free }, { "posix_memalign", (void *)h_posix_memalign },
        { "aligned_alloc", (void *)h_aligned_alloc }, { "memalign", (void *)h_memalign },
        { "valloc", (void *)h_valloc }, { "pvalloc", (void *)h_pvalloc },
        { "reallocarray", (void *)h_reallocarray }, { "dlopen", (void *)h_dlopen },
        { "dlclose", (void *)h_dlclose } };
    for (int i = 0; i < H_N; i++) H[i] = (mlz_got_hook){ .name = t[i].n, .hook = t[i].h };
}

static int init_once(void)
{
    static int done;
    if (done) return 0;
    setup_hooks();
    mlz_got_options o = { .flags = MLZ_GOT_PATCH_SELF };
    int rc = mlz_got_init_ex(H, H_N, &o);
    done = rc == 0;
    return rc;
}

/* Keep the compiler from pairing up or eliding malloc/free. */
#define ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

static unsigned long snap(int i) { return atomic_load(&cnt[i]); }

/* ---- snapshots of what must come back byte-identical -------------------- */

/* RELRO ranges hold ASan's redzones around globals: copy and compare them
 * without instrumentation (volatile keeps the loops from becoming memcpy). */
__attribute__((no_sanitize("address")))
static void raw_copy(unsigned char *dst, const unsigned char *src, size_t n)
{
    const volatile unsigned char *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = s[i];
}

__attribute__((no_sanitize("address")))
static int raw_equal(const unsigned char *a, const unsigned char *b, size_t n)
{
    const volatile unsigned char *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) return 0;
    return 1;
}

struct relro { uintptr_t lo, hi; unsigned char *copy; };
struct relros { struct relro r[256]; size_t n; };

static int relro_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct relros *s = arg;
    for (size_t i = 0; i < info->dlpi_phnum && s->n < 256; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type != PT_GNU_RELRO) continue;
        struct relro *r = &s->r[s->n++];
        r->lo = info->dlpi_addr + p->p_vaddr;
        r->hi = r->lo + p->p_memsz;
        r->copy = mmap(NULL, p->p_memsz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        raw_copy(r->copy, (const unsigned char *)r->lo, p->p_memsz);
    }
    return 0;
}

static size_t relro_diffs(struct relros *s)
{
    size_t d = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!raw_equal(s->r[i].copy, (const unsigned char *)s->r[i].lo, s->r[i].hi - s->r[i].lo)) d++;
        munmap(s->r[i].copy, s->r[i].hi - s->r[i].lo);
    }
    return d;
}

/* The file-backed lines of /proc/self/maps: the modules' mappings and their
 * protections. Anonymous lines (heap, stacks) legitimately move. */
static size_t read_module_maps(char *out, size_t cap)
{
    static char raw[1 << 18];
    int fd = open("/proc/self/maps", O_RDONLY);
    size_t n = 0;
    ssize_t k;
    while (fd >= 0 && n < sizeof raw - 1 && (k = read(fd, raw + n, sizeof raw - 1 - n)) > 0) n += (size_t)k;
    if (fd >= 0) close(fd);
    raw[n] = '\0';
    size_t o = 0;
    for (char *line = raw; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (memchr(line, '/', len) && o + len < cap) { memcpy(out + o, line, len); o += len; }
        line += len;
    }
    out[o] = '\0';
    return o;
}

/* Protection of the mapping holding addr, from /proc/self/maps. */
static int page_prot(uintptr_t addr)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int prot = -1;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
        if (addr >= lo && addr < hi) {
            prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
                   (perms[2] == 'x' ? PROT_EXEC : 0);
            break;
        }
    }
    if (f) fclose(f);
    return prot;
}

/* ---- tests ------------------------------------------------------------- */

static void test_init_resolves_reals(void)
{
    REQUIRE(init_once() == 0);
    for (int i = 0; i < H_N; i++) {
        CHECK(H[i].real != NULL);
        CHECK(H[i].real != H[i].hook);
        CHECK(mlz_got_hook_index(H[i].hook) == i);
        CHECK(mlz_got_real(H[i].name) == H[i].real);
    }
    CHECK(mlz_got_hook_index((void *)malloc) == -1 || mlz_got_hook_index((void *)malloc) == H_MALLOC);
    /* the real malloc is a definition in the module providing it, never a PLT stub */
    Dl_info di;
    REQUIRE(dladdr(H[H_MALLOC].real, &di) != 0);
    CHECK(di.dli_sname != NULL);
    CHECK(di.dli_saddr == H[H_MALLOC].real);
    CHECK(mlz_got_init(NULL, 0) == MLZ_GOT_EINVAL);
}

static void test_patch_counts_exactly(void)
{
    REQUIRE(init_once() == 0);
    struct relros rs = { .n = 0 };
    dl_iterate_phdr(relro_cb, &rs);
    static char maps_before[1 << 17], maps_after[1 << 17];
    read_module_maps(maps_before, sizeof maps_before);

    int np = mlz_got_patch_all();
    REQUIRE(np > 0);
    CHECK(mlz_got_patch_all() == 0);   /* idempotent */

    unsigned long m0 = snap(H_MALLOC), f0 = snap(H_FREE), c0 = snap(H_CALLOC), r0 = snap(H_REALLOC);
    unsigned long pm0 = snap(H_POSIX_MEMALIGN), aa0 = snap(H_ALIGNED_ALLOC), ma0 = snap(H_MEMALIGN);
    unsigned long ra0 = snap(H_REALLOCARRAY), va0 = snap(H_VALLOC);
    const int N = 1000;
    for (int i = 0; i < N; i++) {
        void *p = malloc((size_t)i + 1);
        ESCAPE(p);
        p = realloc(p, (size_t)i + 64);
        ESCAPE(p);
        free(p);
        void *q = calloc(3, (size_t)i + 1);
        ESCAPE(q);
        free(q);
    }
    void *a = NULL;
    CHECK(posix_memalign(&a, 64, 100) == 0);
    ESCAPE(a);
    free(a);
    a = aligned_alloc(64, 128); ESCAPE(a); free(a);
    a = memalign(64, 100); ESCAPE(a); free(a);
    a = valloc(100); ESCAPE(a); free(a);
    CHECK_EQ_U64(snap(H_REALLOC) - r0, (unsigned long)N);
    /* glibc's reallocarray calls realloc through libc's own PLT: one more realloc
     * unless a sanitizer intercepts reallocarray */
    a = reallocarray(NULL, 10, 10); ESCAPE(a); free(a);
    /* a pointer to free taken after patching is the hook (PIE: loaded from the patched GLOB_DAT) */
    void (*volatile fp)(void *) = free;
    a = malloc(8); ESCAPE(a); fp(a);
    CHECK_EQ_U64(snap(H_MALLOC) - m0, (unsigned long)N + 1);
    CHECK(snap(H_REALLOC) - r0 == (unsigned long)N || snap(H_REALLOC) - r0 == (unsigned long)N + 1);
    CHECK_EQ_U64(snap(H_CALLOC) - c0, (unsigned long)N);
    CHECK_EQ_U64(snap(H_FREE) - f0, (unsigned long)2 * N + 6);
    CHECK_EQ_U64(snap(H_POSIX_MEMALIGN) - pm0, 1);
    CHECK_EQ_U64(snap(H_ALIGNED_ALLOC) - aa0, 1);
    CHECK_EQ_U64(snap(H_MEMALIGN) - ma0, 1);
    CHECK_EQ_U64(snap(H_VALLOC) - va0, 1);
    CHECK_EQ_U64(snap(H_REALLOCARRAY) - ra0, 1);

    static mlz_got_slot sl[4096];
    size_t ns = mlz_got_slots(sl, 4096);
    REQUIRE(ns <= 4096);
    size_t patched = 0;
    mlz_got_stats st;
    mlz_got_get_stats(&st);
    for (size_t i = 0; i < ns; i++) {
        if (sl[i].state != MLZ_GOT_SLOT_PATCHED) continue;
        patched++;
        CHECK(*sl[i].addr == H[sl[i].hook_index].hook);
        CHECK(sl[i].orig != H[sl[i].hook_index].hook);
    }
    CHECK_EQ_U64(patched, (uint64_t)np);
    CHECK_EQ_U64(st.slots_patched[0] + st.slots_patched[1] + st.slots_patched[2], patched);
    CHECK(st.modules_patched >= 2);   /* this executable and libc at least */
    CHECK(st.modules_skipped >= 2);   /* ld.so and the vDSO */

    mlz_got_unpatch_report r = { 0 };
    CHECK(mlz_got_unpatch_all(&r) == 0);
    CHECK_EQ_U64(r.restored, patched);
    CHECK_EQ_U64(r.left, 0);
    CHECK_EQ_U64(r.failed, 0);
    for (size_t i = 0; i < ns; i++)
        if (sl[i].state == MLZ_GOT_SLOT_PATCHED) CHECK(*sl[i].addr == sl[i].orig);
    CHECK(mlz_got_slots(NULL, 0) == 0);

    m0 = snap(H_MALLOC), f0 = snap(H_FREE);
    a = malloc(8); ESCAPE(a); free(a);
    CHECK_EQ_U64(snap(H_MALLOC) - m0, 0);
    CHECK_EQ_U64(snap(H_FREE) - f0, 0);

    CHECK_EQ_U64(relro_diffs(&rs), 0);
    read_module_maps(maps_after, sizeof maps_after);
    CHECK(strcmp(maps_before, maps_after) == 0);
    if (strcmp(maps_before, maps_after) != 0)
        fprintf(stderr, "--- before\n%s--- after\n%s", maps_before, maps_after);
}

static void test_unpatch_leaves_foreign_value(void)
{
    REQUIRE(init_once() == 0);
    REQUIRE(mlz_got_patch_all() > 0);
    static mlz_got_slot sl[4096];
    size_t ns = mlz_got_slots(sl, 4096);
    size_t victim = ns;
    for (size_t i = 0; i < ns; i++)
        if (sl[i].state == MLZ_GOT_SLOT_PATCHED && sl[i].hook_index == H_CALLOC) { victim = i; break; }
    REQUIRE(victim < ns);
    /* someone else re-patches the slot after us */
    uintptr_t page = (uintptr_t)sl[victim].addr & ~(uintptr_t)4095;
    int prot = page_prot(page);
    REQUIRE(prot >= 0);
    REQUIRE(mprotect((void *)page, 4096, prot | PROT_WRITE) == 0);
    void *foreign = (void *)h_realloc;
    *sl[victim].addr = foreign;
    mlz_got_slot left[4];
    mlz_got_unpatch_report r = { .left_slots = left, .left_cap = 4 };
    CHECK(mlz_got_unpatch_all(&r) == 0);
    CHECK_EQ_U64(r.left, 1);
    CHECK(left[0].addr == sl[victim].addr);
    CHECK(left[0].cur == foreign);
    CHECK(*sl[victim].addr == foreign);
    *sl[victim].addr = sl[victim].orig;     /* put it back for the next tests */
    mprotect((void *)page, 4096, prot);
    size_t patched = 0;
    for (size_t i = 0; i < ns; i++) patched += sl[i].state == MLZ_GOT_SLOT_PATCHED;
    CHECK_EQ_U64(r.restored + r.left, patched);
}

/* ---- 16 threads against 1000 patch/unpatch cycles --------------------- */

/* phase: seq % 4 == 0 unpatched, 1 patching, 2 patched, 3 unpatching */
static atomic_ulong seq;
static atomic_int stop;
static atomic_int started;
static atomic_ulong iters, window_errors, checked_patched, checked_unpatched;

static void *worker(void *arg)
{
    /* On a 2-core machine 16 spinning workers would starve the patching
     * thread; a lower priority (nice 10) gives it a core when it needs one
     * while the workers keep allocating on the other throughout each pass. */
    setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
    unsigned long i = (unsigned long)(uintptr_t)arg;
    unsigned long my_m = 0, my_f = 0;
    int first = 1;
    while (!atomic_load(&stop)) {
        unsigned long s0 = atomic_load(&seq);
        unsigned long hm = t_malloc, hf = t_free;
        void *p = malloc(16 + (i++ % 200));
        ESCAPE(p);
        my_m++;
        memset(p, 0xab, 16);
        t_expect_free = p;
        free(p);
        t_expect_free = NULL;
        my_f++;
        unsigned long s1 = atomic_load(&seq);
        if (s0 == s1) {
            /* a whole iteration inside one stable window: exact */
            unsigned long dm = t_malloc - hm, df = t_free - hf;
            if (s0 % 4 == 2) {
                if (dm != 1 || df != 1) window_errors++;
                checked_patched++;
            } else if (s0 % 4 == 0) {
                if (dm != 0 || df != 0) window_errors++;
                checked_unpatched++;
            }
        }
        iters++;
        if (first) { first = 0; started++; }
    }
    return (void *)(uintptr_t)(my_m == my_f);
}

/* Spin rather than sched_yield: yielding hands the core to a worker for a
 * whole time slice, and the test would spend its time waiting. */
static void wait_iters(unsigned long n)
{
    unsigned long target = atomic_load(&iters) + n;
    for (unsigned long spins = 0; atomic_load(&iters) < target; spins++) {
        __builtin_ia32_pause();
        if (spins % 100000 == 99999) sched_yield();
    }
}

static void test_threads_patch_unpatch_cycles(void)
{
    REQUIRE(init_once() == 0);
    enum { T = 16, CYCLES = 1000 };
    pthread_t th[T];
    /* Warm-up round: thread stacks (with their TLS vectors, which glibc
     * mallocs) and per-thread arenas come into existence and stay cached,
     * so the in-use byte count below compares like with like. */
    atomic_store(&seq, 0);
    atomic_store(&started, 0);
    for (int i = 0; i < T; i++) REQUIRE(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    while (atomic_load(&started) < T) sched_yield();
    atomic_store(&stop, 1);
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    atomic_store(&stop, 0);
#if !defined(__SANITIZE_ADDRESS__)
    struct mallinfo2 mi0 = mallinfo2();
#endif
    atomic_store(&started, 0);
    for (int i = 0; i < T; i++) REQUIRE(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    while (atomic_load(&started) < T) sched_yield();
    int errs = 0;
    size_t restored = 0, left = 0;
    for (int c = 0; c < CYCLES; c++) {
        atomic_fetch_add(&seq, 1);
        if (mlz_got_patch_all() <= 0) errs++;
        atomic_fetch_add(&seq, 1);
        wait_iters(16);
        atomic_fetch_add(&seq, 1);
        mlz_got_unpatch_report r = { 0 };
        if (mlz_got_unpatch_all(&r) != 0) errs++;
        restored += r.restored;
        left += r.left;
        atomic_fetch_add(&seq, 1);
        wait_iters(16);
    }
    atomic_store(&stop, 1);
    int balanced = 1;
    for (int i = 0; i < T; i++) {
        void *ok;
        pthread_join(th[i], &ok);
        balanced &= ok != NULL;
    }
    CHECK_EQ_U64(errs, 0);
    CHECK_EQ_U64(left, 0);
    CHECK(restored > 0);
    CHECK(balanced);
    CHECK_EQ_U64(atomic_load(&window_errors), 0);
    CHECK_EQ_U64(atomic_load(&bad_free), 0);
    CHECK(atomic_load(&checked_patched) > 1000);
    CHECK(atomic_load(&checked_unpatched) > 1000);
#if !defined(__SANITIZE_ADDRESS__)
    /* no lost and no doubled free: the allocator's in-use bytes are back */
    struct mallinfo2 mi1 = mallinfo2();
    CHECK_EQ_U64(mi1.uordblks, mi0.uordblks);
#endif
    printf("  threads: %lu iterations, %lu checked patched, %lu checked unpatched, %zu slots restored\n",
           atomic_load(&iters), atomic_load(&checked_patched), atomic_load(&checked_unpatched), restored);
}

static void test_blindspot_report(void)
{
    REQUIRE(init_once() == 0);
    REQUIRE(mlz_got_patch_all() > 0);
    static mlz_got_module_report mods[128];
    mlz_got_blindspot_report r = { .modules = mods, .cap = 128 };
    int rc = mlz_got_blindspot_scan(&r);
    mlz_got_unpatch_all(NULL);
    REQUIRE(rc == 0);
    CHECK(r.n > 3);
    int provider = 0, exe = 0;
    for (size_t i = 0; i < r.n && i < 128; i++) {
        if (mods[i].flags & MLZ_GOT_MOD_PROVIDER) provider++;
        if (mods[i].path[0] == '\0') {
            exe++;
            CHECK(mods[i].slots_patched[0] + mods[i].slots_patched[1] > 0);
        }
    }
    CHECK(provider >= 1);
    CHECK_EQ_U64(exe, 1);
    static char buf[1 << 16];
    int n = mlz_got_format_report(&r, buf, sizeof buf);
    CHECK(n > 0 && (size_t)n < sizeof buf);
    CHECK(strstr(buf, "allocator-provider") != NULL);
    CHECK(strstr(buf, "(main executable)") != NULL);
    char small[16];
    CHECK(mlz_got_format_report(&r, small, sizeof small) == n);   /* snprintf semantics */
    CHECK(strlen(small) == 15);
}

static void test_errors_and_names(void)
{
    CHECK(strcmp(mlz_got_kind_name(MLZ_GOT_GLOB_DAT), "GLOB_DAT") == 0);
    CHECK(strcmp(mlz_got_state_name(MLZ_GOT_LEFT_CANON_PLT), "canonical-plt") == 0);
    CHECK(strstr(mlz_got_strerror(MLZ_GOT_EPROT), "writable") != NULL);
    char out[64];
    CHECK(mlz_got_dlopen_path("libc.so.6", (void *)test_errors_and_names, out, sizeof out) == 0);
    CHECK(mlz_got_dlopen_path("./x.so", (void *)test_errors_and_names, out, sizeof out) == 0);
}

/* A dlopen that entered its hook while patched and returns after the
 * unpatch (a detach while the loader worked) patches nothing: after the
 * unpatch every module looks new, and it once patched them all again. */
static void test_dlopen_after_unpatch(void)
{
    REQUIRE(init_once() == 0);
    REQUIRE(mlz_got_patch_all() > 0);
    CHECK(mlz_got_unpatch_all(NULL) == 0);
    void *h = mlz_got_dlopen("libz.so.1", RTLD_NOW, (void *)test_dlopen_after_unpatch);
    CHECK(h != NULL);
    CHECK_EQ_U64(mlz_got_slots(NULL, 0), 0);
    CHECK(mlz_got_patch_new_modules() == 0);
    CHECK_EQ_U64(mlz_got_slots(NULL, 0), 0);
    mlz_got_unpatch_all(NULL);
    if (h) dlclose(h);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_init_resolves_reals);
    RUN(test_patch_counts_exactly);
    RUN(test_unpatch_leaves_foreign_value);
    RUN(test_threads_patch_unpatch_cycles);
    RUN(test_blindspot_report);
    RUN(test_errors_and_names);
    RUN(test_dlopen_after_unpatch);
    CHECK_EXIT();
}
