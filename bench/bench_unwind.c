/*
 * bench_unwind.c - cost of one stack capture: frame pointers vs DWARF CFI.
 *
 * Recurses through three functions with different frame shapes to reach a
 * total stack depth of about 10 and 30 frames (main and glibc's start frames
 * included), then times batches of unwinds with clock_gettime and reports
 * the median and p99 per unwind, and the dwarf/fp ratio of the medians.
 * The stack bound comes from a mlz_stack_cache, as on the sampling path.
 * No performance counters on this machine: many rounds, medians.
 *
 * This file keeps frame pointers (the Makefile builds with -O2) so that both
 * walkers see the same frames; the DWARF walker would see them anyway.
 */
#pragma GCC optimize("no-omit-frame-pointer")

#include "modtab.h"
#include "unwind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NOI __attribute__((noinline, noipa))
#define BATCH 16
#define ROUNDS 20000
#define WARMUP 2000
#define MAXF 64

typedef unsigned (*unwind_fn)(uint64_t *, unsigned, unsigned, uint64_t);

typedef struct job {
    unwind_fn fn;
    double med, p99;
    unsigned frames;
} job;

static mlz_stack_cache g_cache;
static double g_samples[ROUNDS];
static volatile unsigned g_sink;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

NOI static void measure(job *j)
{
    uint64_t pcs[MAXF], hi = mlz_stack_cache_hi(&g_cache);
    unsigned n = 0;

    for (int i = 0; i < WARMUP; i++)
        n += j->fn(pcs, MAXF, 0, hi);
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t t0 = now_ns();
        for (int b = 0; b < BATCH; b++)
            n += j->fn(pcs, MAXF, 0, hi);
        g_samples[r] = (double)(now_ns() - t0) / BATCH;
    }
    g_sink += n;
    j->frames = j->fn(pcs, MAXF, 0, hi);
    qsort(g_samples, ROUNDS, sizeof g_samples[0], cmp_double);
    j->med = g_samples[ROUNDS / 2];
    j->p99 = g_samples[ROUNDS * 99 / 100];
}

/* Three frame shapes: small, with a buffer, with callee-saved registers in use. */
NOI static void rec_b(job *j, unsigned d);
NOI static void rec_c(job *j, unsigned d);

NOI static void rec_a(job *j, unsigned d)
{
    if (d == 0)
        measure(j);
    else
        rec_b(j, d - 1);
    g_sink++;
}

NOI static void rec_b(job *j, unsigned d)
{
    volatile char buf[200];
    buf[0] = (char)d;
    if (d == 0)
        measure(j);
    else
        rec_c(j, d - 1);
    g_sink += (unsigned)buf[0];
}

NOI static void rec_c(job *j, unsigned d)
{
    unsigned a = d * 3, b = d ^ 5, c = d + 7, e = d * d;
    if (d == 0)
        measure(j);
    else
        rec_a(j, d - 1);
    g_sink += a + b + c + e;
}

/* Frames below main (glibc's start) plus main itself, as DWARF sees them
 * from here; measure() and rec_a() add one each at recursion depth 0. */
NOI static unsigned base_frames(void)
{
    uint64_t pcs[MAXF];
    return mlz_unwind_dwarf_bounded(pcs, MAXF, 0, mlz_stack_cache_hi(&g_cache)) + 2;
}

/* The rule cache a caller would keep per thread (16 KiB). */
static mlz_unwind_cache g_rules;

/* Skips its own frame; the asm keeps it a real frame (no tail call). */
NOI static unsigned dwarf_cached(uint64_t *pcs, unsigned max, unsigned skip, uint64_t hi)
{
    unsigned n = mlz_unwind_dwarf_cached(pcs, max, skip + 1, hi, &g_rules);
    __asm__ volatile("" : "+r"(n));
    return n;
}

/* The same without the last walk's frames, so every frame is stepped:
 * by rbp in modules built with frame pointers, else by a cached rule. */
NOI static unsigned dwarf_steps(uint64_t *pcs, unsigned max, unsigned skip, uint64_t hi)
{
    g_rules.tail_n = 0;
    unsigned n = mlz_unwind_dwarf_cached(pcs, max, skip + 1, hi, &g_rules);
    __asm__ volatile("" : "+r"(n));
    return n;
}

/* Sets every module's frame-pointer mark to on (where the classifier set
 * it) or off, so the same run measures rules alone; a refresh (new
 * generation) empties the callers' caches. */
static unsigned g_fp_marked[64];
static unsigned fp_marks(int on)
{
    unsigned n, k = 0;
    mlz_module *m = (mlz_module *)mlz_modtab_modules(&n, NULL, NULL);
    for (unsigned i = 0; i < n && i < 64; i++) {
        if (!on) g_fp_marked[i] = m[i].frame_pointers;
        m[i].frame_pointers = (uint8_t)(on && g_fp_marked[i]);
        k += g_fp_marked[i];
    }
    memset(&g_rules, 0, sizeof g_rules);
    return k;
}

static void run(const char *name, unwind_fn fn, unsigned depth, job *out)
{
    out->fn = fn;
    rec_a(out, depth);
    printf("%-13s %6u %10.1f %10.1f\n", name, out->frames, out->med, out->p99);
}

int main(void)
{
    if (mlz_modtab_refresh() != 0) {
        fprintf(stderr, "bench_unwind: module table refresh failed\n");
        return 1;
    }
    unsigned nmod;
    mlz_modtab_modules(&nmod, NULL, NULL);
    unsigned base = base_frames();
    static const unsigned targets[] = { 10, 30 };

    unsigned nfp = fp_marks(0);
    fp_marks(1);
    printf("bench_unwind: %d rounds x %d unwinds, %u modules in the table, "
           "%u built with frame pointers\n", ROUNDS, BATCH, nmod, nfp);
    for (unsigned t = 0; t < 2; t++) {
        unsigned depth = targets[t] > base ? targets[t] - base : 0;
        job fp, dw, dc, st, sr;
        printf("\ntarget depth ~%u\n%-13s %6s %10s %10s\n", targets[t], "method", "frames",
               "median ns", "p99 ns");
        run("fp", mlz_unwind_fp_bounded, depth, &fp);
        run("dwarf", mlz_unwind_dwarf_bounded, depth, &dw);
        run("dwarf+cache", dwarf_cached, depth, &dc);
        run("steps", dwarf_steps, depth, &st);
        fp_marks(0);
        run("steps, rules", dwarf_steps, depth, &sr);
        fp_marks(1);
        printf("dwarf/fp median ratio: %.1f, dwarf+cache/fp: %.1f\n"
               "per frame: fp %.1f ns, dwarf %.1f ns, dwarf+cache %.1f ns\n"
               "every frame stepped (no saved walk): %.1f ns per frame, %.1f with rules only "
               "(%.2fx)\n",
               dw.med / fp.med, dc.med / fp.med, fp.med / fp.frames, dw.med / dw.frames,
               dc.med / dc.frames, st.med / st.frames, sr.med / sr.frames, sr.med / st.med);
    }

    /* One-off costs a caller pays per thread or per refresh. */
    uint64_t lo, hi, t0 = now_ns();
    for (int i = 0; i < 200; i++)
        mlz_stack_bounds(&lo, &hi);
    printf("\nmlz_stack_bounds (per thread, cached by the caller): %.1f us\n",
           (double)(now_ns() - t0) / 200 / 1000);
    t0 = now_ns();
    for (int i = 0; i < 200; i++)
        mlz_modtab_refresh();
    printf("mlz_modtab_refresh (%u modules): %.1f us\n", nmod, (double)(now_ns() - t0) / 200 / 1000);
    mlz_modtab_release_all();
    return 0;
}
