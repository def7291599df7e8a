/*
 * target.c - a program that counts its own allocation calls.
 *
 * Built by test_gotpatch_targets as PIE, non-PIE, full RELRO, partial RELRO
 * (lazy binding) and -fno-plt, linked with libtshared.so (allocates through
 * its own GOT) and the test payload libtp.so. `target attach` attaches
 * (patches) after startup, checks that the hooks saw exactly the calls the
 * program made, detaches and checks that everything came back; `target
 * plain` runs the same workload without attaching. Lines starting "OUT:" are
 * the program's output and must be identical in both modes; "ERR:" lines
 * (stderr) are failed checks; the exit status is their number.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gotpatch.h"
#include "tp_payload.h"

unsigned long tshared_work(int n);
unsigned long tshared_via_table(int n);

static int fails;
#define EXPECT(c) do { if (!(c)) { fails++; fprintf(stderr, "ERR: %s:%d: %s\n", __FILE__, __LINE__, #c); } } while (0)
#define EXPECT_EQ(a, b) do { unsigned long a_ = (unsigned long)(a), b_ = (unsigned long)(b); if (a_ != b_) { fails++; \
    fprintf(stderr, "ERR: %s:%d: %s == %s (%lu != %lu)\n", __FILE__, __LINE__, #a, #b, a_, b_); } } while (0)
#define ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

enum { N = 200 };

static unsigned long d[TP_N];
static void mark(void) { for (int i = 0; i < TP_N; i++) d[i] = tp_count(i); }
static unsigned long delta(int i) { return tp_count(i) - d[i]; }

/* The program's direct calls: exactly N+1 malloc, N realloc, N calloc, 2N+7 free ... */
static unsigned long direct_calls(void)
{
    unsigned long sum = 0;
    for (int i = 0; i < N; i++) {
        unsigned char *p = malloc((size_t)i + 1);
        ESCAPE(p);
        p[0] = (unsigned char)i;
        p = realloc(p, (size_t)i + 100);
        ESCAPE(p);
        sum += p[0];
        free(p);
        unsigned char *q = calloc(2, (size_t)i + 1);
        ESCAPE(q);
        sum += q[i];
        free(q);
    }
    void *a = NULL;
    if (posix_memalign(&a, 64, 100) == 0) free(a);
    a = aligned_alloc(64, 128); ESCAPE(a); free(a);
    a = memalign(64, 100); ESCAPE(a); free(a);
    a = valloc(100); ESCAPE(a); free(a);        /* first call after attach: a lazy slot */
    a = pvalloc(100); ESCAPE(a); free(a);
    a = reallocarray(NULL, 10, 10); ESCAPE(a); free(a);
    /* a pointer to free taken now (after patching when attached) */
    void (*volatile fp)(void *) = free;
    a = malloc(16); ESCAPE(a);
    fp(a);
    return sum;
}

static unsigned long libc_internal(const char *tmp)
{
    unsigned long sum = 0;
    for (int i = 0; i < N; i++) {
        char *s = strdup("memlyze");
        ESCAPE(s);
        sum += (unsigned long)strlen(s);
        free(s);
    }
    FILE *f = fopen(tmp, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) sum += (unsigned long)n;
    free(line);
    fclose(f);
    return sum;
}

int main(int argc, char **argv)
{
    int attach = argc > 1 && strcmp(argv[1], "attach") == 0;
    const char *tmp = argc > 2 ? argv[2] : "/proc/self/maps";
    printf("OUT: start\n");
    fflush(stdout);
    if (attach) {
        EXPECT(tp_attach() > 0);
        mlz_got_stats st;
        mlz_got_get_stats(&st);
        fprintf(stderr, "info: modules %u patched %u skipped %u; slots JUMP_SLOT %u GLOB_DAT %u ABS64 %u; "
                "left canonical-plt %u other-definition %u\n", st.modules_scanned, st.modules_patched,
                st.modules_skipped, st.slots_patched[MLZ_GOT_JUMP_SLOT], st.slots_patched[MLZ_GOT_GLOB_DAT],
                st.slots_patched[MLZ_GOT_ABS64], st.slots_left[MLZ_GOT_LEFT_CANON_PLT],
                st.slots_left[MLZ_GOT_LEFT_OTHER_DEF]);
    }

    mark();
    unsigned long s1 = direct_calls();
    if (attach) {
        EXPECT_EQ(delta(TP_MALLOC), N + 1);
        EXPECT_EQ(delta(TP_REALLOC), N + 1);   /* + the one reallocarray makes inside libc */
        EXPECT_EQ(delta(TP_CALLOC), N);
        EXPECT_EQ(delta(TP_FREE), 2 * N + 7);
        EXPECT_EQ(delta(TP_POSIX_MEMALIGN), 1);
        EXPECT_EQ(delta(TP_ALIGNED_ALLOC), 1);
        EXPECT_EQ(delta(TP_MEMALIGN), 1);
        EXPECT_EQ(delta(TP_VALLOC), 1);
        EXPECT_EQ(delta(TP_PVALLOC), 1);
        EXPECT_EQ(delta(TP_REALLOCARRAY), 1);
    }
    mark();
    unsigned long s2 = tshared_work(N);
    if (attach) {
        EXPECT_EQ(delta(TP_MALLOC), N);
        EXPECT_EQ(delta(TP_FREE), N);
    }
    mark();
    s2 += tshared_via_table(N);
    if (attach) {
        EXPECT_EQ(delta(TP_MALLOC), N);   /* through the patched R_X86_64_64 word */
        EXPECT_EQ(delta(TP_FREE), N);
        mlz_got_stats st;
        mlz_got_get_stats(&st);
        EXPECT(st.slots_patched[MLZ_GOT_ABS64] >= 1);
        EXPECT(st.slots_left[MLZ_GOT_LEFT_ADDEND] >= 1);
    }
    mark();
    long live0 = tp_live();
    unsigned long s3 = libc_internal(tmp);
    if (attach) {
        EXPECT(delta(TP_MALLOC) >= N + 1);    /* strdup N times, getline and fopen at least once */
        EXPECT(delta(TP_FREE) >= N + 2);
        EXPECT_EQ(tp_live(), live0);          /* and everything freed again */
    }
    if (attach) {
        tp_detach_result r;
        int bad = tp_detach(&r);
        EXPECT_EQ(bad, 0);
        EXPECT_EQ(r.left, 0);
        EXPECT_EQ(r.restored, r.patched);
        EXPECT_EQ(r.slot_diffs, 0);
        EXPECT_EQ(r.relro_diffs, 0);
        EXPECT_EQ(r.maps_differ, 0);
        fprintf(stderr, "info: %zu slots patched and restored\n", r.restored);
        mark();
        direct_calls();
        tshared_work(N);
        tshared_via_table(N);
        libc_internal(tmp);
        for (int i = 0; i < TP_N; i++) EXPECT_EQ(delta(i), 0);
    }
    printf("OUT: direct %lu shared %lu libc %lu\n", s1, s2, s3);
    return fails;
}
