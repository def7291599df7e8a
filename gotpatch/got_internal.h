/*
 * got_internal.h - shared-private declarations of the gotpatch files.
 * Grouped by the file that defines them. Everything here has hidden
 * visibility (the build uses -fvisibility=hidden) and the mlz__ prefix.
 */
#ifndef MLZ_GOT_INTERNAL_H
#define MLZ_GOT_INTERNAL_H

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#include "gotpatch.h"

/* ---- arena.c: mmap-backed memory (we must never call malloc) ---------- */

/* Grow an mmap'd array to hold at least `need` elements (mremap may move it:
 * callers hold the patch lock). */
int mlz__vec_reserve(void **p, size_t *cap, size_t elem, size_t need);
/* Copy a string into never-freed mmap'd storage: slot reports keep pointing
 * at module names after the module is gone. */
const char *mlz__strdup_arena(const char *s);

/* ---- procmaps.c: raw /proc/self/maps reader --------------------------- */

typedef struct mlz__range { uintptr_t lo, hi; int prot; } mlz__range;
typedef struct mlz__maps { mlz__range *r; size_t n, cap; int loaded; } mlz__maps;

int mlz__maps_load(mlz__maps *m);              /* 0 or MLZ_GOT_EIO/ENOMEM */
extern int mlz__maps_errno;                    /* open's errno of the last MLZ_GOT_EIO */
int mlz__maps_prot(const mlz__maps *m, uintptr_t addr);   /* PROT_* or -1 */

/* ---- elfdyn.c: one module's dynamic section --------------------------- */

typedef struct mlz__dyn {
    uintptr_t base;             /* load bias (dlpi_addr) */
    uintptr_t lo, hi;           /* extent of the PT_LOAD segments, biased */
    const char *name;           /* dlpi_name */
    const ElfW(Phdr) *phdr;
    size_t phnum;
    const ElfW(Dyn) *dyn;
    const ElfW(Sym) *symtab;
    size_t nsyms;               /* from DT_HASH or DT_GNU_HASH, never guessed */
    const char *strtab;
    size_t strsz;
    const ElfW(Half) *versym;
    const uint32_t *hash, *gnu_hash;
    uintptr_t jmprel; size_t jmprelsz; int pltrel;   /* DT_PLTREL: DT_RELA or DT_REL */
    uintptr_t rela; size_t relasz, relaent, relacount;   /* relacount: leading R_*_RELATIVE entries */
    uintptr_t rel; size_t relsz, relent, relcount;
    const char *soname;
    int symbolic;               /* DT_SYMBOLIC / DF_SYMBOLIC */
} mlz__dyn;

int mlz__dyn_parse(const struct dl_phdr_info *info, mlz__dyn *d);   /* 0 or -1 (no usable PT_DYNAMIC) */
/* Defined function-like symbol `name` (default version preferred); NULL if none. */
const ElfW(Sym) *mlz__dyn_lookup_def(const mlz__dyn *d, const char *name);
/* Any dynsym entry named `name`, defined or not. */
const ElfW(Sym) *mlz__dyn_lookup_any(const mlz__dyn *d, const char *name);
const char *mlz__dyn_symname(const mlz__dyn *d, size_t idx);
int mlz__in_module(const mlz__dyn *d, uintptr_t a);
int mlz__in_exec(const mlz__dyn *d, uintptr_t a);

typedef void (*mlz__reloc_fn)(void *ctx, const mlz__dyn *d, uintptr_t where,
                              uint32_t type, uint32_t sym, int64_t addend);
void mlz__dyn_foreach_reloc(const mlz__dyn *d, mlz__reloc_fn fn, void *ctx);

/* ---- resolve.c: finding the real definitions -------------------------- */

int mlz__resolve_reals(void);   /* fills mlz__got.real[]; called by init */

/* ---- modules.c: dlopen / dlclose --------------------------------------- */

void mlz__init_search_paths(void);

/* ---- patch.c: global state, lock, engine ------------------------------ */

typedef struct mlz__global {
    int initialised;
    size_t nhooks;
    mlz_got_hook *user_hooks;
    const char *name[MLZ_GOT_MAX_HOOKS];
    uintptr_t hook[MLZ_GOT_MAX_HOOKS];
    uintptr_t real[MLZ_GOT_MAX_HOOKS];
    uintptr_t canon[MLZ_GOT_MAX_HOOKS];   /* executable's canonical PLT stub for the name, or 0 */
    /* real[i] carries our inline jump (inline_alloc.c): slots bound to it
     * are left alone, the jump already brings its calls to the hook */
    _Atomic int inlined[MLZ_GOT_MAX_HOOKS];
    uintptr_t self_addr;                  /* inside the payload module; 0: skip nothing */
    unsigned flags;
    /* dlopen & co, resolved whether hooked or not */
    void *(*real_dlopen)(const char *, int);
    void *(*real_dlmopen)(long, const char *, int);
    int (*real_dlclose)(void *);
} mlz__global;

extern mlz__global mlz__got;

int mlz__lock(void);
void mlz__unlock(void);
int mlz__patch_new_locked(void);
int mlz__forget_unloaded_locked(void);
/* Module table queries for the blind-spot report (lock held). */
int mlz__module_counts(uintptr_t base, const ElfW(Phdr) *phdr, uint32_t *patched, uint32_t *left);
/* Module skip reason for a dl_iterate_phdr entry: 0 = patchable. */
int mlz__skip_reason(const struct dl_phdr_info *info);
int mlz__is_alloc_name(const char *name);

/* ---- blindspot.c ------------------------------------------------------- */

/* Address of the last direct call/jmp/jcc rel32 in [s, s+len) whose target
 * is one of t[0..nt) (raw byte filter, not instruction-aligned), or 0. */
uintptr_t mlz__last_rel32_to(uintptr_t s, size_t len, const uintptr_t *t, size_t nt);

/* ---- inline_alloc.c ---------------------------------------------------- */

/* The inline-hook lines of the coverage report (snprintf semantics). */
int mlz__format_inline(char *buf, size_t len);

#endif
