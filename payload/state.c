/*
 * state.c - the payload's global state: configuration from the environment
 * (or the injector) and the data structures. Their description for tools
 * outside the process is info.c's memlyze_info (the contract in info.h).
 *
 * Everything here runs once, from the constructor or the injector's call,
 * never on an allocation's fast path. Nothing allocates: memory comes from
 * mmap inside the core's init functions.
 */
#include "payload.h"
#include "size_text.h"
#include "info.h"
#include "modtab.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/syscall.h>

/* Before init the free hook's Bloom test must answer "no" without memory
 * of its own: an all-zero filter in .bss (never written, so never resident,
 * unless the preload library's boot arena was used: preload.c). */
/* Module snapshots are stamped by the event clock (modtab.h). */
static uint64_t modtab_clock(void) { return mlz__now_ns(); }

static uint8_t empty_filter[1u << MLZ_BLOOM_DEFAULT_LOG2_CELLS];
static uint8_t *spare_cells;     /* a detached filter, zeroed, for the next attach */

/* Defined by preload.c in the LD_PRELOAD build only; NULL otherwise. */
#define BOOT(ret, name, args) extern ret mlz__boot_##name args __attribute__((weak));
BOOT(void *, malloc, (size_t))
BOOT(void, free, (void *))
BOOT(void *, calloc, (size_t, size_t))
BOOT(void *, realloc, (void *, size_t))
BOOT(int, posix_memalign, (void **, size_t, size_t))
BOOT(void *, aligned_alloc, (size_t, size_t))
BOOT(void *, memalign, (size_t, size_t))
BOOT(void *, valloc, (size_t))
BOOT(void *, pvalloc, (size_t))
#undef BOOT

mlz_global mlz__g = {
    .real = { mlz__boot_malloc, mlz__boot_free, mlz__boot_calloc, mlz__boot_realloc,
              mlz__boot_posix_memalign, mlz__boot_aligned_alloc, mlz__boot_memalign,
              mlz__boot_valloc, mlz__boot_pvalloc },
    .bloom = { .cells = empty_filter, .shift = 64 - MLZ_BLOOM_DEFAULT_LOG2_CELLS,
               .log2_cells = MLZ_BLOOM_DEFAULT_LOG2_CELLS,
               .mask = (1u << MLZ_BLOOM_DEFAULT_LOG2_CELLS) - 1 },
    .rate = MLZ_SAMPLER_DEFAULT_RATE,
    .min_free = MLZ_DEFAULT_MIN_FREE,
};

/* "512k", "4M", "1": bytes; 0 when malformed. No strtoull: keeps it obvious. */
/* 0 for text that is no size (every setting read with it is positive). */
static uint64_t parse_size(const char *s)
{
    int64_t v = mlz_size_parse(s);
    return v > 0 ? (uint64_t)v : 0;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

void mlz__config_from_env(void)
{
    const char *v;
    uint64_t x;
    if ((v = getenv("MEMLYZE_RATE")) && (x = parse_size(v))) mlz__g.rate = x;
    if ((v = getenv("MEMLYZE_SEED")) && (x = parse_size(v))) mlz__g.seed = x;
    if ((v = getenv("MEMLYZE_MIN_FREE_MB")) && *v) {
        mlz__g.min_free = parse_size(v) << 20;
        mlz__g.min_free_set = 1;
    }
    /* DWARF by default: it walks code without frame pointers (glibc, most
     * distro libraries); at one sample per 512 KiB its ~1-2 us per sample is
     * noise (bench/bench_unwind). */
    if ((v = getenv("MEMLYZE_UNWIND"))) mlz__g.unwinder = strcmp(v, "fp") == 0 ? MLZ_UNWIND_FP : MLZ_UNWIND_DWARF;
    if ((v = getenv("MEMLYZE_FOLLOW_FORK"))) mlz__g.follow_fork = v[0] == '1';
    if ((v = getenv("MEMLYZE_COVERAGE"))) mlz__g.coverage = v[0] == '1';
    if ((v = getenv("MEMLYZE_SPOOL")) && *v) copy_str(mlz__g.spool_path, sizeof mlz__g.spool_path, v);
}

/* Default spool name: memlyze.PID.spool in the working directory. */
void mlz__default_spool_path(void)
{
    char num[24];
    int k = 0;
    unsigned long p = (unsigned long)mlz__g.pid;
    do { num[k++] = (char)('0' + p % 10); p /= 10; } while (p);
    char *d = mlz__g.spool_path;
    memcpy(d, "memlyze.", 8);
    d += 8;
    while (k) *d++ = num[--k];
    memcpy(d, ".spool", 7);
}

int mlz__init(void)
{
    if (mlz__g.ready) return 0;
    mlz__g.pid = (pid_t)syscall(SYS_getpid);
    mlz_clock_init(&mlz__g.clock, 1);
    /* Room for the samples of 32 GiB of live heap at the rate (64 Ki slots
     * at the default 512 KiB), at most 2^20 slots (64 MiB of address space,
     * touched as used), as exact mode has: 4 GiB at -r 4096, which with 64 Ki
     * slots filled at 280 MiB. */
    unsigned log2 = 16;
    while (log2 < 20 && (mlz__g.rate <= 1 || (mlz__g.rate << log2) < (32ull << 30))) log2++;
    const char *v = getenv("MEMLYZE_MAP_LOG2");   /* memlyze run --max-live */
    if (v && parse_size(v) >= MEMLYZE_MAP_LOG2_MIN && parse_size(v) <= MEMLYZE_MAP_LOG2_MAX) log2 = (unsigned)parse_size(v);
    if (mlz__g.map_log2) log2 = mlz__g.map_log2;   /* memlyze-attach --max-live */
    if (mlz_heapmap_init(&mlz__g.map, log2)) return -1;
    if (mlz_stacktab_init(&mlz__g.stacks, MLZ_STACKTAB_DEFAULT_MAX, MLZ_STACKTAB_DEFAULT_ARENA)) {
        mlz_heapmap_destroy(&mlz__g.map);
        return -1;
    }
    mlz_bloom tmp;
    if (spare_cells) {
        tmp.cells = spare_cells;   /* zeroed by MADV_DONTNEED at detach */
        spare_cells = NULL;
    } else if (mlz_bloom_init(&tmp, MLZ_BLOOM_DEFAULT_LOG2_CELLS)) {
        mlz_stacktab_destroy(&mlz__g.stacks);
        mlz_heapmap_destroy(&mlz__g.map);
        return -1;
    }
    /* Same geometry as the placeholder, so a concurrent free that loaded
     * the old word pointer still indexes inside a filter of this size; the
     * default one, whose shift the free hook has as an immediate
     * (mlz_bloom_first_default). */
    atomic_store(&mlz__g.bloom.nonzero, 0);
    atomic_store(&mlz__g.bloom.stuck, 0);
    if (mlz__g.rate <= 1) {
        /* Exact mode: every block is a sample, so every free must look in
         * the map; a filter of saturated cells says "maybe" to all of
         * them, and the hooks skip adding and removing. */
        memset(atomic_load(&tmp.cells), MLZ_BLOOM_STUCK, (size_t)mlz__g.bloom.mask + 1);
        atomic_store(&mlz__g.bloom.nonzero, mlz__g.bloom.mask + 1);
        atomic_store(&mlz__g.bloom.stuck, mlz__g.bloom.mask + 1);
    } else {
        /* The placeholder holds the boot-arena blocks (mlz__bloom_keep) and
         * nothing else: they go into the new filter before it is installed,
         * or their frees would reach the real free. */
        uint8_t *cells = atomic_load(&tmp.cells);
        uint64_t nonzero = 0;
        for (size_t i = 0; i <= mlz__g.bloom.mask; i++)
            if (empty_filter[i]) cells[i] = empty_filter[i], nonzero++;
        atomic_store(&mlz__g.bloom.nonzero, nonzero);
    }
    atomic_store_explicit(&mlz__g.bloom.cells, atomic_load(&tmp.cells), memory_order_release);

    mlz_modtab_set_clock(modtab_clock);
    mlz_modtab_refresh();
    const mlz_module *self = mlz_modtab_find((uint64_t)(uintptr_t)&mlz_hook_malloc);
    if (self) { mlz__g.self_lo = self->exec_start; mlz__g.self_hi = self->exec_end; }

    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    uint64_t real = (uint64_t)rt.tv_sec * 1000000000ull + (uint64_t)rt.tv_nsec;
    mlz__g.mono_to_real_ns = real - mlz__now_ns();
    /* A new map is a new session: its samples are not those of any earlier
     * map, so diff must not pair them (never 0, never the last value). */
    mlz__g.session = real > mlz__g.session ? real : mlz__g.session + 1;
    mlz__g.ready = 1;
    return 0;
}

/* A block the real free must never see (the preload library's boot
 * arena): into the placeholder filter, which keeps it for good (the filter
 * of a detached payload, too), and into the installed one. mlz__init copies
 * the placeholder's cells into each filter it installs. */
void mlz__bloom_keep(uint64_t p)
{
    mlz_bloom placeholder = { .cells = empty_filter, .shift = mlz__g.bloom.shift,
                             .log2_cells = mlz__g.bloom.log2_cells, .mask = mlz__g.bloom.mask };
    mlz_bloom_add(&placeholder, p);
    if (atomic_load(&mlz__g.bloom.cells) != empty_filter) mlz_bloom_add(&mlz__g.bloom, p);
}

/* Detach, once no hook is inside a sample path: the map and the stack table
 * are only reached from sample paths, so they can go. The Bloom filter is
 * read on every free without such a guard, so its pages are handed back
 * with MADV_DONTNEED and stay mapped: a late reader sees zeros ("not
 * sampled"). A later attach reuses that mapping. */
void mlz__release(void)
{
    if (!mlz__g.ready) return;
    uint8_t *cells = atomic_exchange(&mlz__g.bloom.cells, empty_filter);
    if (cells && cells != empty_filter) {
        madvise(cells, (size_t)mlz__g.bloom.mask + 1, MADV_DONTNEED);
        spare_cells = cells;
    }
    mlz_heapmap_destroy(&mlz__g.map);
    mlz_stacktab_destroy(&mlz__g.stacks);
    mlz__drain_release();
    mlz_modtab_release_all();    /* read only by sample paths and the drain */
    mlz__g.ready = 0;
}
