/*
 * test_unwind.c - stack bounds, module table, frame-pointer and DWARF
 * unwinding (core/stackbounds.c, core/modtab.c, core/unwind_fp.c,
 * core/unwind_dwarf.c).
 *
 * Frames are identified with libdw (symbol tables of the executable and the
 * libraries), independently of the code under test. The frames that matter
 * most are built without frame pointers: tests/targets/chain_lib.c compiled
 * at run time with -O2 -fomit-frame-pointer (and trashing rbp), glibc's
 * qsort, and a signal frame. Robustness tests feed both walkers garbage
 * inside buffers fenced by PROT_NONE pages, so a single stray read crashes.
 *
 * The Makefile builds tests with -O2, which omits frame pointers; this file
 * keeps them so the frame-pointer walker has chains to follow here.
 */
#pragma GCC optimize("no-omit-frame-pointer")

#include "../check.h"
#include "modtab.h"
#include "unwind.h"

#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#define NOI __attribute__((noinline, noipa))
#define MAXF 64

static volatile int g_sink;
static mlz_stack_cache g_main_stack;    /* the main thread's cache, as a caller keeps it in TLS */

/* ---- symbolization with libdw ---- */

static Dwfl *g_dwfl;

static void sym_refresh(void)
{
    static const Dwfl_Callbacks cb = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = dwfl_standard_find_debuginfo,
    };
    if (!g_dwfl)
        g_dwfl = dwfl_begin(&cb);
    dwfl_report_begin(g_dwfl);
    dwfl_linux_proc_report(g_dwfl, getpid());
    dwfl_report_end(g_dwfl, NULL, NULL);
}

/* Name of the function holding addr ("?" if unknown). */
static const char *sym_at(uint64_t addr)
{
    Dwfl_Module *m = dwfl_addrmodule(g_dwfl, addr);
    const char *n = m ? dwfl_module_addrname(m, addr) : NULL;
    return n ? n : "?";
}

/* For a return address: the call instruction's function. */
static const char *sym_ret(uint64_t pc)
{
    return sym_at(pc - 1);
}

static void dump(const char *what, const uint64_t *pcs, unsigned n)
{
    fprintf(stderr, "  %s (%u frames):\n", what, n);
    for (unsigned i = 0; i < n; i++)
        fprintf(stderr, "    #%u %#" PRIx64 " %s\n", i, pcs[i], sym_ret(pcs[i]));
}

/* glibc's libc.so.6 is stripped: its __restore_rt is known by its code,
 * mov $__NR_rt_sigreturn,%rax; syscall. */
static int is_restore_rt(uint64_t pc)
{
    static const uint8_t code[] = { 0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05 };
    const mlz_module *m = mlz_modtab_find(pc);
    return m && pc >= m->exec_start && pc + sizeof code <= m->exec_end &&
           memcmp((const void *)(uintptr_t)pc, code, sizeof code) == 0;
}

/* Symbol `sym` names function `name`, ignoring GCC's clone suffixes
 * (test_chain.part.0) and symbol versions (@@GLIBC_2.34). */
static int same_fn(const char *sym, const char *name)
{
    size_t k = strlen(name);
    return strncmp(sym, name, k) == 0 && (sym[k] == 0 || sym[k] == '.' || sym[k] == '@');
}

/* pc (a return address, or exact) lies in function `name`. */
static int is_fn(uint64_t pc, const char *name)
{
    if (strcmp(name, "__restore_rt") == 0)
        return is_restore_rt(pc);
    return same_fn(sym_ret(pc), name);
}

static int is_fn_exact(uint64_t pc, const char *name)
{
    return same_fn(sym_at(pc), name);
}

/* Index of the first frame at or after `from` inside function `name`, or -1. */
static int find_frame(const uint64_t *pcs, unsigned n, unsigned from, const char *name)
{
    for (unsigned i = from; i < n; i++)
        if (is_fn(pcs[i], name))
            return (int)i;
    return -1;
}

/* The names occur in this order; the first at index 0 if anchored. */
static int in_order(const uint64_t *pcs, unsigned n, const char *const *names, int anchored)
{
    int at = 0;
    for (unsigned k = 0; names[k]; k++) {
        int i = find_frame(pcs, n, (unsigned)at, names[k]);
        if (i < 0 || (k == 0 && anchored && i != 0))
            return 0;
        at = i + 1;
    }
    return 1;
}

static uint64_t main_hi(void)
{
    return mlz_stack_cache_hi(&g_main_stack);
}

/* ---- stack bounds ---- */

static void test_stack_bounds_main(void)
{
    uint64_t lo = 0, hi = 0, sp = (uint64_t)(uintptr_t)&lo;
    errno = 1234;
    REQUIRE(mlz_stack_bounds(&lo, &hi) == 0);
    CHECK(errno == 1234);               /* raw syscalls: the hook must not touch errno */
    CHECK(lo <= sp && sp < hi);

    /* Cross-check against the [stack] line, read the ordinary way. */
    FILE *f = fopen("/proc/self/maps", "r");
    REQUIRE(f);
    char line[512];
    uint64_t slo = 0, shi = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "[stack]"))
            sscanf(line, "%" SCNx64 "-%" SCNx64, &slo, &shi);
    fclose(f);
    CHECK_EQ_U64(hi, shi);

    mlz_stack_cache c = { 0, 0 };
    CHECK_EQ_U64(mlz_stack_cache_hi(&c), shi);
    CHECK_EQ_U64(mlz_stack_cache_hi(&c), shi);      /* cached */
    mlz_stack_cache stale = { 1, 2 };               /* sp outside: recomputed */
    CHECK_EQ_U64(mlz_stack_cache_hi(&stale), shi);
}

static void *thread_bounds(void *arg)
{
    uint64_t *out = arg, lo, hi, sp = (uint64_t)(uintptr_t)&lo;
    pthread_attr_t a;
    void *addr;
    size_t size;

    out[0] = mlz_stack_bounds(&lo, &hi) == 0 && lo <= sp && sp < hi;
    pthread_getattr_np(pthread_self(), &a);
    pthread_attr_getstack(&a, &addr, &size);
    pthread_attr_destroy(&a);
    /* glibc's stack block (guard excluded) ends where its mapping ends. */
    out[1] = hi >= (uint64_t)(uintptr_t)addr + size && lo <= (uint64_t)(uintptr_t)addr + size;
    return NULL;
}

static void test_stack_bounds_thread(void)
{
    pthread_t t;
    uint64_t out[2] = { 0, 0 };
    REQUIRE(pthread_create(&t, NULL, thread_bounds, out) == 0);
    pthread_join(t, NULL);
    CHECK(out[0]);
    CHECK(out[1]);
}

/* ---- module table ---- */

static void test_modtab(void)
{
    unsigned n;
    uint64_t gen0, gen1;

    REQUIRE(mlz_modtab_refresh() == 0);
    const mlz_module *mods = mlz_modtab_modules(&n, &gen0, NULL);
    REQUIRE(mods && n >= 3);
    for (unsigned i = 0; i + 1 < n; i++)
        CHECK(mods[i].end <= mods[i + 1].start);    /* sorted, disjoint */
    CHECK(mlz_modtab_changed() == 0);

    const mlz_module *exe = mlz_modtab_find((uint64_t)(uintptr_t)&test_modtab);
    REQUIRE(exe);
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    REQUIRE(k > 0);
    self[k] = 0;
    CHECK(strcmp(exe->path, self) == 0);
    CHECK(exe->eh_table != 0 && exe->eh_count > 10);
    CHECK(exe->exec_start <= (uint64_t)(uintptr_t)&test_modtab &&
          (uint64_t)(uintptr_t)&test_modtab < exe->exec_end);

    /* Build ids agree with what libdw reads from the files. */
    sym_refresh();
    Dwfl_Module *dm = dwfl_addrmodule(g_dwfl, (uint64_t)(uintptr_t)&test_modtab);
    const unsigned char *bits;
    GElf_Addr vaddr;
    GElf_Addr bias;
    int blen = dm && dwfl_module_getelf(dm, &bias) ? dwfl_module_build_id(dm, &bits, &vaddr) : -1;
    CHECK(blen > 0 && exe->build_id_len == blen && memcmp(exe->build_id, bits, (size_t)blen) == 0);

    /* (qsort would be ASan's interceptor in the sanitizer build.) */
    const mlz_module *libc = mlz_modtab_find((uint64_t)(uintptr_t)&gnu_get_libc_version);
    REQUIRE(libc);
    CHECK(strstr(libc->path, "libc.so") != NULL);
    CHECK(libc->build_id_len == 20);
    CHECK(libc->eh_table != 0 && libc->eh_count > 1000);

    uint64_t vdso = getauxval(AT_SYSINFO_EHDR);
    if (vdso) {
        const mlz_module *v = mlz_modtab_find(vdso);
        CHECK(v && v->start == vdso && v->eh_table != 0);
    }
    CHECK(mlz_modtab_find(0) == NULL);
    CHECK(mlz_modtab_find(UINT64_MAX) == NULL);

    REQUIRE(mlz_modtab_refresh() == 0);
    mlz_modtab_modules(&n, &gen1, NULL);
    CHECK_EQ_U64(gen1, gen0 + 1);
    CHECK(mods[0].start != 0);          /* a retired snapshot stays readable */
}

static atomic_int g_stop_finder;

static void *finder(void *arg)
{
    uint64_t pc = (uint64_t)(uintptr_t)arg;
    unsigned long misses = 0;
    while (!atomic_load(&g_stop_finder))
        misses += mlz_modtab_find(pc) == NULL;
    return (void *)misses;
}

/* Lookups race with refreshes: they always see a complete snapshot. */
static void test_modtab_concurrent(void)
{
    pthread_t t;
    void *misses;
    atomic_store(&g_stop_finder, 0);
    REQUIRE(mlz_modtab_refresh() == 0);
    REQUIRE(pthread_create(&t, NULL, finder, (void *)(uintptr_t)&qsort) == 0);
    for (int i = 0; i < 200; i++)
        CHECK(mlz_modtab_refresh() == 0);
    atomic_store(&g_stop_finder, 1);
    pthread_join(t, &misses);
    CHECK(misses == NULL);
}

/* ---- (a) a chain in this executable ---- */

static uint64_t g_fp[MAXF], g_dw[MAXF], g_dw2[MAXF];
static unsigned g_nfp, g_ndw, g_ndw2;

NOI static void chain_f3(void)
{
    uint64_t hi = main_hi();
    g_nfp = mlz_unwind_fp_bounded(g_fp, MAXF, 0, hi);
    g_ndw = mlz_unwind_dwarf_bounded(g_dw, MAXF, 0, hi);
    g_sink++;
}

NOI static void chain_f2(void) { chain_f3(); g_sink++; }
NOI static void chain_f1(void) { chain_f2(); g_sink++; }

static void test_chain(void)
{
    static const char *const want[] = { "chain_f3", "chain_f2", "chain_f1", "test_chain", "main", NULL };
    mlz_unwind_stats s0, s1;

    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    mlz_unwind_get_stats(&s0);
    chain_f1();
    mlz_unwind_get_stats(&s1);
    CHECK(in_order(g_fp, g_nfp, want, 1));
    CHECK(in_order(g_dw, g_ndw, want, 1));
    /* DWARF: exactly one frame per function, then past main to _start. */
    CHECK(find_frame(g_dw, g_ndw, 0, "chain_f2") == 1 && find_frame(g_dw, g_ndw, 0, "chain_f1") == 2);
    CHECK(find_frame(g_dw, g_ndw, 0, "_start") == (int)g_ndw - 1);
    CHECK_EQ_U64(s1.outermost - s0.outermost, 1);
    /* Where both see a frame they agree (pcs[0] differs: two call sites). */
    for (unsigned i = 1; i < 4 && i < g_nfp && i < g_ndw; i++)
        CHECK_EQ_U64(g_fp[i], g_dw[i]);
    if (!in_order(g_dw, g_ndw, want, 1) || !in_order(g_fp, g_nfp, want, 1)) {
        dump("fp", g_fp, g_nfp);
        dump("dwarf", g_dw, g_ndw);
    }
}

/* ---- (a2) resuming at a caller's frame found by frame pointers ---- */

static uint64_t g_rs[3][MAXF];
static unsigned g_nrs[3];
static uint64_t g_version[3];          /* tail_version after each walk */
static int g_same[3];                  /* and same_as_saved */
static mlz_unwind_cache g_rcache;

/* What the payload's hooks do: the caller's rip, rsp and rbp from the
 * frame record at fp, rbx and r12-r15 unknown. */
static void caller_regs(uint64_t fp, mlz_unwind_regs *r)
{
    memset(r, 0, sizeof *r);
    r->reg[MLZ_REG_RIP] = ((uint64_t *)(uintptr_t)fp)[1];
    r->reg[MLZ_REG_RSP] = fp + 16;
    r->reg[MLZ_REG_RBP] = ((uint64_t *)(uintptr_t)fp)[0];
    r->valid = 1u << MLZ_REG_RIP | 1u << MLZ_REG_RSP | 1u << MLZ_REG_RBP;
}

/* The cached walk from our caller's frame, as the hooks walk. */
NOI static void resume_r3(void)
{
    uint64_t hi = main_hi(), fp = (uint64_t)(uintptr_t)__builtin_frame_address(0);
    mlz_unwind_regs r;
    caller_regs(fp, &r);
    g_ndw = mlz_unwind_dwarf_bounded(g_dw, MAXF, 0, hi);
    for (int k = 0; k < 3; k++) {        /* cold cache, warm rules, warm rules and tail */
        if (k == 1) g_rcache.tail_n = 0;
        g_nrs[k] = mlz_unwind_dwarf_resume(g_rs[k], MAXF, &r, fp, hi, &g_rcache);
        g_same[k] = g_rcache.same_as_saved;
        g_version[k] = g_rcache.tail_version;
    }
    g_sink++;
}

NOI static void resume_r2(void) { resume_r3(); g_sink++; }
NOI static void resume_r1(void) { resume_r2(); g_sink++; }

/* The same frames as the whole walk, minus the first, through glibc's
 * start-up code to _start, with the cache cold and warm. */
static void test_resume(void)
{
    static const char *const want[] = { "resume_r2", "resume_r1", "test_resume", "main", NULL };
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    memset(&g_rcache, 0, sizeof g_rcache);
    resume_r1();
    for (int k = 0; k < 3; k++) {
        CHECK(in_order(g_rs[k], g_nrs[k], want, 1));
        CHECK(g_nrs[k] > 0 && find_frame(g_rs[k], g_nrs[k], 0, "_start") == (int)g_nrs[k] - 1);
        REQUIRE(g_nrs[k] + 1 == g_ndw);
        for (unsigned i = 0; i < g_nrs[k]; i++) CHECK_EQ_U64(g_rs[k][i], g_dw[i + 1]);
    }
    CHECK(g_rcache.hits > 0);
    CHECK_EQ_U64(g_rcache.tail_hits, 1);    /* the third walk: at its first frame */
    /* Each full walk saved new frames; the third gave exactly the saved
     * ones, so their version (what a caller noted of them) stands. */
    CHECK(!g_same[0] && !g_same[1] && g_same[2]);
    CHECK(g_version[0] >= 1 && g_version[1] == g_version[0] + 1 && g_version[2] == g_version[1]);
    CHECK_EQ_U64(mlz_unwind_dwarf_resume(g_rs[0], 0, &(mlz_unwind_regs){ 0 }, 0, 0, NULL), 0);
}

NOI static void skip_inner(void)
{
    g_ndw = mlz_unwind_dwarf_bounded(g_dw, MAXF, 2, main_hi());
    g_nfp = mlz_unwind_fp_bounded(g_fp, MAXF, 2, main_hi());
    g_ndw2 = mlz_unwind_dwarf(g_dw2, 3, 0);     /* unbounded form, truncated at 3 */
    g_sink++;
}
NOI static void skip_mid(void) { skip_inner(); g_sink++; }
NOI static void skip_outer(void) { skip_mid(); g_sink++; }

static void test_skip_and_max(void)
{
    uint64_t pcs[4];
    sym_refresh();
    skip_outer();
    CHECK(g_ndw > 0 && is_fn(g_dw[0], "skip_outer"));
    CHECK(g_nfp > 0 && is_fn(g_fp[0], "skip_outer"));
    CHECK_EQ_U64(g_ndw2, 3);
    CHECK(is_fn(g_dw2[0], "skip_inner") && is_fn(g_dw2[2], "skip_outer"));
    CHECK_EQ_U64(mlz_unwind_dwarf_bounded(pcs, 0, 0, main_hi()), 0);
    CHECK_EQ_U64(mlz_unwind_fp_bounded(pcs, 0, 0, main_hi()), 0);
    CHECK_EQ_U64(mlz_unwind_fp(pcs, 1, 0), 1);
    CHECK(is_fn(pcs[0], "test_skip_and_max"));
    CHECK_EQ_U64(mlz_unwind_dwarf_bounded(pcs, 4, 0, 0), 0);   /* unknown bounds */
    CHECK_EQ_U64(mlz_unwind_fp_bounded(pcs, 4, 0, 0), 0);
}

/* ---- (b) through a library built with -O2 -fomit-frame-pointer ---- */

typedef void (*chain_cb)(void *);
static void *g_lib;
static char g_libdir[64];
static void (*chain_g1)(chain_cb, void *);
static void (*chain_spin)(volatile int *);


/* tests/targets/NAME, found from the executable upwards or from cwd. */
static int find_source(const char *name, char *out, size_t size)
{
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        for (int up = 0; up < 6; up++) {
            char *d = dirname(exe);
            snprintf(out, size, "%s/tests/targets/%s", d, name);
            if (access(out, R_OK) == 0)
                return 0;
            memmove(exe, d, strlen(d) + 1);
        }
    }
    snprintf(out, size, "tests/targets/%s", name);
    return access(out, R_OK);
}

/* Compiles tests/targets/NAME.c with flags into g_libdir/libNAME.so and
 * dlopens it (the file stays until exit: libdw reads its symbols). */
static void *build_lib(const char *name, const char *flags)
{
    char src[PATH_MAX], cmd[2 * PATH_MAX], file[64], so[128];
    snprintf(file, sizeof file, "%s.c", name);
    if (find_source(file, src, sizeof src) != 0) {
        fprintf(stderr, "  %s not found\n", file);
        return NULL;
    }
    if (!g_libdir[0]) {
        snprintf(g_libdir, sizeof g_libdir, "/tmp/mlz-unwind-XXXXXX");
        if (!mkdtemp(g_libdir))
            return NULL;
    }
    snprintf(so, sizeof so, "%s/lib%s.so", g_libdir, name);
    const char *cc = getenv("CC") ? getenv("CC") : "cc";
    snprintf(cmd, sizeof cmd, "%s -O2 %s -fPIC -shared -o %s %s", cc, flags, so, src);
    if (system(cmd) != 0) {
        fprintf(stderr, "  failed: %s\n", cmd);
        return NULL;
    }
    return dlopen(so, RTLD_NOW);
}

static int load_lib(void)
{
    if (g_lib)
        return 0;
    g_lib = build_lib("chain_lib", "-fomit-frame-pointer");
    if (!g_lib)
        return -1;
    *(void **)&chain_g1 = dlsym(g_lib, "chain_g1");
    *(void **)&chain_spin = dlsym(g_lib, "chain_spin");
    return chain_g1 && chain_spin ? 0 : -1;
}

NOI static void lib_callback(void *arg)
{
    (void)arg;
    uint64_t hi = main_hi();
    g_nfp = mlz_unwind_fp_bounded(g_fp, MAXF, 0, hi);
    g_ndw = mlz_unwind_dwarf_bounded(g_dw, MAXF, 0, hi);
    g_sink++;
}

static void test_shared_lib(void)
{
    static const char *const want[] = { "lib_callback", "chain_g3", "chain_g2", "chain_g1",
                                        "test_shared_lib", "main", NULL };
    mlz_unwind_stats s0, s1;

    REQUIRE(mlz_modtab_refresh() == 0);
    REQUIRE(load_lib() == 0);
    CHECK(mlz_modtab_changed() == 1);
    REQUIRE(mlz_modtab_refresh() == 0);
    CHECK(mlz_modtab_changed() == 0);
    sym_refresh();

    mlz_unwind_get_stats(&s0);
    chain_g1(lib_callback, NULL);
    mlz_unwind_get_stats(&s1);
    CHECK(in_order(g_dw, g_ndw, want, 1));
    CHECK(find_frame(g_dw, g_ndw, 0, "chain_g2") == 2);
    CHECK_EQ_U64(s1.outermost - s0.outermost, 1);
    /* rbp is garbage inside the library: the fp walk stops there, cleanly. */
    CHECK(g_nfp >= 1 && g_nfp <= 3 && is_fn(g_fp[0], "lib_callback"));
    CHECK(find_frame(g_fp, g_nfp, 0, "chain_g2") < 0);
    if (!in_order(g_dw, g_ndw, want, 1))
        dump("dwarf", g_dw, g_ndw);
}

/* No snapshot (or a stale one): the walk stops at the unknown pc and counts it. */
static void test_stale_modtab(void)
{
    mlz_unwind_stats s0, s1;
    REQUIRE(load_lib() == 0);
    mlz_modtab_release_all();
    CHECK(mlz_modtab_find((uint64_t)(uintptr_t)&test_stale_modtab) == NULL);
    CHECK(mlz_modtab_changed() == 1);
    uint64_t pcs[8];
    mlz_unwind_get_stats(&s0);
    CHECK_EQ_U64(mlz_unwind_dwarf_bounded(pcs, 8, 0, main_hi()), 0);
    mlz_unwind_get_stats(&s1);
    CHECK_EQ_U64(s1.no_module - s0.no_module, 1);
    REQUIRE(mlz_modtab_refresh() == 0);
}

/* ---- the rule cache gives the same stacks ---- */

static mlz_unwind_cache g_cache;        /* 16 KiB: static, as a caller would mmap it */
static uint64_t g_c1[MAXF], g_c2[MAXF];
static unsigned g_nc1, g_nc2;
static uint64_t g_miss2;                /* misses of the repeated walk */

static void capture_cached(void)
{
    uint64_t hi = main_hi();
    g_ndw = mlz_unwind_dwarf_bounded(g_dw, MAXF, 0, hi);
    g_nc1 = mlz_unwind_dwarf_cached(g_c1, MAXF, 0, hi, &g_cache);      /* fills */
    uint64_t m = g_cache.misses;
    g_cache.tail_n = 0;          /* the rules alone: no saved walk to finish with */
    g_nc2 = mlz_unwind_dwarf_cached(g_c2, MAXF, 0, hi, &g_cache);      /* hits */
    g_miss2 = g_cache.misses - m;
}

NOI static void cached_cb(void *arg) { (void)arg; capture_cached(); g_sink++; }
NOI static void cached_f2(void) { capture_cached(); g_sink++; }
NOI static void cached_f1(void) { cached_f2(); g_sink++; }

/* The cache is direct-mapped (the hash of cache_slot in core/unwind_dwarf.c):
 * frames whose slots collide evict each other, so their repeats miss too.
 * Where they fall depends on where ASLR put the code. Every frame looks up
 * pc - 1 (pc for frame 0 is counted too, to be safe). */
static unsigned cache_slot_of(uint64_t look)
{
    return (unsigned)((look * 0x9e3779b97f4a7c15ull) >> (64 - __builtin_ctz(MLZ_UNWIND_CACHE_ENTRIES)));
}

static uint64_t colliding_frames(const uint64_t *pcs, unsigned n)
{
    uint64_t k = 0;
    for (unsigned i = 1; i < n; i++) {
        unsigned s = cache_slot_of(pcs[i] - 1);
        int hit = s == cache_slot_of(pcs[0]) || s == cache_slot_of(pcs[0] - 1);
        for (unsigned j = 0; j < n && !hit; j++) hit = j != i && s == cache_slot_of(pcs[j] - 1);
        k += hit;
    }
    return k;
}

static void check_cached_same(const char *what)
{
    int same = g_ndw > 3 && g_nc1 == g_ndw && g_nc2 == g_ndw;
    for (unsigned i = 1; same && i < g_ndw; i++)    /* [0]: three call sites */
        same = g_c1[i] == g_dw[i] && g_c2[i] == g_dw[i];
    CHECK(same);
    if (!same) {
        fprintf(stderr, "  %s:\n", what);
        dump("uncached", g_dw, g_ndw);
        dump("cached (fill)", g_c1, g_nc1);
        dump("cached (hit)", g_c2, g_nc2);
    }
}

static void test_cache(void)
{
    REQUIRE(load_lib() == 0);
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    memset(&g_cache, 0, sizeof g_cache);

    cached_f1();
    check_cached_same("chain");
    CHECK(g_cache.hits > 0 && g_cache.generation == mlz_modtab_generation());
    /* A repeated walk misses only its first frame (another call site in
     * capture_cached) and frames that share a cache slot: the outermost
     * (_start) hits too. The walk also steps through one frame it does not
     * report (inside mlz_unwind_dwarf_cached); should it share a slot with
     * a reported frame, both miss: 2 more. (Seen in about 1 run in 100.)
     * This executable is built with frame pointers: if its module is
     * classified so, its frames are stepped by rbp, without a look-up. */
    uint64_t coll = colliding_frames(g_c2, g_nc2);
    const mlz_module *exe = mlz_modtab_find((uint64_t)(uintptr_t)&test_cache);
    CHECK(g_nc2 > 4 && (g_miss2 >= 1 || (exe && exe->frame_pointers)) && g_miss2 <= 3 + coll);
    if (g_miss2 > 3 + coll) fprintf(stderr, "  %llu misses, %llu colliding frames\n",
                                    (unsigned long long)g_miss2, (unsigned long long)coll);
    uint64_t hits = g_cache.hits;
    chain_g1(cached_cb, NULL);          /* rbp is garbage in the library frames */
    check_cached_same("library");
    CHECK(g_cache.hits > hits);

    /* A refresh empties the cache. */
    REQUIRE(mlz_modtab_refresh() == 0);
    cached_f1();
    check_cached_same("after refresh");
    CHECK(g_cache.generation == mlz_modtab_generation());
}

/* A fresh cache (all zero, as mmap gives it) is not cleared by its first
 * walk: the clear only faulted in its pages, 16 KiB of entries in every
 * thread. A walk that fills nothing (from a pc in no module) leaves the
 * pages wholly inside the entries untouched, but for the one its look-up
 * reads. */
static void test_cache_fresh_pages(void)
{
    REQUIRE(mlz_modtab_refresh() == 0);
    REQUIRE(mlz_modtab_generation() != 0);
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    mlz_unwind_cache *c = mmap(NULL, sizeof *c, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(c != MAP_FAILED);
    uint64_t stack[64] = { 0 }, pcs[8];
    mlz_unwind_regs r;
    memset(&r, 0, sizeof r);
    r.reg[MLZ_REG_RIP] = 0x1000;
    r.reg[MLZ_REG_RSP] = (uint64_t)(uintptr_t)&stack[8];
    r.valid = 1u << MLZ_REG_RIP | 1u << MLZ_REG_RSP;
    unsigned n = mlz_unwind_dwarf_resume(pcs, 8, &r, (uint64_t)(uintptr_t)stack,
                                         (uint64_t)(uintptr_t)(stack + 64), c);
    CHECK(n <= 1);
    CHECK(c->generation == mlz_modtab_generation());   /* the walk took the cache over */
    CHECK(!c->filled);
    uintptr_t lo = ((uintptr_t)c->e + pg - 1) & ~(pg - 1);
    uintptr_t hi = (uintptr_t)(c->e + MLZ_UNWIND_CACHE_ENTRIES) & ~(pg - 1);
    unsigned char vec[16];
    REQUIRE(hi > lo && (hi - lo) / pg <= sizeof vec && mincore((void *)lo, hi - lo, vec) == 0);
    unsigned resident = 0;
    for (uintptr_t i = 0; i < (hi - lo) / pg; i++) resident += vec[i] & 1;
    CHECK(resident <= 1);
    if (resident > 1) fprintf(stderr, "  %u of %u entry pages resident\n", resident, (unsigned)((hi - lo) / pg));
    munmap(c, sizeof *c);
}

/* ---- the last walk's frames (the tail) ---- */

/* Each capture walks twice from the same frame: uncached (the truth) and
 * with g_tcache, whose tail the previous captures left. pcs[0] differs
 * (two call sites here); every other frame must agree. */
static mlz_unwind_cache g_tcache;
static __thread uint64_t t_u[MAXF], t_t[MAXF];
static __thread unsigned t_nu, t_nt;
static __thread int t_same;
static _Atomic unsigned g_tail_bad;

NOI static void cap_pair(uint64_t hi)
{
    t_nu = mlz_unwind_dwarf_bounded(t_u, MAXF, 0, hi);
    t_nt = mlz_unwind_dwarf_cached(t_t, MAXF, 0, hi, &g_tcache);
    t_same = t_nu == t_nt && t_nu > 2;
    for (unsigned i = 1; t_same && i < t_nu; i++) t_same = t_u[i] == t_t[i];
    if (!t_same) {
        atomic_fetch_add(&g_tail_bad, 1);
        dump("uncached", t_u, t_nu);
        dump("with tail", t_t, t_nt);
    }
    g_sink++;
}

static __thread mlz_stack_cache t_tail_stack;
static pid_t g_main_tid;

/* The stack top of the calling thread. */
static uint64_t this_hi(void)
{
    return gettid() == g_main_tid ? main_hi() : mlz_stack_cache_hi(&t_tail_stack);
}

/* Chains of several depths and call sites, so walks share outer frames. */
NOI static void tl_a3(void) { cap_pair(this_hi()); g_sink++; }
NOI static void tl_a2(void) { tl_a3(); g_sink++; }
NOI static void tl_a1(void) { tl_a2(); g_sink++; }
NOI static void tl_b2(void) { volatile char pad[200]; pad[0] = 1; cap_pair(this_hi()); g_sink += pad[0]; }
NOI static void tl_b1(void) { tl_b2(); g_sink++; }

/* Walks that leave from frames the tail knows, with other frames inside. */
static void test_tail_hits(void)
{
    g_main_tid = gettid();
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    memset(&g_tcache, 0, sizeof g_tcache);
    g_tail_bad = 0;
    for (int i = 0; i < 4; i++) {
        tl_a1();
        tl_b1();
        tl_a2();
    }
    CHECK_EQ_U64(g_tail_bad, 0);
    /* Every walk after the first meets the last one in this function, never
     * at its first frame: each saves new frames. */
    CHECK(g_tcache.tail_hits >= 11);
    CHECK(!g_tcache.same_as_saved && g_tcache.tail_version >= 12);
    CHECK(g_tcache.tail_n > 3);
}

/* The return address of the frame at pcs[at] (of a walk that started at
 * the given frame) is stored at that frame's sp - 8; found by walking. */
static uint64_t *ra_slot_of(const mlz_unwind_regs *start, uint64_t lo, uint64_t hi, unsigned at)
{
    mlz_unwind_cache c;
    memset(&c, 0, sizeof c);
    uint64_t pcs[MAXF];
    unsigned n = mlz_unwind_dwarf_resume(pcs, MAXF, start, lo, hi, &c);
    if (at >= n || at >= c.tail_n) return NULL;
    return (uint64_t *)(uintptr_t)((c.tail[c.tail_cur][at].sp & ~7ull) - 8);
}

static uint64_t g_tw[3][MAXF];
static unsigned g_ntw[3];

/* A frame further out changes under an unchanged first frame (what a
 * longjmp or a thrown exception followed by other calls can leave): the
 * tail must not be taken. Done on the real stack: one return address slot
 * is rewritten between two walks, and put back before anyone returns. */
NOI static void stale_r3(void)
{
    uint64_t hi = main_hi(), fp = (uint64_t)(uintptr_t)__builtin_frame_address(0);
    mlz_unwind_regs r;
    caller_regs(fp, &r);
    memset(&g_tcache, 0, sizeof g_tcache);
    g_ntw[0] = mlz_unwind_dwarf_resume(g_tw[0], MAXF, &r, fp, hi, &g_tcache);   /* leaves its tail */
    uint64_t *slot = ra_slot_of(&r, fp, hi, 2);
    if (!slot) return;
    uint64_t saved = *slot;
    *(volatile uint64_t *)slot = g_tw[0][3];      /* frame 2 now "returns" where frame 3 did */
    g_ntw[1] = mlz_unwind_dwarf_resume(g_tw[1], MAXF, &r, fp, hi, &g_tcache);
    g_ntw[2] = mlz_unwind_dwarf_resume(g_tw[2], MAXF, &r, fp, hi, NULL);        /* the truth */
    *(volatile uint64_t *)slot = saved;
    g_sink++;
}

NOI static void stale_r2(void) { stale_r3(); g_sink++; }
NOI static void stale_r1(void) { stale_r2(); g_sink++; }

static void test_tail_stale(void)
{
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    g_ntw[0] = g_ntw[1] = g_ntw[2] = 0;
    stale_r1();
    REQUIRE(g_ntw[0] > 4);
    /* (A later frame may still meet the tail: frame 2's new rule leads
     * back to frame 3's place. g_tw_hits is not checked.) */
    /* The cached walk saw the rewritten slot, as the uncached one did. */
    int same = g_ntw[1] == g_ntw[2];
    for (unsigned i = 0; same && i < g_ntw[1]; i++) same = g_tw[1][i] == g_tw[2][i];
    CHECK(same);
    CHECK(g_tw[2][2] == g_tw[0][3] && g_tw[1][2] == g_tw[0][3]);
    if (!same) { dump("first", g_tw[0], g_ntw[0]); dump("cached", g_tw[1], g_ntw[1]); dump("truth", g_tw[2], g_ntw[2]); }
}

/* longjmp out of a deep chain, then other chains over the same stack. */
#include <setjmp.h>
static jmp_buf g_jb;
NOI static void lj_d3(void) { cap_pair(main_hi()); longjmp(g_jb, 1); }
NOI static void lj_d2(void) { volatile char pad[64]; pad[0] = 2; lj_d3(); g_sink += pad[0]; }
NOI static void lj_d1(void) { lj_d2(); g_sink++; }
NOI static void lj_e2(void) { cap_pair(main_hi()); g_sink++; }
NOI static void lj_e1(void) { volatile char pad[96]; pad[0] = 3; lj_e2(); g_sink += pad[0]; }

NOI static void lj_run(void)
{
    for (volatile int i = 0; i < 3; i++) {
        if (setjmp(g_jb) == 0) lj_d1();
        lj_e1();
        tl_a3();
    }
}

static void test_tail_longjmp(void)
{
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    memset(&g_tcache, 0, sizeof g_tcache);
    g_tail_bad = 0;
    lj_run();
    CHECK_EQ_U64(g_tail_bad, 0);
    CHECK(g_tcache.tail_hits > 0);
}

/* A walk inside a signal handler (through the signal frame) after walks of
 * the interrupted code, and the interrupted code's walks after it. */
static void tail_handler(int sig)
{
    (void)sig;
    tl_b1();
}

NOI static void sig_inner(void) { tl_a3(); raise(SIGUSR2); tl_a3(); g_sink++; }

static void test_tail_signal(void)
{
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    memset(&g_tcache, 0, sizeof g_tcache);
    g_tail_bad = 0;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tail_handler;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGUSR2, &sa, &old) == 0);
    for (int i = 0; i < 3; i++) sig_inner();
    sigaction(SIGUSR2, &old, NULL);
    CHECK_EQ_U64(g_tail_bad, 0);
    CHECK(g_tcache.tail_hits > 0);
}

/* Threads that exit, and new ones (on a stack glibc hands out again) with
 * other chains, walking with the same cache one after the other. */
NOI static void *tail_thread_a(void *arg)
{
    (void)arg;
    tl_b1();
    tl_b1();
    return NULL;
}

NOI static void th_c2(void) { cap_pair(this_hi()); g_sink++; }
NOI static void th_c1(void) { th_c2(); g_sink++; }
NOI static void *tail_thread_b(void *arg)
{
    (void)arg;
    th_c1();
    return NULL;
}

static void test_tail_threads(void)
{
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    memset(&g_tcache, 0, sizeof g_tcache);
    g_tail_bad = 0;
    for (int i = 0; i < 6; i++) {
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, i % 2 ? tail_thread_b : tail_thread_a, NULL) == 0);
        pthread_join(t, NULL);
    }
    CHECK_EQ_U64(g_tail_bad, 0);
    CHECK(g_tcache.tail_hits > 0);
}

/* ---- (c) through glibc: a qsort callback ---- */

/* Keeps the deepest stack seen: ASan's qsort interceptor calls the
 * comparator itself first, before glibc's qsort does. */
static int cmp_capture(const void *a, const void *b)
{
    uint64_t pcs[MAXF];
    unsigned n = mlz_unwind_dwarf_bounded(pcs, MAXF, 0, main_hi());
    if (n > g_ndw) {
        memcpy(g_dw, pcs, n * sizeof pcs[0]);
        g_ndw = n;
    }
    return *(const int *)a - *(const int *)b;
}

/* ---- modules built with frame pointers ---- */

struct fp_args {
    chain_cb cb;
    void *arg;
    void (*chain)(chain_cb, void *);
};
static void *g_fp_lib;
static void (*fp_f1)(struct fp_args *);
static void (*fp_trap)(chain_cb, void *);
static void (*fp_spin)(volatile int *);
static void (*fp_leaf_spin)(volatile int *);

static int load_fp_lib(void)
{
    if (g_fp_lib)
        return 0;
    g_fp_lib = build_lib("fp_lib", "-fno-omit-frame-pointer");
    if (!g_fp_lib)
        return -1;
    *(void **)&fp_f1 = dlsym(g_fp_lib, "fp_f1");
    *(void **)&fp_trap = dlsym(g_fp_lib, "fp_trap");
    *(void **)&fp_spin = dlsym(g_fp_lib, "fp_spin");
    *(void **)&fp_leaf_spin = dlsym(g_fp_lib, "fp_leaf_spin");
    return fp_f1 && fp_trap && fp_spin && fp_leaf_spin ? 0 : -1;
}

static const mlz_module *module_of(void *fn)
{
    return mlz_modtab_find((uint64_t)(uintptr_t)fn);
}

static int in_cfi_span(const mlz_module *m, void *fn)
{
    uint64_t pc = (uint64_t)(uintptr_t)fn;
    for (unsigned j = 0; j < m->ncfi; j++)
        if (pc >= m->cfi[j][0] && pc < m->cfi[j][1])
            return 1;
    return 0;
}

/* tests/targets/fp_lib.c: its module is classified as built with frame
 * pointers (chain_lib's is not), its hand-written fp_trap is left to the
 * CFI, and cached walks through both libraries step the frame-pointer
 * frames by rbp and give exactly the frames of the uncached walk. */
static void test_fp_modules(void)
{
    static const char *const want[] = { "capture_cached", "cached_cb", "fp_f4", "fp_f3",
                                        "chain_g3", "chain_g2", "chain_g1", "fp_f2", "fp_trap",
                                        "fp_f1", "test_fp_modules", "main", NULL };
    REQUIRE(load_lib() == 0);
    REQUIRE(load_fp_lib() == 0);
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    const mlz_module *fm = module_of(fp_f1), *cm = module_of(chain_g1);
    REQUIRE(fm && cm);
    CHECK(fm->frame_pointers == 1);
    CHECK(cm->frame_pointers == 0);
    CHECK(in_cfi_span(fm, fp_trap));
    CHECK(!in_cfi_span(fm, fp_f1));

    struct fp_args a = { cached_cb, NULL, chain_g1 };
    memset(&g_cache, 0, sizeof g_cache);
    fp_f1(&a);
    check_cached_same("frame-pointer module");
    CHECK(in_order(g_dw, g_ndw, want, 1));
    if (!in_order(g_dw, g_ndw, want, 1))
        dump("dwarf", g_dw, g_ndw);
    /* fp_f4, fp_f3, fp_f2 and fp_f1 by rbp, in the filling walk and in the
     * repeat (fp_trap by its rules in both). */
    CHECK(g_cache.fp_steps >= 8);
    uint64_t steps = g_cache.fp_steps;
    fp_f1(&a);
    check_cached_same("frame-pointer module, again");
    CHECK(g_cache.fp_steps >= steps + 8);
}


static void test_qsort(void)
{
    static const char *const want[] = { "cmp_capture", "test_qsort", "main", NULL };
    int v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (i * 37) % 64;
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    g_ndw = 0;
    qsort(v, 64, sizeof v[0], cmp_capture);
    g_sink += v[0];
    CHECK(in_order(g_dw, g_ndw, want, 1));
    /* Between the callback and the caller: glibc's frames (after ASan's
     * interceptor in the sanitizer build). */
    int caller = find_frame(g_dw, g_ndw, 0, "test_qsort"), in_libc = 0;
    for (int i = 1; i < caller; i++) {
        const mlz_module *m = mlz_modtab_find(g_dw[i] - 1);
        in_libc += m && strstr(m->path, "/libc.so") != NULL;
    }
    CHECK(in_libc >= 1);
    if (in_libc < 1)
        dump("dwarf", g_dw, g_ndw);
    if (!in_order(g_dw, g_ndw, want, 1))
        dump("dwarf", g_dw, g_ndw);
}

/* ---- (d) signal frames ---- */

static volatile int g_spin_stop;
static uint64_t g_restore_rt;           /* glibc's signal trampoline, for the fuzzer */
static volatile int g_handler_mode;     /* 0: same stack, 1: on the sigaltstack, 2: same stack and a cached walk */
static uint64_t g_target_lo, g_target_hi;   /* the function the signal must interrupt */
static uint64_t g_alt_lo, g_alt_hi;
static int g_alt_bounds_ok;

NOI static void spin_here(void)
{
    while (!g_spin_stop)
        __asm__ volatile("");
}

NOI static void spin_in_lib(void)
{
    chain_spin(&g_spin_stop);
    g_sink++;
}

/* Records only when it interrupted the target loop; the kicker retries. */
NOI static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)sig; (void)si;
    mlz_unwind_regs r;
    uint64_t hi;
    mlz_unwind_regs_from_ucontext(&r, uc);
    /* One walk per run: on a loaded machine a second signal can arrive
     * before the spinning thread has seen g_spin_stop. */
    if (g_spin_stop || r.reg[MLZ_REG_RIP] < g_target_lo || r.reg[MLZ_REG_RIP] >= g_target_hi)
        return;
    if (g_handler_mode == 1) {
        mlz_stack_cache c = { 0, 0 };   /* a fresh cache: sp is on the alt stack */
        hi = mlz_stack_cache_hi(&c);
        g_alt_bounds_ok = c.lo <= g_alt_lo && g_alt_hi <= c.hi;
    } else {
        hi = main_hi();
    }
    g_ndw = mlz_unwind_dwarf_bounded(g_dw, MAXF, 0, hi);
    g_nfp = mlz_unwind_fp_bounded(g_fp, MAXF, 0, hi);
    g_ndw2 = g_handler_mode == 1 ? 0 :
             mlz_unwind_dwarf_from(g_dw2, MAXF, &r, r.reg[MLZ_REG_RSP] - 128, hi);
    if (g_handler_mode == 2)            /* and a cached walk, rules and rbp steps */
        g_nc1 = mlz_unwind_dwarf_cached(g_c1, MAXF, 0, hi, &g_cache);
    g_spin_stop = 1;
}

static void *kicker(void *arg)
{
    pthread_t target = *(pthread_t *)arg;
    for (int i = 0; i < 2000 && !g_spin_stop; i++) {
        usleep(2000);
        pthread_kill(target, SIGUSR1);
    }
    g_spin_stop = 1;                    /* never hang: the checks then fail */
    return NULL;
}

/* Runs spin(), interrupted by SIGUSR1 from another thread while in target. */
static void run_interrupted(void (*spin)(void), uint64_t target, int onstack)
{
    struct sigaction sa, old;
    pthread_t self = pthread_self(), t;
    GElf_Sym sym;
    GElf_Off off = 0;
    Dwfl_Module *m = dwfl_addrmodule(g_dwfl, target);

    sym.st_size = 0;
    if (m)
        dwfl_module_addrinfo(m, target, &off, &sym, NULL, NULL, NULL);
    g_target_lo = target - off;
    g_target_hi = g_target_lo + (sym.st_size ? sym.st_size : 1);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | (onstack ? SA_ONSTACK : 0);
    sigaction(SIGUSR1, &sa, &old);
    g_spin_stop = 0;
    g_ndw = g_nfp = g_ndw2 = 0;
    pthread_create(&t, NULL, kicker, &self);
    spin();
    pthread_join(t, NULL);
    sigaction(SIGUSR1, &old, NULL);
}

static void test_signal(void)
{
    mlz_unwind_stats s0, s1;
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    g_handler_mode = 0;
    mlz_unwind_get_stats(&s0);
    run_interrupted(spin_here, (uint64_t)(uintptr_t)&spin_here, 0);
    mlz_unwind_get_stats(&s1);

    /* Handler, glibc's __restore_rt, then the interrupted function at its
     * exact pc (not a return address), then its callers up to main. */
    CHECK(g_ndw > 0 && is_fn(g_dw[0], "on_signal"));
    int i = find_frame(g_dw, g_ndw, 0, "__restore_rt");
    CHECK(i >= 1);
    if (i >= 1)
        g_restore_rt = g_dw[i];
    CHECK(i >= 1 && (unsigned)i + 1 < g_ndw && is_fn_exact(g_dw[i + 1], "spin_here"));
    CHECK(find_frame(g_dw, g_ndw, (unsigned)i + 1, "run_interrupted") > i);
    CHECK(find_frame(g_dw, g_ndw, (unsigned)i + 1, "main") > i);
    CHECK(s1.signal_frames - s0.signal_frames >= 1);
    /* From the ucontext: starts at the interrupted pc. */
    CHECK(g_ndw2 >= 3 && is_fn_exact(g_dw2[0], "spin_here") &&
          find_frame(g_dw2, g_ndw2, 1, "main") > 0);
    if (i < 1 || find_frame(g_dw, g_ndw, 0, "main") < 0)
        dump("dwarf", g_dw, g_ndw);
}

/* Interrupted inside the -fomit-frame-pointer library, rbp garbage. */
static void test_signal_in_lib(void)
{
    REQUIRE(load_lib() == 0);
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    g_handler_mode = 0;
    run_interrupted(spin_in_lib, (uint64_t)(uintptr_t)chain_spin, 0);

    int i = find_frame(g_dw, g_ndw, 0, "__restore_rt");
    CHECK(i >= 1 && (unsigned)i + 1 < g_ndw && is_fn_exact(g_dw[i + 1], "chain_spin"));
    CHECK(find_frame(g_dw, g_ndw, 0, "spin_in_lib") > i);
    CHECK(find_frame(g_dw, g_ndw, 0, "main") > i);
    CHECK(g_ndw2 > 0 && is_fn_exact(g_dw2[0], "chain_spin") &&
          find_frame(g_dw2, g_ndw2, 1, "main") > 0);
    if (find_frame(g_dw, g_ndw, 0, "main") < 0)
        dump("dwarf", g_dw, g_ndw);
}

NOI static void spin_in_fp_lib(void) { fp_spin(&g_spin_stop); g_sink++; }

/* Interrupted in frameless code of a frame-pointer module (fp_lib.c's
 * fp_leaf_spin): the frame after the signal frame has an exact pc and
 * must be stepped by its rule (rbp is its caller's frame), the frames
 * above by rbp. The cached walk gives the uncached walk's frames. */
static void test_signal_in_fp_lib(void)
{
    REQUIRE(load_fp_lib() == 0);
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    memset(&g_cache, 0, sizeof g_cache);
    g_nc1 = 0;
    g_handler_mode = 2;
    run_interrupted(spin_in_fp_lib, (uint64_t)(uintptr_t)fp_leaf_spin, 0);
    g_handler_mode = 0;

    int i = find_frame(g_dw, g_ndw, 0, "__restore_rt");
    CHECK(i >= 1 && (unsigned)i + 1 < g_ndw && is_fn_exact(g_dw[i + 1], "fp_leaf_spin"));
    CHECK(find_frame(g_dw, g_ndw, 0, "fp_spin") == i + 2);
    CHECK(find_frame(g_dw, g_ndw, 0, "main") > i);
    int same = g_nc1 == g_ndw && g_ndw > 3;
    for (unsigned k = 1; same && k < g_ndw; k++)
        same = g_c1[k] == g_dw[k];
    CHECK(same);
    CHECK(g_cache.fp_steps >= 1);      /* fp_spin, spin_in_fp_lib's callee, by rbp */
    if (!same) {
        dump("uncached", g_dw, g_ndw);
        dump("cached", g_c1, g_nc1);
    }
}

/* On a sigaltstack the interrupted frames are on another stack: the walk
 * keeps the interrupted pc, then stops (stack_switch) without reading it. */
static void test_sigaltstack(void)
{
    size_t size = 256 * 1024;
    uint8_t *alt = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(alt != MAP_FAILED);
    stack_t ss = { .ss_sp = alt, .ss_size = size, .ss_flags = 0 }, old;
    REQUIRE(sigaltstack(&ss, &old) == 0);
    mlz_unwind_stats s0, s1;

    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    g_alt_lo = (uint64_t)(uintptr_t)alt;
    g_alt_hi = g_alt_lo + size;
    g_handler_mode = 1;
    mlz_unwind_get_stats(&s0);
    run_interrupted(spin_here, (uint64_t)(uintptr_t)&spin_here, 1);
    mlz_unwind_get_stats(&s1);
    g_handler_mode = 0;
    sigaltstack(&old, NULL);
    munmap(alt, size);

    CHECK(g_alt_bounds_ok);
    CHECK(g_ndw >= 3 && is_fn(g_dw[0], "on_signal"));
    CHECK(g_ndw >= 3 && is_fn_exact(g_dw[g_ndw - 1], "spin_here"));
    CHECK_EQ_U64(s1.stack_switch - s0.stack_switch, 1);
    CHECK(g_nfp >= 1);
}

/* ---- PLT stubs: CFA from a DW_CFA_def_cfa_expression on rip ---- */

/* Runtime address of section `name` in the module holding addr, or 0. */
static uint64_t section_addr(uint64_t addr, const char *name)
{
    Dwfl_Module *m = dwfl_addrmodule(g_dwfl, addr);
    GElf_Addr bias;
    Elf *e = m ? dwfl_module_getelf(m, &bias) : NULL;
    size_t shstr;
    if (!e || elf_getshdrstrndx(e, &shstr) != 0)
        return 0;
    for (Elf_Scn *scn = elf_nextscn(e, NULL); scn; scn = elf_nextscn(e, scn)) {
        GElf_Shdr sh;
        const char *n = gelf_getshdr(scn, &sh) ? elf_strptr(e, shstr, sh.sh_name) : NULL;
        if (n && strcmp(n, name) == 0)
            return sh.sh_addr + bias;
    }
    return 0;
}

/* ---- (e) robustness ---- */

/* A buffer between two PROT_NONE pages: any read outside it faults. */
typedef struct fenced {
    uint8_t *map, *buf;
    size_t size, map_size;
} fenced;

static int fence(fenced *f, size_t size)
{
    long pg = sysconf(_SC_PAGESIZE);
    f->size = size;
    f->map_size = size + 2 * (size_t)pg;
    f->map = mmap(NULL, f->map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (f->map == MAP_FAILED)
        return -1;
    f->buf = f->map + pg;
    return mprotect(f->buf, size, PROT_READ | PROT_WRITE);
}

static void unfence(fenced *f)
{
    munmap(f->map, f->map_size);
}

/* A lazy-binding PLT entry: jmp *GOT; push $index; jmp PLT0. Its CFI is
 * CFA = rsp + 8 + ((rip & 15) >= 11 ? 8 : 0), the one expression every
 * binary carries. Stacks are faked in a fenced buffer. */
static void test_plt_frame(void)
{
    fenced f;
    mlz_unwind_regs r;
    uint64_t pcs[2], ret = (uint64_t)(uintptr_t)&chain_f2 + 4;

    REQUIRE(load_lib() == 0);
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    uint64_t plt = section_addr((uint64_t)(uintptr_t)chain_g1, ".plt");
    REQUIRE(plt != 0);
    REQUIRE(fence(&f, 4096) == 0);
    uint64_t *w = (uint64_t *)f.buf, lo = (uint64_t)(uintptr_t)f.buf, hi = lo + f.size;

    memset(&r, 0, sizeof r);
    r.valid = 1u << MLZ_REG_RIP | 1u << MLZ_REG_RSP;
    r.reg[MLZ_REG_RSP] = lo;
    r.reg[MLZ_REG_RIP] = plt + 16;              /* first entry, before its push */
    w[0] = ret;
    CHECK_EQ_U64(mlz_unwind_dwarf_from(pcs, 2, &r, lo, hi), 2);
    CHECK_EQ_U64(pcs[1], ret);
    r.reg[MLZ_REG_RIP] = plt + 16 + 11;         /* after push $index */
    w[0] = 0;
    w[1] = ret;
    CHECK_EQ_U64(mlz_unwind_dwarf_from(pcs, 2, &r, lo, hi), 2);
    CHECK_EQ_U64(pcs[1], ret);
    r.reg[MLZ_REG_RIP] = plt + 6;               /* PLT0 after push GOT[1]: plain CFI */
    w[0] = 0;
    w[1] = 0;
    w[2] = ret;
    CHECK_EQ_U64(mlz_unwind_dwarf_from(pcs, 2, &r, lo, hi), 2);
    CHECK_EQ_U64(pcs[1], ret);
    unfence(&f);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static void test_fp_fake_stacks(void)
{
    fenced f;
    REQUIRE(fence(&f, 2u << 20 | 4096) == 0);   /* room for a gap over the limit */
    uint64_t *w = (uint64_t *)f.buf, lo = (uint64_t)(uintptr_t)f.buf, hi = lo + f.size;
    uint64_t pcs[16], text = (uint64_t)(uintptr_t)&test_fp_fake_stacks;
#define AT(i) (lo + 8u * (i))

    /* A good chain of 4 records ending in rbp 0. */
    for (unsigned k = 0; k < 4; k++) {
        w[16 * k] = k < 3 ? AT(16 * (k + 1)) : 0;
        w[16 * k + 1] = text + k;
    }
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, AT(0), lo, hi), 4);
    CHECK_EQ_U64(pcs[3], text + 3);
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 2, AT(0), lo, hi), 2);

    w[0] = AT(0);                                       /* a loop */
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, AT(0), lo, hi), 1);
    w[16] = AT(0);
    w[0] = AT(16);                                      /* going down */
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, AT(16), lo, hi), 1);
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, AT(0) + 4, lo, hi), 0);   /* misaligned */
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, lo - 16, lo, hi), 0);     /* below */
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, hi - 8, lo, hi), 0);      /* straddles hi */
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, hi, lo, hi), 0);
    w[0] = AT(16);
    w[1] = 0;                                           /* return address 0 */
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, AT(0), lo, hi), 0);
    w[1] = 0xffffffff81000000ull;                       /* kernel address */
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, AT(0), lo, hi), 0);
    w[1] = text;
    w[0] = lo + MLZ_UNWIND_FP_MAX_GAP + 8;              /* gap over the limit */
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, AT(0), lo, hi), 1);
    w[0] = hi - 16;                                     /* last record that fits */
    w[(f.size - 16) / 8] = 0;
    w[(f.size - 8) / 8] = text;
    CHECK_EQ_U64(mlz_unwind_fp_from(pcs, 16, AT(0), hi - 16 - (1u << 19), hi), 0); /* lo above fp */

    /* Random words, a third pointing into the buffer: must only ever stop. */
    size_t nw = 4096 / 8;
    for (int it = 0; it < 20000; it++) {
        for (size_t i = 0; i < nw; i++) {
            uint64_t r = rnd();
            w[i] = r % 3 == 0 ? lo + (r >> 8) % 4096 : r % 3 == 1 ? text + (r >> 40) : r;
        }
        unsigned n = mlz_unwind_fp_from(pcs, 16, lo + rnd() % 4096, lo, lo + 4096);
        CHECK(n <= 16);
    }
    unfence(&f);
#undef AT
}

/* Code addresses to feed the DWARF unwinder: inside every module's text,
 * biased towards real function starts and libc's __restore_rt. */
static uint64_t random_pc(void)
{
    unsigned n;
    const mlz_module *m = mlz_modtab_modules(&n, NULL, NULL);
    uint64_t r = rnd();
    switch (r % 4) {
    case 0: return g_restore_rt && r % 8 == 0 ? g_restore_rt : (uint64_t)(uintptr_t)&qsort + (r >> 32) % 64;
    case 1: return (uint64_t)(uintptr_t)&chain_f2 + (r >> 32) % 32;
    case 2: {
        const mlz_module *x = &m[(r >> 8) % n];
        if (x->exec_end > x->exec_start)
            return x->exec_start + (r >> 24) % (x->exec_end - x->exec_start);
        return r;
    }
    default: return r >> 16;
    }
}

static void test_dwarf_fake_stacks(void)
{
    fenced f;
    REQUIRE(mlz_modtab_refresh() == 0);
    REQUIRE(fence(&f, 8192) == 0);
    uint64_t *w = (uint64_t *)f.buf, lo = (uint64_t)(uintptr_t)f.buf, hi = lo + f.size;
    uint64_t pcs[32];
    mlz_unwind_regs r;
    mlz_unwind_stats s0, s1;
    unsigned total = 0;

    mlz_unwind_get_stats(&s0);
    for (int it = 0; it < 30000; it++) {
        for (size_t i = 0; i < f.size / 8; i++) {
            uint64_t x = rnd();
            w[i] = x % 3 == 0 ? lo + (x >> 8) % f.size : x % 3 == 1 ? random_pc() : x >> (x % 64);
        }
        for (unsigned k = 0; k < MLZ_UNWIND_NREGS; k++)
            r.reg[k] = rnd() % 2 ? lo + rnd() % f.size : rnd();
        r.reg[MLZ_REG_RIP] = random_pc();
        r.reg[MLZ_REG_RSP] = lo + (rnd() % f.size & ~7ull);
        r.valid = (uint32_t)rnd() | 1u << MLZ_REG_RIP | 1u << MLZ_REG_RSP;
        unsigned n = mlz_unwind_dwarf_from(pcs, 32, &r, lo, hi);
        CHECK(n >= 1 && n <= 32);
        total += n;
    }
    mlz_unwind_get_stats(&s1);
    /* Garbage is mostly rejected, but some walks do go several frames. */
    CHECK(total > 30000);
    CHECK(s1.bad_frame + s1.no_module + s1.no_fde + s1.unsupported + s1.stack_switch >
          s0.bad_frame + s0.no_module + s0.no_fde + s0.unsupported + s0.stack_switch);

    /* Invalid starting states. */
    memset(&r, 0, sizeof r);
    CHECK_EQ_U64(mlz_unwind_dwarf_from(pcs, 32, &r, lo, hi), 0);
    r.valid = 1u << MLZ_REG_RIP | 1u << MLZ_REG_RSP;
    r.reg[MLZ_REG_RIP] = (uint64_t)(uintptr_t)&chain_f2;
    r.reg[MLZ_REG_RSP] = lo;
    CHECK_EQ_U64(mlz_unwind_dwarf_from(pcs, 32, &r, lo, lo + 4), 0);  /* no room */
    unfence(&f);
}

/* Calls fn with rbp set to bogus; has CFI, so DWARF gets through it. */
__asm__(".text\n"
        ".p2align 4\n"
        ".type corrupt_call,@function\n"
        "corrupt_call:\n"
        ".cfi_startproc\n"
        "\tpushq %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset %rbp, -16\n"
        "\tmovq %rsi, %rbp\n"
        "\tcall *%rdi\n"
        "\tpopq %rbp\n"
        ".cfi_def_cfa_offset 8\n"
        "\tret\n"
        ".cfi_endproc\n"
        ".size corrupt_call, .-corrupt_call\n");
void corrupt_call(void (*fn)(void), uint64_t bogus);

static __thread mlz_stack_cache t_stack;
static __thread uint64_t t_fp[MAXF], t_dw[MAXF];
static __thread unsigned t_nfp, t_ndw;

NOI static void victim(void)
{
    uint64_t hi = mlz_stack_cache_hi(&t_stack);
    t_nfp = mlz_unwind_fp_bounded(t_fp, MAXF, 0, hi);
    t_ndw = mlz_unwind_dwarf_bounded(t_dw, MAXF, 0, hi);
    g_sink++;
}

typedef struct corrupt_result {
    int fp_ok, dw_ok, ran;
} corrupt_result;

NOI static void *corrupt_thread(void *arg)
{
    corrupt_result *res = arg;
    volatile uint64_t fake[4];
    uint64_t sp = (uint64_t)(uintptr_t)&fake[0];
    uint64_t *heap = malloc(64);
    heap[0] = (uint64_t)(uintptr_t)heap;
    heap[1] = (uint64_t)(uintptr_t)&victim;
    fake[0] = (uint64_t)(uintptr_t)&fake[0];    /* self loop with a good return address */
    fake[1] = (uint64_t)(uintptr_t)&victim + 4;
    const uint64_t bogus[] = {
        0, 1, 0xdeadbeef, 0x00007ffffffffff8ull, (uint64_t)-16, (uint64_t)(uintptr_t)heap,
        sp - 4096, sp + 3, (uint64_t)(uintptr_t)&fake[0],
    };
    for (unsigned i = 0; i < sizeof bogus / sizeof bogus[0]; i++) {
        t_nfp = t_ndw = 0;
        corrupt_call(victim, bogus[i]);
        res->ran++;
        /* fp: victim, corrupt_call, then at most the fake record. */
        res->fp_ok += t_nfp >= 2 && t_nfp <= 3 && is_fn(t_fp[0], "victim");
        res->dw_ok += find_frame(t_dw, t_ndw, 0, "corrupt_thread") == 2 &&
                      is_fn(t_dw[1], "corrupt_call");
        if (find_frame(t_dw, t_ndw, 0, "corrupt_thread") != 2)
            dump("dwarf", t_dw, t_ndw);
    }
    free(heap);
    return NULL;
}

static void test_corrupt_rbp_thread(void)
{
    pthread_t t;
    corrupt_result res = { 0, 0, 0 };
    mlz_unwind_stats s0, s1;
    REQUIRE(mlz_modtab_refresh() == 0);
    sym_refresh();
    mlz_unwind_get_stats(&s0);
    REQUIRE(pthread_create(&t, NULL, corrupt_thread, &res) == 0);
    pthread_join(t, NULL);
    mlz_unwind_get_stats(&s1);
    CHECK_EQ_U64(res.ran, 9);
    CHECK_EQ_U64(res.fp_ok, 9);
    CHECK_EQ_U64(res.dw_ok, 9);
    /* A thread's stack ends in clone3, whose CFI marks rip undefined. */
    CHECK_EQ_U64(s1.outermost - s0.outermost, 9);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_stack_bounds_main);
    RUN(test_stack_bounds_thread);
    RUN(test_modtab);
    RUN(test_modtab_concurrent);
    RUN(test_chain);
    RUN(test_resume);
    RUN(test_skip_and_max);
    RUN(test_shared_lib);
    RUN(test_stale_modtab);
    RUN(test_cache);
    RUN(test_cache_fresh_pages);
    RUN(test_tail_hits);
    RUN(test_tail_stale);
    RUN(test_tail_longjmp);
    RUN(test_tail_signal);
    RUN(test_tail_threads);
    RUN(test_fp_modules);
    RUN(test_qsort);
    RUN(test_signal);
    RUN(test_signal_in_lib);
    RUN(test_signal_in_fp_lib);
    RUN(test_sigaltstack);
    RUN(test_plt_frame);
    RUN(test_fp_fake_stacks);
    RUN(test_dwarf_fake_stacks);
    RUN(test_corrupt_rbp_thread);
    mlz_modtab_release_all();
    if (g_lib)
        dlclose(g_lib);
    if (g_fp_lib)
        dlclose(g_fp_lib);
    if (g_libdir[0]) {
        static const char *const libs[] = { "chain_lib", "fp_lib" };
        for (unsigned i = 0; i < 2; i++) {
            char so[128];
            snprintf(so, sizeof so, "%s/lib%s.so", g_libdir, libs[i]);
            unlink(so);
        }
        rmdir(g_libdir);
    }
    if (g_dwfl)
        dwfl_end(g_dwfl);
    CHECK_EXIT();
}
