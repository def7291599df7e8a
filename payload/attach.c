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
#include "info.h"
#include "inline_sites.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <link.h>
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

/* The standard names, then the named allocators (hooks_named.c) as they
 * are found: a process keeps its named hooks from one attach to the next. */
_Static_assert(NHOOKS + MLZ_NAMED_HOOKS <= MLZ_GOT_MAX_HOOKS, "gotpatch keeps every hook");
static mlz_got_hook hooks[NHOOKS + MLZ_NAMED_HOOKS] = {
    { .name = "malloc", .hook = (void *)mlz_hook_malloc },
    { .name = "free", .hook = (void *)mlz_hook_free },
    { .name = "calloc", .hook = (void *)mlz_hook_calloc },
    { .name = "realloc", .hook = (void *)mlz_hook_realloc },
    { .name = "posix_memalign", .hook = (void *)mlz_hook_posix_memalign },
    { .name = "aligned_alloc", .hook = (void *)mlz_hook_aligned_alloc },
    { .name = "memalign", .hook = (void *)mlz_hook_memalign },
    { .name = "valloc", .hook = (void *)mlz_hook_valloc },
    { .name = "pvalloc", .hook = (void *)mlz_hook_pvalloc },
    { .name = "reallocarray", .hook = (void *)mlz_hook_reallocarray },
    { .name = "dlopen", .hook = (void *)hook_dlopen },
    { .name = "dlclose", .hook = (void *)hook_dlclose },
};
static char named_names[MLZ_NAMED_HOOKS][MEMLYZE_HOOK_NAME_MAX];
static int named_kind[MLZ_NAMED_HOOKS];
static const char *missing_hook;              /* the --hook symbol an attach did not find */
static size_t nnamed;

static int got_ready;                 /* mlz_got_init done */
static size_t ninit;                  /* named hooks at the last mlz_got_init */
/* Inline hooks for allocators the GOT never sees (gotpatch/inline_alloc.c):
 * only where no other thread can be inside the bytes being replaced -
 * MEMLYZE_MODE=got starts from a constructor before main - or when the
 * caller says it has stopped and checked every thread ("inline=1"). */
static int inline_wanted;
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
        int fresh = mlz__dlopen_loads_new(real, (int (*)(void *))hooks[H_DLCLOSE].real, file);
        void *h = mlz_got_dlopen(file, mode, caller);
        if (h && fresh) mlz_modtab_lock_seen();
        /* The new code may allocate at once: let the unwinder know it.
         * Unless a detach came while the real dlopen ran (its table is
         * gone: a refresh would map a new one nobody frees). */
        if (h && atomic_load(&mlz__attached)) mlz_modtab_refresh();
        return h;
    }
    char path[PATH_MAX];
    if (file && mlz_got_dlopen_path(file, caller, path, sizeof path) == 1) return real(path, mode);
    return real(file, mode);
}

static int hook_dlclose(void *handle)
{
    if (atomic_load(&mlz__attached)) return mlz__dlclose_between(mlz_got_dlclose, handle);
    return ((int (*)(void *))hooks[H_DLCLOSE].real)(handle);
}

/* A named allocator: slot nnamed, or the slot it already has (a later
 * attach naming it again may give its address). -ENOSPC when full. */
static int add_named(const char *name, size_t len, int kind, uintptr_t fn, size_t size, unsigned flags)
{
    if (len == 0 || len >= sizeof named_names[0]) return -EINVAL;
    for (size_t k = 0; k < nnamed; k++)
        if (strlen(named_names[k]) == len && !memcmp(named_names[k], name, len)) {
            /* Its hook (and an inline hook's relay to it) was made for the
             * first kind, and stays for the process's life. */
            if (kind != named_kind[k]) return -EEXIST;
            mlz_got_hook *h = &hooks[NHOOKS + k];
            if (fn) h->fn = fn, h->fn_size = size;
            h->flags |= flags;
            return 0;
        }
    if (nnamed == MLZ_NAMED_HOOKS) return -ENOSPC;
    memcpy(named_names[nnamed], name, len);
    named_names[nnamed][len] = 0;
    named_kind[nnamed] = kind;
    hooks[NHOOKS + nnamed] = (mlz_got_hook){ .name = named_names[nnamed], .hook = mlz__named_hook((int)nnamed, kind),
                                             .fn = fn, .fn_size = size, .flags = flags };
    nnamed++;
    return 0;
}

static uint64_t parse_hex(const char *s, size_t n, int *bad)
{
    uint64_t v = 0;
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s += 2, n -= 2;
    if (!n || n > 16) *bad = 1;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) *bad = 1;
        v = v << 4 | (uint64_t)(d < 0 ? 0 : d);
    }
    return v;
}

/* The main executable's load address (its addresses in a spec are link-time
 * ones: "exe+VALUE"). */
static int exe_base_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    *(uintptr_t *)arg = info->dlpi_addr;
    return 1;
}

/* One --hook: "KIND:NAME", "KIND:NAME:ADDR:SIZE" (ADDR absolute, hex) or
 * "KIND:NAME:exe+VALUE:SIZE" (VALUE the executable's symbol value). */
static int add_hook_spec(const char *v, size_t vlen)
{
    const char *c1 = memchr(v, ':', vlen);
    if (!c1) return -EINVAL;
    int kind = mlz__kind_of(v, (size_t)(c1 - v));
    if (kind >= MLZ_KIND_NEW) kind = -1;   /* families.c's own kinds: not a --hook's */
    const char *name = c1 + 1, *end = v + vlen, *c2 = memchr(name, ':', (size_t)(end - name));
    size_t nlen = (size_t)((c2 ? c2 : end) - name);
    uintptr_t fn = 0;
    size_t size = 0;
    int bad = kind < 0;
    if (c2) {
        const char *a = c2 + 1, *c3 = memchr(a, ':', (size_t)(end - a));
        if (!c3) return -EINVAL;
        if ((size_t)(c3 - a) > 4 && !memcmp(a, "exe+", 4)) {
            uintptr_t base = 0;
            dl_iterate_phdr(exe_base_cb, &base);
            fn = base + parse_hex(a + 4, (size_t)(c3 - a) - 4, &bad);
        } else {
            fn = parse_hex(a, (size_t)(c3 - a), &bad);
        }
        size = parse_hex(c3 + 1, (size_t)(end - c3 - 1), &bad);
        bad |= !fn;
    }
    if (bad) return -EINVAL;
    return add_named(name, nlen, kind, fn, size, MLZ_GOT_HOOK_INLINE);
}

/* Whether the process's definition of name is in the module at base. */
static int defined_in(const char *name, const void *base)
{
    Dl_info ai;
    void *a = dlsym(RTLD_DEFAULT, name);
    return a && dladdr(a, &ai) && ai.dli_fbase == base;
}

/* The prefixed families present in the process. When the family is the
 * process's allocator (its module defines malloc), an entry point that is
 * not an alias of the standard function of its kind is its inside (mimalloc's
 * malloc calling mi_malloc): its calls arrive through that function already. */
static void add_families(void)
{
    Dl_info mi;
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    int have_m = m && dladdr(m, &mi);
    for (const mlz_got_family_fn *f = mlz_got_family_fns; f->name; f++) {
        void *a = dlsym(RTLD_DEFAULT, f->name);
        Dl_info ai;
        if (!a || !dladdr(a, &ai)) continue;
        if (have_m && ai.dli_fbase == mi.dli_fbase && a != dlsym(RTLD_DEFAULT, f->kind)) continue;
        add_named(f->name, strlen(f->name), mlz__kind_of(f->kind, strlen(f->kind)), 0, 0, MLZ_GOT_HOOK_ALLOC);
    }
    Dl_info li;   /* libc's own module, by a function only it defines */
    if (!have_m || !dladdr((void *)gnu_get_libc_version, &li) || li.dli_fbase == mi.dli_fbase) return;
    /* C++'s operators the allocator replaced, and with them libstdc++'s
     * __cxa_begin_catch (the end of a bad_alloc thrown through a new hook:
     * hooks_named.c), which comes first: without it they are not hooked. */
    int cxx = 0;
    for (const mlz_got_family_fn *f = mlz_got_cxx_fns; f->name && !cxx; f++) cxx = defined_in(f->name, mi.dli_fbase);
    if (!cxx || add_named("__cxa_begin_catch", strlen("__cxa_begin_catch"), MLZ_KIND_CATCH, 0, 0,
                          MLZ_GOT_HOOK_ALLOC))
        return;
    for (const mlz_got_family_fn *f = mlz_got_cxx_fns; f->name; f++)
        if (defined_in(f->name, mi.dli_fbase))
            add_named(f->name, strlen(f->name), mlz__kind_of(f->kind, strlen(f->kind)), 0, 0, MLZ_GOT_HOOK_ALLOC);
}

/* "rate=524288;spool=/path;unwind=fp;seed=7;map_log2=22;hook=malloc:my_alloc"; unknown
 * keys are ignored so older payloads accept newer injectors' strings. */
static int parse_config(const char *cfg)
{
    mlz__g.drain_nice_set = 0;   /* each attach says it again, or the drain inherits */
    mlz__g.map_log2 = 0;         /* likewise --max-live */
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
            } else if (klen == 4 && !memcmp(cfg, "nice", 4)) {
                /* The injector raised the borrowed thread's priority while it
                 * lends it: the drain thread it creates must not inherit that. */
                int neg = vlen > 0 && v[0] == '-', n = 0;
                for (size_t i = (size_t)neg; i < vlen && i < 4; i++) {
                    if (v[i] < '0' || v[i] > '9') return -EINVAL;
                    n = n * 10 + (v[i] - '0');
                }
                if (n > 20) return -EINVAL;
                mlz__g.drain_nice = neg ? -n : n;
                mlz__g.drain_nice_set = 1;
            } else if (klen == 8 && !memcmp(cfg, "coverage", 8)) {
                mlz__g.coverage = vlen == 1 && v[0] == '1';
            } else if (klen == 4 && !memcmp(cfg, "hook", 4)) {
                int e = add_hook_spec(v, vlen);
                if (e) return e;
            } else if (klen == 8 && !memcmp(cfg, "map_log2", 8)) {
                unsigned l = 0;
                for (size_t i = 0; i < vlen && i < 3; i++) {
                    if (v[i] < '0' || v[i] > '9') return -EINVAL;
                    l = l * 10 + (unsigned)(v[i] - '0');
                }
                if (l < MEMLYZE_MAP_LOG2_MIN || l > MEMLYZE_MAP_LOG2_MAX) return -EINVAL;
                mlz__g.map_log2 = l;
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

static int detach(void);

static int got_attach(void)
{
    if (atomic_load(&mlz__attached)) return -EALREADY;
    /* Resolved again when the named hooks grew since the last attach
     * (after a detach no slot is patched). */
    add_families();
    mlz__named_bind(&hooks[NHOOKS]);
    if ((!got_ready || nnamed != ninit) && mlz_got_init(hooks, NHOOKS + nnamed)) return -ENOSYS;
    ninit = nnamed;
    if (!got_ready) {
        /* A child forked while attached must not write into the parent's
         * spool: control.c's handler disables it (or, with follow-fork,
         * gives it its own). Registered once: handlers cannot be removed. */
        pthread_atfork(mlz_modtab_fork_prepare, mlz_modtab_fork_parent, mlz__atfork_child);
        got_ready = 1;
    }
    if (inline_wanted) mlz_got_inline_prepare();   /* hooks[i].real becomes the trampoline */
    for (size_t k = 0; k < nnamed; k++)   /* a --hook symbol the process lacks (a family may come and go) */
        if (!hooks[NHOOKS + k].real && (hooks[NHOOKS + k].flags & MLZ_GOT_HOOK_INLINE)) {
            missing_hook = named_names[k];
            return -ESRCH;
        }
    mlz_real_fns r = {
        hooks[H_MALLOC].real, hooks[H_FREE].real, hooks[H_CALLOC].real, hooks[H_REALLOC].real,
        hooks[H_POSIX_MEMALIGN].real, hooks[H_ALIGNED_ALLOC].real, hooks[H_MEMALIGN].real,
        hooks[H_VALLOC].real, hooks[H_PVALLOC].real,
    };
    if (!r.malloc || !r.free || !r.calloc || !r.realloc) return -ENOENT;
    mlz__g.real = r;
    int started = mlz__start();
    if (started) return started == -2 ? -EAGAIN : -EIO;
    atomic_store(&mlz__attached, 1);
    if (inline_wanted && !inline_remote) mlz_got_inline_install();   /* before the GOT: its slots to these are left alone */
    int n = mlz_got_patch_all();
    if (n < 0) {
        /* Undone whole: the slots written so far, the drain, the memory.
         * Not through memlyze_detach, which this call's own entry_busy
         * would refuse. */
        detach();
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
/* Why the last detach left GOT slots hooked (memlyze_strerror's -EPERM). */
static int unpatch_err, unpatch_errno;

MLZ_EXPORT int memlyze_attach(const char *config)
{
    if (atomic_exchange(&entry_busy, 1)) return -EINPROGRESS;
    unpatch_err = 0;
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
        mlz__drain_assist();
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
    unpatch_err = mlz_got_unpatch_all(&rep);
    unpatch_errno = unpatch_err == MLZ_GOT_EIO ? mlz_got_maps_errno() : 0;
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
    case -EEXIST: return "a --hook names a function hooked as another KIND by an earlier attach (a process keeps the first)";
    case -ENOSYS: return "cannot find the process's allocation functions";
    case -EIO: return "cannot set up the profiler or open its spool file";
    case -EAGAIN: return "cannot start the profiler's drain thread (out of memory, or the thread limit)";
    case -EPERM:
        if (unpatch_err == MLZ_GOT_EIO && (unpatch_errno == EMFILE || unpatch_errno == ENFILE))
            return "some GOT slots could not be restored: no file descriptor was free to read /proc/self/maps "
                   "(they keep calling the payload, which only forwards)";
        if (unpatch_err == MLZ_GOT_EIO)
            return "some GOT slots could not be restored: /proc/self/maps could not be read "
                   "(they keep calling the payload, which only forwards)";
        return "some GOT slots could not be written or restored";
    case -EBUSY: return "a thread is still inside the profiler; memory kept";
    case -EINPROGRESS: return "an earlier attach or detach is still running in this process; try again in a moment";
    case -ESRCH: return "a function named by --hook is not defined in the process";
    case -ENOSPC: return "too many named allocator hooks (16 at most)";
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

static void got_mode_start(void);

/* errno is the program's (control.c, payload_load). */
__attribute__((constructor)) static void got_mode_from_env(void)
{
    const char *m = getenv("MEMLYZE_MODE");
    if (&mlz__preload_build || !m || strcmp(m, "got")) return;
    int saved = errno;
    got_mode_start();
    errno = saved;
}

static void got_mode_start(void)
{
    mlz__config_from_env();
    if (mlz__exec_choose_spool(0)) return;     /* a descendant not to follow */
    const char *in = getenv("MEMLYZE_INLINE");
    inline_wanted = !in || strcmp(in, "0") != 0;
    /* memlyze run --hook: "KIND:NAME[:ADDR:SIZE],..." */
    for (const char *h = getenv("MEMLYZE_HOOKS"); h && *h;) {
        const char *comma = strchr(h, ',');
        size_t len = comma ? (size_t)(comma - h) : strlen(h);
        if (add_hook_spec(h, len)) {
            static const char msg[] = "memlyze: bad MEMLYZE_HOOKS entry; allocations pass through untracked\n";
            if (write(2, msg, sizeof msg - 1)) {}
            return;
        }
        h = comma ? comma + 1 : h + len;
    }
    int e = got_attach();
    if (e) {
        /* One line, built without the allocator we could not hook. */
        char msg[512], named[MEMLYZE_HOOK_NAME_MAX + 64];
        const char *why = memlyze_strerror(e);
        if (e == -ESRCH && missing_hook) {
            size_t m = strlen(missing_hook);
            memcpy(named, "--hook ", 7);
            memcpy(named + 7, missing_hook, m);
            memcpy(named + 7 + m, ": no function of that name in the process", 42);
            why = named;
        }
        size_t n = 0;
        static const char a[] = "memlyze: cannot start in GOT mode (", b[] = "); allocations pass through untracked\n";
        memcpy(msg, a, sizeof a - 1), n = sizeof a - 1;
        size_t wl = strlen(why) < sizeof msg - n - sizeof b ? strlen(why) : sizeof msg - n - sizeof b;
        memcpy(msg + n, why, wl), n += wl;
        memcpy(msg + n, b, sizeof b - 1), n += sizeof b - 1;
        if (write(2, msg, n)) {}
    }
}

__attribute__((destructor)) static void got_mode_exit(void)
{
    int saved = errno;
    if (atomic_load(&mlz__attached)) {
        /* Process exit: the report again, now with every module loaded
         * during the run; then seal the spool (the slots can stay). */
        if (mlz__g.coverage) report_coverage();
        atomic_store(&mlz__g.active_alloc, 0);
        atomic_store(&mlz__g.active_free, 0);
        mlz__drain_stop();
    }
    errno = saved;
}
