/*
 * test_proc.c - the proc library (proc/proc.h) on a forked child: the
 * modules it maps, their biases, build ids, symbols and caves, its memory,
 * the payload rules, and one-line errors for what is not there.
 */
#include "../check.h"
#include "proc.h"
#include "info.h"

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t child;
static const char marker[] = "proc test marker: read me from outside";

static void start_child(void)
{
    int p[2];
    if (pipe(p)) { perror("pipe"); exit(1); }
    child = fork();
    if (child == 0) {
        char c;
        close(p[1]);
        while (read(p[0], &c, 1) > 0) {}
        _exit(0);
    }
    close(p[0]);
    /* p[1] stays open: the child lives until we exit or kill it. */
}

static int find_libc(mlz_proc_module **mods, size_t *n)
{
    if (mlz_proc_modules(child, mods, n)) return -1;
    for (size_t i = 0; i < *n; i++)
        if (mlz_proc_is_libc((*mods)[i].path)) return (int)i;
    return -1;
}

static int libc_base_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    if (info->dlpi_name && mlz_proc_is_libc(info->dlpi_name)) *(uint64_t *)arg = info->dlpi_addr;
    return 0;
}

static void test_modules(void)
{
    mlz_proc_module *mods;
    size_t n;
    int i = find_libc(&mods, &n);
    REQUIRE(i >= 0);
    uint64_t base = 0;
    dl_iterate_phdr(libc_base_cb, &base);
    CHECK_EQ_U64(mods[i].bias, base);
    CHECK(mods[i].loaded);
    CHECK(mods[i].build_id_len == 20);
    CHECK(mods[i].start < mods[i].end && mods[i].first_start == mods[i].start);
    int vdso = 0;
    for (size_t k = 0; k < n; k++) vdso |= !strcmp(mods[k].path, "[vdso]");
    CHECK(vdso);
    free(mods);
    mlz_proc_module one;
    REQUIRE(mlz_proc_module_find(child, mlz_proc_is_libc, &one) == 0);
    CHECK(!one.loaded);
    REQUIRE(mlz_proc_module_load(child, &one) == 0);
    CHECK_EQ_U64(one.bias, base);
}

static void test_syms(void)
{
    static const char *const names[] = { "malloc", "no_such_symbol_here", "free" };
    mlz_proc_module libc;
    mlz_proc_sym s[3];
    /* libc's own malloc, not an interposer's (ASan builds have one). */
    void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(h);
    REQUIRE(mlz_proc_module_find(child, mlz_proc_is_libc, &libc) == 0);
    CHECK(mlz_proc_syms(child, &libc, names, s, 3) == 2);
    CHECK_EQ_U64(s[0].addr, (uint64_t)(uintptr_t)dlsym(h, "malloc"));
    CHECK_EQ_U64(s[2].addr, (uint64_t)(uintptr_t)dlsym(h, "free"));
    dlclose(h);
    CHECK(s[0].size > 0 && s[0].size < 65536);
    CHECK_EQ_U64(s[1].addr, 0);
}

static void test_cave(void)
{
    mlz_proc_module libc;
    uint64_t at;
    size_t len;
    REQUIRE(mlz_proc_module_find(child, mlz_proc_is_libc, &libc) == 0);
    REQUIRE(mlz_proc_cave(child, &libc, &at, &len) == 0);
    CHECK(at > libc.start && at + len <= libc.end && len < 4096);
    CHECK(((at + len) & 4095) == 0);
}

static void test_read(void)
{
    char buf[sizeof marker];
    CHECK(mlz_proc_read(child, (uint64_t)(uintptr_t)marker, buf, sizeof buf) == 0);
    CHECK(memcmp(buf, marker, sizeof buf) == 0);
    CHECK(mlz_proc_read(child, 8, buf, 8) == MLZ_PROC_EIO);
    CHECK(strstr(mlz_proc_error(), "cannot read 8 bytes at 0x8") != NULL);
}

static void test_rules(void)
{
    CHECK(mlz_proc_is_payload("/memfd:memlyze-payload"));
    CHECK(mlz_proc_is_payload("/opt/memlyze/lib/libmemlyze.so"));
    CHECK(mlz_proc_is_payload("/usr/lib/libmemlyze-preload.so"));
    CHECK(!mlz_proc_is_payload("/memfd:other"));
    CHECK(!mlz_proc_is_payload("/usr/lib/x86_64-linux-gnu/libc.so.6"));
    CHECK(mlz_proc_is_libc("/usr/lib/x86_64-linux-gnu/libc.so.6"));
    CHECK(mlz_proc_is_libc("/lib/libc-2.31.so"));
    CHECK(!mlz_proc_is_libc("/usr/lib/libcrypt.so.1"));
    CHECK(mlz_proc_is_ldso("/lib64/ld-linux-x86-64.so.2"));
}

static void test_debug_file(void)
{
    char dir[] = "/tmp/mlz-proc-XXXXXX", want[512], got[512];
    mlz_proc_module libc;
    REQUIRE(mkdtemp(dir));
    REQUIRE(mlz_proc_module_find(child, mlz_proc_is_libc, &libc) == 0 && mlz_proc_module_load(child, &libc) == 0);
    REQUIRE(libc.build_id_len == 20);
    setenv("MEMLYZE_DEBUG_DIR", dir, 1);
    CHECK(mlz_proc_debug_file(&libc, got, sizeof got) == MLZ_PROC_ENOENT && got[0] == 0);
    char sub[300];
    snprintf(sub, sizeof sub, "%s/.build-id", dir);
    mkdir(sub, 0700);
    snprintf(sub, sizeof sub, "%s/.build-id/%02x", dir, libc.build_id[0]);
    mkdir(sub, 0700);
    int k = snprintf(want, sizeof want, "%s/", sub);
    for (int i = 1; i < 20; i++) k += snprintf(want + k, sizeof want - (size_t)k, "%02x", libc.build_id[i]);
    snprintf(want + k, sizeof want - (size_t)k, ".debug");
    FILE *f = fopen(want, "w");
    REQUIRE(f);
    fclose(f);
    CHECK(mlz_proc_debug_file(&libc, got, sizeof got) == 0 && strcmp(got, want) == 0);
    unlink(want);
    rmdir(sub);
    snprintf(sub, sizeof sub, "%s/.build-id", dir);
    rmdir(sub);
    rmdir(dir);
    unsetenv("MEMLYZE_DEBUG_DIR");
}

static void test_errors(void)
{
    mlz_proc_module m, *mods;
    size_t n;
    CHECK(mlz_proc_payload_find(child, &m) == MLZ_PROC_ENOENT);
    CHECK(strstr(mlz_proc_error(), "memlyze is not loaded in process") != NULL);
    CHECK(mlz_proc_modules(999999999, &mods, &n) == MLZ_PROC_EIO);
    CHECK(strstr(mlz_proc_error(), "/proc/999999999/maps") != NULL);
}

/* The contract's reader check: the layout the payload describes, and
 * one field changed at a time. */
static void test_info_readable(void)
{
    struct memlyze_info ok = { .magic = MEMLYZE_INFO_MAGIC, .version = MEMLYZE_INFO_VERSION,
                               .size = sizeof ok, .entry_size = 64, .entry_key = 0, .entry_size_field = 8,
                               .entry_stack_id = 16, .entry_tid_shift = 20, .entry_time_ns = 24, .entry_seq = 32,
                               .entry_check = 40, .check_algorithm = MEMLYZE_CHECK_ALGORITHM, .rec_size = 16,
                               .rec_ready = 0, .rec_depth = 4, .rec_frames_offset = 8, .ncounters = 8,
                               .map_log2_max = MEMLYZE_MAP_LOG2_MAX };
    CHECK(memlyze_info_readable(&ok));
    struct memlyze_info d = ok;
    d.version = MEMLYZE_INFO_VERSION + 1;
    CHECK(!memlyze_info_readable(&d));
    d = ok, d.size -= 8;
    CHECK(!memlyze_info_readable(&d));
    d = ok, d.check_algorithm = MEMLYZE_CHECK_ALGORITHM + 1;
    CHECK(!memlyze_info_readable(&d));
    d = ok, d.entry_check = 60;                   /* 8 bytes past a 64-byte entry */
    CHECK(!memlyze_info_readable(&d));
    d = ok, d.rec_frames_offset = 12;
    CHECK(!memlyze_info_readable(&d));
    d = ok, d.entry_size = MEMLYZE_ENTRY_SIZE_MIN - 8;
    CHECK(!memlyze_info_readable(&d));
    d = ok, d.map_log2_max = MEMLYZE_MAP_LOG2_MAX + 1;
    CHECK(!memlyze_info_readable(&d));
    d = ok, d.nfields = MEMLYZE_FIELDS_MAX + 1;
    CHECK(!memlyze_info_readable(&d));
    /* The check word moves with every field: a torn copy takes some fields
     * from one version of an entry, some from the next. Any one field
     * changed, by any amount, must show (random entries and deltas, and the
     * deltas most likely to cancel in a weighted sum: powers of two, -1). */
    uint64_t x = 0x2545F4914F6CDD1Dull, fails = 0;
    for (int i = 0; i < 20000; i++) {
        uint64_t f[6], g[6];
        for (int j = 0; j < 6; j++) f[j] = x = x * 6364136223846793005ull + 1442695040888963407ull;
        f[2] &= 0xffffffffu, f[3] &= 0xffffffffu;
        uint64_t w = memlyze_check_word(f[0], f[1], (uint32_t)f[2], (uint32_t)f[3], f[4], f[5]);
        int j = i % 6, kind = i / 6 % 3;   /* every field gets every kind of delta */
        uint64_t d = kind == 0 ? 1ull << (i / 18 % 64) : kind == 1 ? ~0ull : (x >> 7) | 1;
        memcpy(g, f, sizeof g);
        g[j] += d;
        if (j == 2 || j == 3) g[j] &= 0xffffffffu;
        if (g[j] == f[j]) g[j] ^= 1;
        fails += w == memlyze_check_word(g[0], g[1], (uint32_t)g[2], (uint32_t)g[3], g[4], g[5]);
    }
    CHECK_EQ_U64(fails, 0);
    /* A known answer, so that the Python scripts' copy (tests/e2e/gdb_snapshot.sh
     * compares the two) and this one cannot drift together unseen. */
    CHECK_EQ_U64(memlyze_check_word(0x5555deadbeef, 16, 1, 1234, 1000, 1), 0xaeaa4081ed0152c0ull);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    start_child();
    RUN(test_modules);
    RUN(test_syms);
    RUN(test_cave);
    RUN(test_read);
    RUN(test_rules);
    RUN(test_debug_file);
    RUN(test_errors);
    RUN(test_info_readable);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK_EXIT();
}
