/*
 * attach.c - GOT mode: the entry points the injector calls inside a running
 * process (memlyze_attach / memlyze_detach), and MEMLYZE_MODE=got, which
 * does the same from the constructor of a preloaded libmemlyze.so so the
 * whole path can be tested without an injector.
 *
 * Attach: resolve the real allocation functions (gotpatch), build the data
 * structures, start the drain thread, then patch every module's GOT slots.
 * Detach, in the order that keeps every thread safe:
 *   1. restore the GOT slots: no new call reaches the hooks through them;
 *   2. switch sampling and free tracking off, then wait until no thread is
 *      inside a sample path (mlz__quiescent: per-thread in_flight counts,
 *      entered before the flags are checked: see enter in hooks.c);
 *   3. drain and seal the spool;
 *   4. give the big memory back. Hooks stay mapped as pass-through code,
 *      because pointers to them may have been copied out of GLOB_DAT slots
 *      into the program's data (a table holding &free): unmapping the
 *      library could leave those dangling. A later attach reuses it.
 */
#include "payload.h"
#include "gotpatch.h"
#include "mlz_format.h"
#include "modtab.h"
#include "inline_sites.h"

#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void *hook_dlopen(const char *file, int mode);
static int hook_dlclose(void *handle);

enum { H_MALLOC, H_FREE, H_CALLOC, H_REALLOC, H_POSIX_MEMALIGN, H_ALIGNED_ALLOC, H_MEMALIGN,
       H_VALLOC, H_PVALLOC, H_REALLOCARRAY, H_DLOPEN, H_DLCLOSE, NHOOKS };

static mlz_got_hook hooks[NHOOKS] = {
    { "malloc", (void *)mlz_hook_malloc, 0 },
    { "free", (void *)mlz_hook_free, 0 },
    { "calloc", (void *)mlz_hook_calloc, 0 },
    { "realloc", (void *)mlz_hook_realloc, 0 },
    { "posix_memalign", (void *)mlz_hook_posix_memalign, 0 },
    { "aligned_alloc", (void *)mlz_hook_aligned_alloc, 0 },
    { "memalign", (void *)mlz_hook_memalign, 0 },
    { "valloc", (void *)mlz_hook_valloc, 0 },
    { "pvalloc", (void *)mlz_hook_pvalloc, 0 },
    { "reallocarray", (void *)mlz_hook_reallocarray, 0 },
    { "dlopen", (void *)hook_dlopen, 0 },
    { "dlclose", (void *)hook_dlclose, 0 },
};

static int got_ready;                 /* mlz_got_init done (once per process) */
/* Inline hooks for allocators the GOT never sees (gotpatch/inline_alloc.c):
 * only where no other thread can be inside the bytes being replaced -
 * MEMLYZE_MODE=got starts from a constructor before main - or when the
 * caller says it has stopped and checked every thread ("inline=1"). */
static int inline_wanted, inline_prepared;
static int inline_remote;    /* "inline=remote": prepare only, the injector writes (inline_sites.h) */
_Atomic int mlz__attached;   /* read from outside through memlyze_info */
static int patched_modules, patched_slots;

/* Our dlopen must not become "the caller" (RUNPATH, $ORIGIN): gotpatch
 * resolves the name as the real caller would have. Detached, the hook only
 * forwards: it must not patch again. */
static void *hook_dlopen(const char *file, int mode)
{
    void *caller = __builtin_return_address(0);
    void *(*real)(const char *, int) = (void *(*)(const char *, int))hooks[H_DLOPEN].real;
    if (atomic_load(&mlz__attached)) {
        void *h = mlz_got_dlopen(file, mode, caller);
        /* The new code may allocate at once: let the unwinder know it. */
        if (h) mlz_modtab_refresh();
        return h;
    }
    char path[PATH_MAX];
    if (file && mlz_got_dlopen_path(file, caller, path, sizeof path) == 1) return real(path, mode);
    return real(file, mode);
}

static int hook_dlclose(void *handle)
{
    if (atomic_load(&mlz__attached)) return mlz_got_dlclose(handle);
    return ((int (*)(void *))hooks[H_DLCLOSE].real)(handle);
}

/* "rate=524288;spool=/path;unwind=fp;seed=7"; unknown keys are ignored so
 * older payloads accept newer injectors' strings. */
static int parse_config(const char *cfg)
{
    while (cfg && *cfg) {
        const char *end = strchr(cfg, ';');
        size_t len = end ? (size_t)(end - cfg) : strlen(cfg);
        const char *eq = memchr(cfg, '=', len);
        if (eq) {
            size_t klen = (size_t)(eq - cfg), vlen = len - klen - 1;
            const char *v = eq + 1;
            if (klen == 4 && !memcmp(cfg, "rate", 4)) {
                uint64_t r = 0;
                for (size_t i = 0; i < vlen; i++) {
                    if (v[i] < '0' || v[i] > '9') return -EINVAL;
                    r = r * 10 + (uint64_t)(v[i] - '0');
                }
                if (!r) return -EINVAL;
                mlz__g.rate = r;
            } else if (klen == 4 && !memcmp(cfg, "seed", 4)) {
                uint64_t s = 0;
                for (size_t i = 0; i < vlen; i++) s = s * 10 + (uint64_t)(v[i] - '0');
                mlz__g.seed = s;
            } else if (klen == 5 && !memcmp(cfg, "spool", 5)) {
                if (vlen == 0 || vlen >= sizeof mlz__g.spool_path) return -ENAMETOOLONG;
                memcpy(mlz__g.spool_path, v, vlen);
                mlz__g.spool_path[vlen] = 0;
            } else if (klen == 6 && !memcmp(cfg, "inline", 6)) {
                inline_wanted = (vlen == 1 && v[0] == '1') || (vlen == 6 && !memcmp(v, "remote", 6));
                inline_remote = vlen == 6 && !memcmp(v, "remote", 6);
            } else if (klen == 8 && !memcmp(cfg, "coverage", 8)) {
                mlz__g.coverage = vlen == 1 && v[0] == '1';
            } else if (klen == 6 && !memcmp(cfg, "unwind", 6)) {
                mlz__g.unwinder = vlen == 2 && !memcmp(v, "fp", 2) ? MLZ_UNWIND_FP : MLZ_UNWIND_DWARF;
            }
        }
        cfg = end ? end + 1 : NULL;
    }
    return 0;
}

/* The blind-spot report (capstone, outside every hot path) goes into the
 * spool as text; memlyze-attach --verbose and memlyze run --coverage show it. */
static void report_coverage(void)
{
    static mlz_got_module_report mods[512];
    static char text[MLZ_EXT_MAX];
    mlz_got_blindspot_report r = { .modules = mods, .cap = sizeof mods / sizeof *mods };
    if (mlz_got_blindspot_scan(&r) < 0) {
        static const char msg[] = "blind-spot scan unavailable (libcapstone not found in the process's file system)\n";
        mlz__spool_note(MLZ_EV_COVERAGE, msg, sizeof msg - 1);
        return;
    }
    int n = mlz_got_format_report(&r, text, sizeof text);
    if (n > 0) mlz__spool_note(MLZ_EV_COVERAGE, text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
}

static int got_attach(void)
{
    if (atomic_load(&mlz__attached)) return -EALREADY;
    if (!got_ready) {
        int e = mlz_got_init(hooks, NHOOKS);
        if (e) return -ENOSYS;
        /* A child forked while attached must not write into the parent's
         * spool: control.c's handler disables it (or, with follow-fork,
         * gives it its own). Registered once: handlers cannot be removed. */
        pthread_atfork(NULL, NULL, mlz__atfork_child);
        got_ready = 1;
    }
    if (inline_wanted && !inline_prepared) {
        mlz_got_inline_prepare();   /* hooks[i].real becomes the trampoline */
        inline_prepared = 1;
    }
    mlz_real_fns r = {
        hooks[H_MALLOC].real, hooks[H_FREE].real, hooks[H_CALLOC].real, hooks[H_REALLOC].real,
        hooks[H_POSIX_MEMALIGN].real, hooks[H_ALIGNED_ALLOC].real, hooks[H_MEMALIGN].real,
        hooks[H_VALLOC].real, hooks[H_PVALLOC].real, hooks[H_REALLOCARRAY].real,
    };
    if (!r.malloc || !r.free || !r.calloc || !r.realloc) return -ENOENT;
    mlz__g.real = r;
    if (mlz__start()) return -EIO;
    atomic_store(&mlz__attached, 1);
    if (inline_wanted && !inline_remote) mlz_got_inline_install();   /* before the GOT: its slots to these are left alone */
    int n = mlz_got_patch_all();
    if (n < 0) {
        memlyze_detach();
        return -EPERM;
    }
    if (mlz__g.coverage) report_coverage();
    mlz_got_stats st;
    mlz_got_get_stats(&st);
    patched_modules = (int)st.modules_patched;
    patched_slots = 0;
    for (int k = 0; k < MLZ_GOT_NKINDS; k++) patched_slots += (int)st.slots_patched[k];
    return 0;
}

/* One attach or detach at a time. The injector lets a call go when it
 * outlives its timeout (the thread finishes it alone), so the next command's
 * call may arrive while that one still runs: it is refused, never overlapped. */
static _Atomic int entry_busy;

MLZ_EXPORT int memlyze_attach(const char *config)
{
    if (atomic_exchange(&entry_busy, 1)) return -EINPROGRESS;
    int e = atomic_load(&mlz__attached) ? -EALREADY : parse_config(config);
    if (!e && !mlz__g.spool_path[0]) e = -EINVAL;
    if (!e) e = got_attach();
    atomic_store(&entry_busy, 0);
    return e;
}

/* Waits (bounded) until no hook is inside a sample path. */
static int wait_quiescent(void)
{
    for (int i = 0; i < 20000; i++) {
        if (mlz__quiescent()) return 0;
        struct timespec ts = { 0, 100000 };
        nanosleep(&ts, NULL);
    }
    return -1;
}

static int detach(void);

MLZ_EXPORT int memlyze_detach(void)
{
    if (atomic_exchange(&entry_busy, 1)) return -EINPROGRESS;
    int e = detach();
    atomic_store(&entry_busy, 0);
    return e;
}

static int detach(void)
{
    if (!atomic_exchange(&mlz__attached, 0)) return -ENOENT;
    mlz_got_unpatch_report rep = { 0 };
    mlz_got_unpatch_all(&rep);
    mlz_got_inline_remove(NULL);
    atomic_store(&mlz__g.active_alloc, 0);
    atomic_store(&mlz__g.active_free, 0);
    if (wait_quiescent()) {
        /* A thread is stuck inside a sample path (stopped by a debugger?):
         * keep the memory, it may still be read. */
        mlz__drain_stop();
        return -EBUSY;
    }
    mlz__drain_stop();
    mlz__release();
    return rep.failed ? -EPERM : 0;
}

MLZ_EXPORT int memlyze_inline_sites(struct memlyze_inline_site *out, int cap)
{
    mlz_got_inline_info v[MEMLYZE_INLINE_SITES_MAX];
    size_t n = mlz_got_inline_list(v, MEMLYZE_INLINE_SITES_MAX), k = 0;
    if (n > MEMLYZE_INLINE_SITES_MAX) n = MEMLYZE_INLINE_SITES_MAX;
    for (size_t i = 0; i < n && (int)k < cap; i++) {
        if (!v[i].trampoline || v[i].installed) continue;
        struct memlyze_inline_site *o = &out[k++];
        memset(o, 0, sizeof *o);
        o->at = v[i].at;
        o->name = (uint64_t)(uintptr_t)v[i].name;
        o->len = v[i].len;
        o->jmp_len = v[i].jmp_len;
        memcpy(o->orig, v[i].orig, sizeof o->orig);
        memcpy(o->jmp, v[i].jmp, sizeof o->jmp);
    }
    return (int)k;
}

MLZ_EXPORT const char *memlyze_strerror(int code)
{
    switch (code) {
    case 0: return "ok";
    case -EALREADY: return "memlyze is already attached to this process";
    case -ENOENT: return "memlyze is not attached to this process";
    case -EINVAL: return "bad configuration string";
    case -ENAMETOOLONG: return "spool path too long";
    case -ENOSYS: return "cannot find the process's allocation functions";
    case -EIO: return "cannot set up the profiler or open its spool file";
    case -EPERM: return "some GOT slots could not be written or restored";
    case -EBUSY: return "a thread is still inside the profiler; memory kept";
    case -EINPROGRESS: return "an earlier attach or detach is still running in this process; try again in a moment";
    default: return "unknown error";
    }
}

MLZ_EXPORT int memlyze_attach_stats(int *modules, int *slots)
{
    *modules = patched_modules;
    *slots = patched_slots;
    return atomic_load(&mlz__attached);
}

/* MEMLYZE_MODE=got: the LD_PRELOAD-free path, started from the constructor
 * of the injectable library when it is preloaded for tests. */
extern const int mlz__preload_build __attribute__((weak));

__attribute__((constructor)) static void got_mode_from_env(void)
{
    const char *m = getenv("MEMLYZE_MODE");
    if (&mlz__preload_build || !m || strcmp(m, "got")) return;
    mlz__config_from_env();
    if (mlz__exec_choose_spool(0)) return;     /* a descendant not to follow */
    const char *in = getenv("MEMLYZE_INLINE");
    inline_wanted = !in || strcmp(in, "0") != 0;
    if (got_attach()) {
        static const char msg[] = "memlyze: cannot start in GOT mode; allocations pass through untracked\n";
        if (write(2, msg, sizeof msg - 1)) {}
    }
}

__attribute__((destructor)) static void got_mode_exit(void)
{
    if (atomic_load(&mlz__attached)) {
        /* Process exit: the report again, now with every module loaded
         * during the run; then seal the spool (the slots can stay). */
        if (mlz__g.coverage) report_coverage();
        atomic_store(&mlz__g.active_alloc, 0);
        atomic_store(&mlz__g.active_free, 0);
        mlz__drain_stop();
    }
}
