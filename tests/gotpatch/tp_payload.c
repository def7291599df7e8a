/*
 * tp_payload.c - the test stand-in for memlyze's payload.
 *
 * Built at test time together with gotpatch/*.c into libtp.so, which the
 * target programs link (or the bench loads). It plays the payload's part:
 * simple hooks that count calls per function and call `real`, a dlopen hook
 * that passes its return address to mlz_got_dlopen, and attach/detach entry
 * points that also snapshot what detach must give back byte for byte: the
 * bytes of every PT_GNU_RELRO range and the module lines of /proc/self/maps.
 * No stdio and no malloc on these paths (the hooks count every malloc).
 */
#include <fcntl.h>
#include <link.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gotpatch.h"
#include "tp_payload.h"

static atomic_ulong cnt[TP_N];
static atomic_long live;           /* allocations minus frees seen by the hooks */
static mlz_got_hook H[TP_N];

#define REAL(i, T) ((T)H[i].real)
#define TP_API __attribute__((visibility("default")))

static void *h_malloc(size_t n)
{
    cnt[TP_MALLOC]++;
    void *p = REAL(TP_MALLOC, void *(*)(size_t))(n);
    if (p) live++;
    return p;
}
static void *h_calloc(size_t a, size_t b)
{
    cnt[TP_CALLOC]++;
    void *p = REAL(TP_CALLOC, void *(*)(size_t, size_t))(a, b);
    if (p) live++;
    return p;
}
static void *h_realloc(void *o, size_t n)
{
    cnt[TP_REALLOC]++;
    void *p = REAL(TP_REALLOC, void *(*)(void *, size_t))(o, n);
    if (!o && p) live++;
    if (o && !n && !p) live--;
    return p;
}
static void h_free(void *p)
{
    cnt[TP_FREE]++;
    if (p) live--;
    REAL(TP_FREE, void (*)(void *))(p);
}
static int h_posix_memalign(void **p, size_t a, size_t n)
{
    cnt[TP_POSIX_MEMALIGN]++;
    int r = REAL(TP_POSIX_MEMALIGN, int (*)(void **, size_t, size_t))(p, a, n);
    if (r == 0) live++;
    return r;
}
#define SIMPLE2(fn, idx) static void *h_##fn(size_t a, size_t n) { cnt[idx]++; \
    void *p = REAL(idx, void *(*)(size_t, size_t))(a, n); if (p) live++; return p; }
SIMPLE2(aligned_alloc, TP_ALIGNED_ALLOC)
SIMPLE2(memalign, TP_MEMALIGN)
static void *h_valloc(size_t n) { cnt[TP_VALLOC]++; void *p = REAL(TP_VALLOC, void *(*)(size_t))(n); if (p) live++; return p; }
static void *h_pvalloc(size_t n) { cnt[TP_PVALLOC]++; void *p = REAL(TP_PVALLOC, void *(*)(size_t))(n); if (p) live++; return p; }
static void *h_reallocarray(void *o, size_t a, size_t b)
{
    cnt[TP_REALLOCARRAY]++;
    /* glibc's reallocarray calls realloc through libc's PLT: that hook does the accounting */
    return REAL(TP_REALLOCARRAY, void *(*)(void *, size_t, size_t))(o, a, b);
}
static void *h_dlopen(const char *f, int m)
{
    cnt[TP_DLOPEN]++;
    return mlz_got_dlopen(f, m, __builtin_return_address(0));
}
static int h_dlclose(void *h)
{
    cnt[TP_DLCLOSE]++;
    return mlz_got_dlclose(h);
}

/* ---- snapshots ---------------------------------------------------------- */

struct relro { uintptr_t lo, hi; unsigned char *copy; };
static struct relro relros[512];
static size_t nrelro;
static char maps_before[1 << 18];

static int relro_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size; (void)arg;
    for (size_t i = 0; i < info->dlpi_phnum && nrelro < 512; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type != PT_GNU_RELRO) continue;
        struct relro *r = &relros[nrelro++];
        r->lo = info->dlpi_addr + p->p_vaddr;
        r->hi = r->lo + p->p_memsz;
        r->copy = mmap(NULL, p->p_memsz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memcpy(r->copy, (void *)r->lo, p->p_memsz);
    }
    return 0;
}

/* Lines of /proc/self/maps naming a file: every module's mappings with
 * their protections (anonymous lines such as the heap legitimately move). */
static void read_module_maps(char *out, size_t cap)
{
    static char raw[1 << 19];
    size_t n = 0;
    ssize_t k;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    while (fd >= 0 && n < sizeof raw - 1 && (k = read(fd, raw + n, sizeof raw - 1 - n)) > 0) n += (size_t)k;
    if (fd >= 0) close(fd);
    raw[n] = '\0';
    size_t o = 0;
    for (char *line = raw; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (memchr(line, '/', len) && o + len + 1 < cap) { memcpy(out + o, line, len); o += len; }
        line += len;
    }
    out[o] = '\0';
}

static void setup(void)
{
    static const char *const names[TP_N] = { "malloc", "calloc", "realloc", "free", "posix_memalign",
        "aligned_alloc", "memalign", "valloc", "pvalloc", "reallocarray", "dlopen", "dlclose" };
    void *const hooks[TP_N] = { (void *)h_malloc, (void *)h_calloc, (void *)h_realloc, (void *)h_free,
        (void *)h_posix_memalign, (void *)h_aligned_alloc, (void *)h_memalign, (void *)h_valloc,
        (void *)h_pvalloc, (void *)h_reallocarray, (void *)h_dlopen, (void *)h_dlclose };
    for (int i = 0; i < TP_N; i++) H[i] = (mlz_got_hook){ .name = names[i], .hook = hooks[i] };
}

TP_API int tp_init(void)
{
    static int done;
    if (done) return 0;
    setup();
    int rc = mlz_got_init(H, TP_N);
    done = rc == 0;
    return rc;
}

TP_API int tp_attach(void)
{
    int rc = tp_init();
    if (rc) return rc;
    nrelro = 0;
    dl_iterate_phdr(relro_cb, NULL);
    read_module_maps(maps_before, sizeof maps_before);
    return mlz_got_patch_all();
}

/* Detach and compare; returns the number of differences (0 = identical). */
TP_API int tp_detach(tp_detach_result *res)
{
    static mlz_got_slot sl[8192];
    static char maps_after[1 << 18];
    memset(res, 0, sizeof *res);
    size_t ns = mlz_got_slots(sl, 8192);
    if (ns > 8192) ns = 8192;
    mlz_got_unpatch_report r = { 0 };
    res->rc = mlz_got_unpatch_all(&r);
    res->restored = r.restored;
    res->left = r.left;
    int bad = res->rc != 0;
    for (size_t i = 0; i < ns; i++) {
        if (sl[i].state != MLZ_GOT_SLOT_PATCHED) continue;
        res->patched++;
        if (*sl[i].addr != sl[i].orig) { res->slot_diffs++; bad++; }
    }
    for (size_t i = 0; i < nrelro; i++) {
        if (memcmp(relros[i].copy, (void *)relros[i].lo, relros[i].hi - relros[i].lo) != 0) {
            res->relro_diffs++;
            bad++;
        }
        munmap(relros[i].copy, relros[i].hi - relros[i].lo);
    }
    nrelro = 0;
    read_module_maps(maps_after, sizeof maps_after);
    if (strcmp(maps_before, maps_after) != 0) { res->maps_differ = 1; bad++; }
    return bad;
}

TP_API unsigned long tp_count(int i) { return i >= 0 && i < TP_N ? atomic_load(&cnt[i]) : 0; }
TP_API long tp_live(void) { return atomic_load(&live); }
TP_API void *tp_hook_of(int i) { return i >= 0 && i < TP_N ? H[i].hook : NULL; }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median patch_all time over `runs` patch/unpatch cycles. */
TP_API int tp_bench(int runs, double *median_us, double *unpatch_median_us, int *slots, int *modules)
{
    if (tp_init() != 0 || runs <= 0 || runs > 1000) return -1;
    static double t[1000], u[1000];
    for (int i = 0; i < runs; i++) {
        struct timespec a, b, c;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int n = mlz_got_patch_all();
        clock_gettime(CLOCK_MONOTONIC, &b);
        mlz_got_stats st;
        mlz_got_get_stats(&st);
        mlz_got_unpatch_all(NULL);
        clock_gettime(CLOCK_MONOTONIC, &c);
        t[i] = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
        u[i] = (double)(c.tv_sec - b.tv_sec) * 1e6 + (double)(c.tv_nsec - b.tv_nsec) / 1e3;
        *slots = n;
        *modules = (int)st.modules_patched;
    }
    qsort(t, (size_t)runs, sizeof *t, cmp_double);   /* after unpatch: unhooked */
    qsort(u, (size_t)runs, sizeof *u, cmp_double);
    *median_us = t[runs / 2];
    *unpatch_median_us = u[runs / 2];
    return 0;
}
