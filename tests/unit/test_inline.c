/*
 * test_inline.c - the inline-hook engine (gotpatch/inline.c, relocate.c) on
 * hand-assembled functions, executed for real: each is hooked, called
 * through the hook, called through its trampoline, unhooked, and its bytes
 * compared with the originals. Refusals are checked with their reasons.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "../check.h"
#include "inline.h"

typedef int (*fn_t)(int);

static uint8_t *code;          /* one R-X page of hand-made functions */
static int data_a = 1000, data_b = 20000;

/* The hook: whatever the trampoline returns, plus 100000. */
static fn_t tramp;
static atomic_int hook_calls;
static int hook(int x)
{
    atomic_fetch_add(&hook_calls, 1);
    return tramp(x) + 100000;
}

/* Copy bytes to code+off, with `rip` fix-ups: each entry is the offset
 * (inside the snippet) of a rel32 that must point at the given address. */
struct fix { size_t at; const void *target; };
static fn_t place(size_t off, const uint8_t *b, size_t n, const struct fix *f, size_t nf)
{
    memcpy(code + off, b, n);
    for (size_t i = 0; i < nf; i++) {
        uintptr_t next = (uintptr_t)code + off + f[i].at + 4;
        int64_t d = (int64_t)((uintptr_t)f[i].target - next);
        if (d < INT32_MIN || d > INT32_MAX) return NULL;
        int32_t d32 = (int32_t)d;
        memcpy(code + off + f[i].at, &d32, 4);
    }
    return (fn_t)(void *)(code + off);
}

/* Maps the code page within rel32 reach of data_a/data_b (the process's
 * data segment), so the RIP-relative operands can point at them. */
static int map_code(void)
{
    uintptr_t near = ((uintptr_t)&data_a & ~(uintptr_t)0xfff) + (64u << 20);
    for (int i = 0; i < 256 && !code; i++, near += 1u << 20) {
        void *p = mmap((void *)near, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != MAP_FAILED) code = p;
    }
    return code != NULL;
}

/* Hook, check both paths, unhook, check the bytes. */
static void roundtrip(fn_t f, size_t size, const int *args, size_t nargs, int want_rip, int want_branch)
{
    uint8_t before[64];
    memcpy(before, (void *)f, sizeof before);
    int expect[8];
    for (size_t i = 0; i < nargs; i++) expect[i] = f(args[i]);
    mlz_inline h;
    int rc = mlz_inline_prepare((void *)f, size, (void *)hook, &h);
    if (rc) fprintf(stderr, "  refused: %s\n", h.why);
    REQUIRE(rc == 0);
    CHECK_EQ_U64(h.rip_fixups, want_rip);
    CHECK_EQ_U64(h.branch_fixups, want_branch);
    tramp = (fn_t)h.trampoline;
    REQUIRE(mlz_inline_install(&h) == 0);
    CHECK(memcmp(before, (void *)f, sizeof before) != 0);
    int calls0 = atomic_load(&hook_calls);
    for (size_t i = 0; i < nargs; i++) {
        CHECK_EQ_U64(f(args[i]), expect[i] + 100000);
        CHECK_EQ_U64(tramp(args[i]), expect[i]);
    }
    CHECK_EQ_U64(atomic_load(&hook_calls) - calls0, nargs);
    CHECK(mlz_inline_remove(&h) == 0);
    CHECK(memcmp(before, (void *)f, sizeof before) == 0);
    for (size_t i = 0; i < nargs; i++) CHECK_EQ_U64(f(args[i]), expect[i]);
    /* the trampoline stays valid after removal */
    for (size_t i = 0; i < nargs; i++) CHECK_EQ_U64(tramp(args[i]), expect[i]);
}

static void make_rx(int rx)
{
    mprotect(code, 4096, rx ? PROT_READ | PROT_EXEC : PROT_READ | PROT_WRITE | PROT_EXEC);
}

/* endbr64; mov eax,[rip+a]; add eax,edi; lea rcx,[rip+b]; add eax,[rcx]; ret */
static fn_t fn_rip_mov(void)
{
    static const uint8_t b[] = { 0xf3, 0x0f, 0x1e, 0xfa, 0x8b, 0x05, 0, 0, 0, 0, 0x01, 0xf8,
                                 0x48, 0x8d, 0x0d, 0, 0, 0, 0, 0x03, 0x01, 0xc3 };
    struct fix f[] = { { 6, &data_a }, { 15, &data_b } };
    return place(0, b, sizeof b, f, 2);
}

static void test_rip_relative_mov_after_endbr64(void)
{
    make_rx(0);
    fn_t f = fn_rip_mov();
    make_rx(1);
    REQUIRE(f);
    int args[] = { 0, 5, -7 };
    CHECK_EQ_U64(f(5), 21005);
    roundtrip(f, 22, args, 3, 1, 0);
}

/* lea rax,[rip+a]; mov eax,[rax]; add eax,edi; ret */
static void test_rip_relative_lea(void)
{
    static const uint8_t b[] = { 0x48, 0x8d, 0x05, 0, 0, 0, 0, 0x8b, 0x00, 0x01, 0xf8, 0xc3 };
    struct fix fx[] = { { 3, &data_a } };
    make_rx(0);
    fn_t f = place(64, b, sizeof b, fx, 1);
    make_rx(1);
    REQUIRE(f);
    int args[] = { 1, 2 };
    CHECK_EQ_U64(f(1), 1001);
    roundtrip(f, sizeof b, args, 2, 1, 0);
}

/* test edi,edi; je L; mov eax,1; ret; L: mov eax,2; ret */
static void test_short_jcc_in_prologue(void)
{
    static const uint8_t b[] = { 0x85, 0xff, 0x74, 0x06, 0xb8, 1, 0, 0, 0, 0xc3, 0xb8, 2, 0, 0, 0, 0xc3 };
    make_rx(0);
    fn_t f = place(128, b, sizeof b, NULL, 0);
    make_rx(1);
    int args[] = { 0, 1 };
    CHECK_EQ_U64(f(0), 2);
    roundtrip(f, sizeof b, args, 2, 0, 1);
}

/* sub rsp,8; call helper; add eax,edi; add rsp,8; ret - helper: mov eax,7; ret */
static void test_call_in_prologue(void)
{
    static const uint8_t helper[] = { 0xb8, 7, 0, 0, 0, 0xc3 };
    static const uint8_t b[] = { 0x48, 0x83, 0xec, 0x08, 0xe8, 0, 0, 0, 0, 0x01, 0xf8,
                                 0x48, 0x83, 0xc4, 0x08, 0xc3 };
    make_rx(0);
    place(256, helper, sizeof helper, NULL, 0);
    struct fix fx[] = { { 5, code + 256 } };
    fn_t f = place(192, b, sizeof b, fx, 1);
    make_rx(1);
    int args[] = { 3 };
    CHECK_EQ_U64(f(3), 10);
    roundtrip(f, sizeof b, args, 1, 0, 1);
}

static void expect_refusal(fn_t f, size_t size, const char *why_part)
{
    uint8_t before[16];
    memcpy(before, (void *)f, sizeof before);
    mlz_inline h;
    CHECK(mlz_inline_prepare((void *)f, size, (void *)hook, &h) < 0);
    if (!strstr(h.why, why_part)) fprintf(stderr, "  reason: '%s', wanted '%s'\n", h.why, why_part);
    CHECK(strstr(h.why, why_part) != NULL);
    CHECK(memcmp(before, (void *)f, sizeof before) == 0);
}

static void test_refuses_too_short(void)
{
    static const uint8_t b[] = { 0x31, 0xc0, 0xc3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc };   /* xor eax,eax; ret */
    make_rx(0);
    fn_t f = place(320, b, sizeof b, NULL, 0);
    make_rx(1);
    expect_refusal(f, 3, "too short");
    expect_refusal(f, 0, "too short");   /* size unknown: the ret still ends it */
}

/* mov eax,edi; L: add eax,1; cmp eax,100; jl L; ret - the loop jumps to +2 */
static void test_refuses_branch_into_range(void)
{
    static const uint8_t b[] = { 0x89, 0xf8, 0x83, 0xc0, 0x01, 0x83, 0xf8, 0x64, 0x7c, 0xf8, 0xc3 };
    make_rx(0);
    fn_t f = place(384, b, sizeof b, NULL, 0);
    make_rx(1);
    CHECK_EQ_U64(f(5), 100);
    expect_refusal(f, sizeof b, "inside the");
}

static void test_refuses_entry_jump(void)
{
    static const uint8_t b[] = { 0xe9, 0, 0, 0, 0, 0xc3, 0xcc, 0xcc };
    make_rx(0);
    fn_t f = place(448, b, sizeof b, NULL, 0);
    make_rx(1);
    expect_refusal(f, sizeof b, "already a jump");
}

/* Someone patched over our jump: remove leaves their bytes. */
static void test_remove_leaves_foreign_bytes(void)
{
    fn_t f = (fn_t)(void *)code;   /* fn_rip_mov, placed by the first test */
    mlz_inline h;
    REQUIRE(mlz_inline_prepare((void *)f, 22, (void *)hook, &h) == 0);
    tramp = (fn_t)h.trampoline;
    REQUIRE(mlz_inline_install(&h) == 0);
    make_rx(0);
    uint8_t foreign[5] = { 0x90, 0x90, 0x90, 0x90, 0x90 };   /* five nops over the mov's first bytes */
    uint8_t saved[5];
    memcpy(saved, code + 4, 5);
    memcpy(code + 4, foreign, 5);
    make_rx(1);
    CHECK(mlz_inline_remove(&h) == 1);
    CHECK(strstr(h.why, "no longer") != NULL);
    CHECK(memcmp(code + 4, foreign, 5) == 0);
    make_rx(0);
    memcpy(code + 4, h.orig, 5);   /* the original bytes, as they were */
    make_rx(1);
    CHECK_EQ_U64(f(5), 21005);
    (void)saved;
}

/* A compiled function of this program (text pages r-x, size unknown). */
static volatile int counter;
__attribute__((noinline)) static int compiled(int x)
{
    counter += x;
    for (int i = 0; i < x; i++) counter ^= i * 7;
    return counter + x;
}

static void test_compiled_function(void)
{
    mlz_inline h;
    int rc = mlz_inline_prepare((void *)compiled, 0, (void *)hook, &h);
    if (rc) fprintf(stderr, "  refused: %s\n", h.why);
    REQUIRE(rc == 0);
    tramp = (fn_t)h.trampoline;
    counter = 0;
    int want = compiled(3);
    counter = 0;
    REQUIRE(mlz_inline_install(&h) == 0);
    fn_t volatile vf = compiled;
    CHECK_EQ_U64(vf(3), want + 100000);
    CHECK(mlz_inline_remove(&h) == 0);
    counter = 0;
    CHECK_EQ_U64(vf(3), want);
}

/* Threads call the function while the jump comes and goes: each call sees
 * the whole old or the whole new entry (one 16-byte compare-and-swap; the
 * moved range is a single instruction, so no thread can be inside it). */
static atomic_int stop, bad;
static void *caller(void *arg)
{
    fn_t f = (fn_t)arg;
    while (!atomic_load(&stop)) {
        int r = f(5);
        if (r != 21005 && r != 121005) atomic_fetch_add(&bad, 1);
    }
    return NULL;
}

static void test_install_remove_under_calls(void)
{
    fn_t f = (fn_t)(void *)code;
    CHECK_EQ_U64(f(5), 21005);
    mlz_inline h;
    REQUIRE(mlz_inline_prepare((void *)f, 22, (void *)hook, &h) == 0);
    tramp = (fn_t)h.trampoline;
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, caller, (void *)f);
    int fails = 0;
    for (int i = 0; i < 2000; i++) {
        if (mlz_inline_install(&h) != 0) fails++;
        if (mlz_inline_remove(&h) != 0) fails++;
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    CHECK_EQ_U64(fails, 0);
    CHECK_EQ_U64(atomic_load(&bad), 0);
    CHECK_EQ_U64(f(5), 21005);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    if (!map_code()) {
        printf("SKIP: test_inline (no page within rel32 reach of the data segment)\n");
        return 0;
    }
    RUN(test_rip_relative_mov_after_endbr64);
    RUN(test_rip_relative_lea);
    RUN(test_short_jcc_in_prologue);
    RUN(test_call_in_prologue);
    RUN(test_refuses_too_short);
    RUN(test_refuses_branch_into_range);
    RUN(test_refuses_entry_jump);
    RUN(test_remove_leaves_foreign_bytes);
    RUN(test_compiled_function);
    RUN(test_install_remove_under_calls);
    CHECK_EXIT();
}
