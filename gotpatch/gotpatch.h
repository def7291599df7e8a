/*
 * gotpatch.h - reversible runtime GOT patching of every loaded module.
 *
 * memlyze attaches to running processes, where there is no LD_PRELOAD: the
 * injected payload reroutes the allocation functions by rewriting the slots
 * the dynamic loader filled for them (R_X86_64_JUMP_SLOT, R_X86_64_GLOB_DAT
 * and absolute R_X86_64_64 data words) in every loaded module, and puts the
 * original values back on detach. This library does the walking, patching,
 * bookkeeping and restoring; the payload owns the hook functions.
 *
 * Contract with the caller (the payload, in the target process):
 *  - Nothing here calls malloc/free/calloc/realloc or stdio. Tables live in
 *    mmap'd memory, reports go to caller-provided memory.
 *  - Patching entry points serialise on one internal lock. Allocation hooks
 *    never need it: mlz_got_hook_index() and the `real` pointers are
 *    lock-free reads of data written once by mlz_got_init(). The lock is never
 *    held across a call into the real dlopen/dlclose (whose constructors and
 *    destructors may themselves call dlopen).
 *  - Every slot write is one aligned 8-byte atomic store (compare-and-swap),
 *    so a thread calling through the slot sees the old or the new pointer.
 *  - Linux x86_64, glibc (tested on 2.36). Not async-signal-safe.
 *
 * Return codes: >= 0 success (a count where documented), < 0 an MLZ_GOT_E*.
 */
#ifndef MLZ_GOTPATCH_H
#define MLZ_GOTPATCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef MLZ_EXPORT
#define MLZ_EXPORT __attribute__((visibility("default")))
#endif

enum {
    MLZ_GOT_OK = 0,
    MLZ_GOT_EINVAL = -1,       /* bad argument (NULL, too many hooks, name too long) */
    MLZ_GOT_ENOMEM = -2,       /* mmap failed */
    MLZ_GOT_ESTATE = -3,       /* not initialised, or init called twice */
    MLZ_GOT_EBUSY = -4,        /* re-entered from the thread already patching */
    MLZ_GOT_EPROT = -5,        /* some slot could not be made writable */
    MLZ_GOT_ENOCAPSTONE = -6,  /* libcapstone could not be loaded */
    MLZ_GOT_EIO = -7,          /* /proc/self/maps unreadable */
};

/* Most hooks the library keeps: memlyze uses 12 and up to 48 named ones. */
#define MLZ_GOT_MAX_HOOKS 64

/*
 * One function to reroute. `name` and `hook` are set by the caller; `real` is
 * filled by mlz_got_init() with the definition the process's global symbol
 * lookup would bind to, read from the defining module's own dynamic symbol
 * table. It is never `&malloc` as seen from the payload: in a non-PIE
 * executable that is the executable's PLT stub, which jumps through the very
 * slot we patch and would loop back into the hook. NULL if nothing defines it.
 */
typedef struct mlz_got_hook {
    const char *name;
    void *hook;
    void *real;
    /* Optional: the definition itself (a symbol the dynamic symbol tables
     * do not export, found by the caller in a .symtab), 0 to resolve name. */
    uintptr_t fn;
    size_t fn_size;               /* its size, 0 if unknown */
    unsigned flags;               /* MLZ_GOT_HOOK_* */
} mlz_got_hook;

/* An allocator other than the standard names (je_malloc, tc_free...): an
 * inline hook is prepared under the same rule as for malloc. */
#define MLZ_GOT_HOOK_ALLOC  1u
/* Asked for by name (--hook): an inline hook wherever it is defined. */
#define MLZ_GOT_HOOK_INLINE 2u

/* Relocation kinds of a slot. */
enum { MLZ_GOT_JUMP_SLOT, MLZ_GOT_GLOB_DAT, MLZ_GOT_ABS64, MLZ_GOT_NKINDS };

/*
 * Slot states. PATCHED slots hold the hook; the others were left alone for
 * the reason named, because the hook only knows one real function per name.
 */
enum {
    MLZ_GOT_SLOT_PATCHED,
    MLZ_GOT_LEFT_OTHER_DEF,   /* bound to another definition (own allocator, DEEPBIND, other namespace, foreign patch) */
    MLZ_GOT_LEFT_CANON_PLT,   /* bound to the executable's canonical PLT stub (non-PIE &malloc); calls still reach the
                                 executable's own slot, which is patched, so nothing is missed */
    MLZ_GOT_LEFT_ADDEND,      /* R_X86_64_64 with a non-zero addend: not a pointer to the function */
    MLZ_GOT_LEFT_MISALIGNED,  /* not 8-byte aligned: no atomic store possible */
    MLZ_GOT_LEFT_PROT,        /* mprotect refused to make the page writable */
    MLZ_GOT_LEFT_INLINE,      /* bound to a function that carries our inline hook: its calls reach the hook already */
    MLZ_GOT_NSTATES
};

/* One entry of the slot table (see mlz_got_slots()). */
typedef struct mlz_got_slot {
    void **addr;          /* the slot */
    void *orig;           /* value before patching (what unpatch restores) */
    void *cur;            /* value when the entry was produced */
    const char *name;     /* hooked symbol name */
    const char *module;   /* module path ("" is the main executable); valid for the process lifetime */
    uint8_t kind;         /* MLZ_GOT_JUMP_SLOT ... */
    uint8_t state;        /* MLZ_GOT_SLOT_PATCHED or MLZ_GOT_LEFT_* */
    uint8_t hook_index;   /* index into the hooks given to mlz_got_init() */
} mlz_got_slot;

typedef struct mlz_got_options {
    /* An address inside the module that must never be patched (the payload,
     * whose own calls must reach the real functions). NULL: the module that
     * contains this library's code. */
    const void *self;
    unsigned flags;
} mlz_got_options;

/* Patch the module containing gotpatch too (tests link gotpatch into the very
 * executable they patch; the hooks must then call only through `real`). */
#define MLZ_GOT_PATCH_SELF 1u

typedef struct mlz_got_stats {
    uint32_t modules_scanned;   /* modules in the table whose relocations were walked */
    uint32_t modules_patched;   /* of those, with at least one patched slot */
    uint32_t modules_skipped;   /* ld.so, the vDSO, the payload */
    uint32_t modules_pending;   /* seen before the loader finished relocating them; retried */
    uint32_t slots_patched[MLZ_GOT_NKINDS];
    uint32_t slots_left[MLZ_GOT_NSTATES];   /* index MLZ_GOT_LEFT_*; [0] unused */
    uint64_t patch_passes;      /* module walks done (patch_all + patch_new_modules that found work) */
} mlz_got_stats;

typedef struct mlz_got_unpatch_report {
    size_t restored;            /* slots put back to their original value */
    size_t left;                /* slots that no longer held our hook: left as found */
    size_t gone;                /* slots of modules unloaded behind our back: nothing to restore */
    size_t failed;              /* slots whose page could not be made writable (still hooked) */
    mlz_got_slot *left_slots;   /* caller-provided, may be NULL: the first left_cap slots left alone */
    size_t left_cap;
} mlz_got_unpatch_report;

/*
 * Resolve each hook's `real` (see mlz_got_hook) and remember the hooks and the
 * module to skip. `hooks` must stay valid until mlz_got_unpatch_all() and the
 * hooks stop running. Call once, before any patching. Names are matched
 * exactly against relocation symbol names (no version). dlopen, dlmopen and
 * dlclose are resolved internally as well, whether hooked or not.
 */
MLZ_EXPORT int mlz_got_init(mlz_got_hook *hooks, size_t nhooks);
MLZ_EXPORT int mlz_got_init_ex(mlz_got_hook *hooks, size_t nhooks, const mlz_got_options *opt);

/*
 * Walk every loaded module (all namespaces, via dl_iterate_phdr) except
 * ld.so, the vDSO and the payload, and patch every JUMP_SLOT, GLOB_DAT and
 * addend-0 R_X86_64_64 slot whose symbol is a hooked name and whose value is
 * the real definition (or, for a JUMP_SLOT not yet bound, the module's own
 * lazy PLT stub). Every slot, patched or left alone, is recorded with its
 * original value. Idempotent: slots already in the table are not touched
 * again. Returns the number of slots patched by this call.
 */
MLZ_EXPORT int mlz_got_patch_all(void);

/*
 * Cheap when nothing changed (one dl_iterate_phdr callback comparing the
 * loader's dlpi_adds/dlpi_subs counters). Otherwise patches modules not in the
 * table and forgets the slots of modules that were unloaded.
 */
MLZ_EXPORT int mlz_got_patch_new_modules(void);

/*
 * Restore every patched slot of every still-loaded module, but only if it
 * still holds our hook (compare-and-swap); report the others. Empties the
 * table: a later mlz_got_patch_all() starts afresh. `r` may be NULL.
 */
MLZ_EXPORT int mlz_got_unpatch_all(mlz_got_unpatch_report *r);

/*
 * The payload's dlopen hook calls this with its own return address
 * (__builtin_return_address(0)) as caller_ret_addr. It calls the real dlopen
 * so that the library is searched for exactly as the real caller would see
 * it (see modules.c for how), then patches the new library and its
 * dependencies before returning, so none of their code runs unpatched after
 * dlopen returns. errno and dlerror() are those of the real call.
 */
MLZ_EXPORT void *mlz_got_dlopen(const char *file, int mode, void *caller_ret_addr);

/* The real dlclose, then forget the slots of every module it unloaded. */
MLZ_EXPORT int mlz_got_dlclose(void *handle);

/*
 * What mlz_got_dlopen() passes to the real dlopen for `file` called from
 * `caller_ret_addr`: writes the absolute path or expanded name to out and
 * returns 1 if the name is rewritten, 0 if `file` is passed unchanged.
 */
MLZ_EXPORT int mlz_got_dlopen_path(const char *file, void *caller_ret_addr, char *out, size_t len);

/* Index of the hook whose `hook` is addr, or -1. Lock-free. */
MLZ_EXPORT int mlz_got_hook_index(const void *addr);

/* The real function for a hooked name, or NULL. Lock-free. */
MLZ_EXPORT void *mlz_got_real(const char *name);

/*
 * Copy up to cap slot table entries to out (patched and left alone, in
 * module order). Returns the number of entries in the table.
 */
MLZ_EXPORT size_t mlz_got_slots(mlz_got_slot *out, size_t cap);

MLZ_EXPORT void mlz_got_get_stats(mlz_got_stats *out);

MLZ_EXPORT const char *mlz_got_strerror(int err);
/* The errno with which /proc/self/maps last failed to open (MLZ_GOT_EIO). */
MLZ_EXPORT int mlz_got_maps_errno(void);
MLZ_EXPORT const char *mlz_got_kind_name(int kind);
MLZ_EXPORT const char *mlz_got_state_name(int state);

/* ---- blind-spot report ------------------------------------------------ */

#define MLZ_GOT_REPORT_SITES 4

enum {
    MLZ_GOT_MOD_SKIPPED = 1u,    /* ld.so, vDSO or payload: never patched */
    MLZ_GOT_MOD_OWN_ALLOC = 2u,  /* defines allocation function names itself */
    MLZ_GOT_MOD_PROVIDER = 4u,   /* provides the real allocation functions (its direct calls are the allocator's own) */
    MLZ_GOT_MOD_NOTSCANNED = 8u, /* executable segments not scanned (vDSO) */
};

typedef struct mlz_got_module_report {
    const char *path;                     /* "" is the main executable; valid for the process lifetime */
    uintptr_t base;
    uint32_t flags;                       /* MLZ_GOT_MOD_* */
    uint64_t own_alloc_mask;              /* bit i: defines the allocation function hooks[i].name */
    uint32_t slots_patched[MLZ_GOT_NKINDS];
    uint32_t slots_left;                  /* left alone (any reason) */
    uint32_t direct_sites;                /* call/jmp/jcc rel32 to an allocation function: invisible to GOT hooks */
    uint32_t nsites;                      /* entries filled below */
    uintptr_t sites[MLZ_GOT_REPORT_SITES];
    uint8_t site_hook[MLZ_GOT_REPORT_SITES];  /* hook index the site calls */
    uint64_t bytes_scanned;
} mlz_got_module_report;

typedef struct mlz_got_blindspot_report {
    mlz_got_module_report *modules;  /* caller-provided array */
    size_t cap;                      /* its capacity */
    size_t n;                        /* modules found (only min(n, cap) filled) */
    uint64_t bytes_scanned;
} mlz_got_blindspot_report;

/*
 * Scan the executable PT_LOAD segments of every loaded module, from memory,
 * for direct rel32 call/jmp/jcc whose target is a real allocation function or
 * an allocation-named function the module defines itself: those calls never
 * touch a GOT slot. Disassembly (linear sweep) is done by libcapstone, loaded
 * with dlopen for the duration of the scan (so the payload has no link-time
 * dependency on it) and given a private mmap arena through CS_OPT_MEM, so
 * it allocates nothing from the process's allocator. Not for hot paths: it
 * takes milliseconds per MiB of code. Requires mlz_got_init().
 */
MLZ_EXPORT int mlz_got_blindspot_scan(mlz_got_blindspot_report *out);

/* Human-readable table, snprintf semantics (returns the length it needed). */
MLZ_EXPORT int mlz_got_format_report(const mlz_got_blindspot_report *r, char *buf, size_t len);

/* ---- families.c: other allocators' prefixed entry points ---------------- */

/* jemalloc's je_*, tcmalloc's tc_*, mimalloc's mi_* functions whose
 * arguments are those of a standard one (kind: "malloc", "free", "calloc",
 * "realloc", "memalign" or "posix_memalign"), ending with a NULL name. */
typedef struct mlz_got_family_fn { const char *name, *kind; } mlz_got_family_fn;
MLZ_EXPORT extern const mlz_got_family_fn mlz_got_family_fns[];
/* C++'s operator new and delete (kinds "new" and "delete": the size or the
 * pointer first, other arguments passed on), for an allocator that
 * replaces them as well as malloc. */
MLZ_EXPORT extern const mlz_got_family_fn mlz_got_cxx_fns[];

/* ---- inline hooks: allocators the GOT never sees (inline_alloc.c) ------ */

/*
 * After mlz_got_init(): for every allocation name whose real definition is
 * in the main executable, or in another module (not libc, not ld.so) that
 * calls it directly, prepare an inline hook (see inline.h): the entry gets a
 * jump to the hook, and hooks[i].real becomes the trampoline, so the hook
 * calls the original function. Hooks flagged MLZ_GOT_HOOK_ALLOC follow the
 * same rule, MLZ_GOT_HOOK_INLINE ones are prepared wherever they are. Nothing
 * is written yet. Returns how many were prepared; refusals are kept with
 * their reason for the report. Each hook is examined once per process; after
 * a new mlz_got_init the earlier trampolines become hooks[i].real again.
 */
MLZ_EXPORT int mlz_got_inline_prepare(void);

/* Write the prepared jumps. Only while no other thread can be executing the
 * first bytes of those functions (process start, or all threads stopped and
 * checked). GOT slots bound to a hooked function are then left alone
 * (MLZ_GOT_LEFT_INLINE). Returns how many are installed. */
MLZ_EXPORT int mlz_got_inline_install(void);

/* Put the original bytes back where they still hold our jump. Returns how
 * many were restored; *left (may be NULL) counts those left as found. The
 * trampolines stay mapped (hooks keep calling them). */
MLZ_EXPORT int mlz_got_inline_remove(size_t *left);

/* One prepared or refused inline hook, for reports and tools. */
typedef struct mlz_got_inline_info {
    const char *name;        /* hooked name */
    const char *module;      /* "" is the main executable */
    uintptr_t fn, at;        /* function, address of the jump */
    uintptr_t trampoline;    /* 0 if refused */
    uint8_t len, rip_fixups, branch_fixups, installed;
    uint8_t jmp_len;         /* the jump: jmp[0..jmp_len) replaces orig[0..jmp_len) at `at` */
    uint8_t orig[16], jmp[16];
    const char *why;         /* refusal reason, or "" */
} mlz_got_inline_info;

MLZ_EXPORT size_t mlz_got_inline_list(mlz_got_inline_info *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
