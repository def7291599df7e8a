/*
 * inline_alloc.c - which allocators get an inline hook, and their table.
 *
 * GOT patching sees every call made through a slot. An allocator defined in
 * the executable (its own malloc, jemalloc linked in statically) or in a
 * library that calls it directly (-Bsymbolic) is also called without one:
 * those calls reach the hook only if the function itself jumps to it.
 * Candidates are the hooked allocation names whose global definition
 * (mlz__got.real, resolve.c) is
 *  - in the main executable, or
 *  - in another module that has a direct call/jmp rel32 to it,
 * never in libc.so.6 or ld.so: glibc's own callers go through its GOT
 * (gotpatch/NOTES.md), and its internal direct calls are the allocator's own.
 * The same rule covers other allocators' entry points the caller flags
 * (MLZ_GOT_HOOK_ALLOC: je_malloc, tc_free...); a function asked for by name
 * (MLZ_GOT_HOOK_INLINE, --hook) is hooked wherever it is.
 * With the jump in place, GOT slots bound to the function are left alone
 * (patch.c, MLZ_GOT_LEFT_INLINE): each call passes the hook once.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "got_internal.h"
#include "inline.h"

static mlz_inline inl[MLZ_GOT_MAX_HOOKS];
static const char *inl_module[MLZ_GOT_MAX_HOOKS];
static uint8_t tried[MLZ_GOT_MAX_HOOKS];     /* 1: candidate examined (prepared or refused) */
static uint8_t examined[MLZ_GOT_MAX_HOOKS];  /* 1: looked at once; not again at later attaches */
static uint8_t alias_of[MLZ_GOT_MAX_HOOKS];  /* k + 1: the same function, hooked as k */

struct find { uintptr_t addr; const char *name; int index; uintptr_t size; const char *module; int candidate; };

static int is_libc(const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    return strncmp(b, "libc.so", 7) == 0 || strncmp(b, "libc-", 5) == 0;
}

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find *f = arg;
    int main_exe = f->index++ == 0;
    mlz__dyn d;
    if (mlz__dyn_parse(info, &d) != 0 || !mlz__in_module(&d, f->addr)) return 0;
    const char *path = info->dlpi_name ? info->dlpi_name : "";
    f->module = mlz__strdup_arena(main_exe ? "" : path);   /* interned: once per path */
    if (mlz__skip_reason(info) || is_libc(path)) return 1;
    const ElfW(Sym) *s = mlz__dyn_lookup_def(&d, f->name);
    if (!s || d.base + s->st_value != f->addr) return 1;
    f->size = s->st_size;
    f->candidate = main_exe;
    for (size_t i = 0; i < d.phnum && !f->candidate; i++) {
        const ElfW(Phdr) *ph = &d.phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || !(ph->p_flags & PF_R)) continue;
        f->candidate = mlz__last_rel32_to(d.base + ph->p_vaddr, ph->p_memsz, &f->addr, 1) != 0;
    }
    return 1;
}

/* Whether hook i is a candidate, with its size and module in *f. */
static int candidate(size_t i, uintptr_t real, struct find *f)
{
    const mlz_got_hook *h = &mlz__got.user_hooks[i];
    int named = (h->flags & MLZ_GOT_HOOK_INLINE) != 0;   /* asked for by name: wherever it is */
    if (!named && !mlz__is_alloc_name(mlz__got.name[i]) && !(h->flags & MLZ_GOT_HOOK_ALLOC)) return 0;
    *f = (struct find){ .addr = real, .name = mlz__got.name[i] };
    dl_iterate_phdr(find_cb, f);
    if (h->fn_size || named) f->size = h->fn_size;
    return named || f->candidate;
}

int mlz_got_inline_prepare(void)
{
    if (!__atomic_load_n(&mlz__got.initialised, __ATOMIC_ACQUIRE)) return MLZ_GOT_ESTATE;
    int n = 0;
    for (size_t i = 0; i < mlz__got.nhooks; i++) {
        uintptr_t real = mlz__got.real[i];
        if (alias_of[i]) continue;
        if (tried[i]) {   /* examined at an earlier attach: the same trampoline */
            if (inl[i].state) mlz__got.user_hooks[i].real = inl[i].trampoline, n++;
            continue;
        }
        /* Looked at once per process, as the hooks are: a later attach
         * must not redo the work (nor take arena memory for it again). */
        if (!real || examined[i]) continue;
        examined[i] = 1;
        /* an alias already hooked under another name (malloc == je_malloc) */
        int dup = 0;
        for (size_t k = 0; k < mlz__got.nhooks && !dup; k++)
            if (k != i && tried[k] && inl[k].fn == real) dup = 1, alias_of[i] = (uint8_t)(k + 1);
        if (dup) continue;
        struct find f;
        if (!candidate(i, real, &f)) continue;
        tried[i] = 1;
        inl_module[i] = f.module;
        if (mlz_inline_prepare((void *)real, f.size, (void *)mlz__got.hook[i], &inl[i]) == 0) {
            mlz__got.user_hooks[i].real = inl[i].trampoline;
            n++;
        } else {
            inl[i].fn = real;
        }
    }
    /* An alias calls the original through the same trampoline: through the
     * function itself it would meet our jump and be counted twice. */
    for (size_t i = 0; i < mlz__got.nhooks; i++)
        if (alias_of[i] && inl[alias_of[i] - 1].state)
            mlz__got.user_hooks[i].real = inl[alias_of[i] - 1].trampoline;
    return n;
}

/* Slots of a name are left alone while its function carries our jump,
 * also when the jump was prepared under an alias (tc_malloc == malloc). */
static void mark_inlined(void)
{
    for (size_t i = 0; i < mlz__got.nhooks; i++) {
        size_t k = alias_of[i] ? alias_of[i] - 1u : i;
        atomic_store(&mlz__got.inlined[i], inl[k].state == MLZ_INLINE_INSTALLED);
    }
}

int mlz_got_inline_install(void)
{
    int n = 0;
    for (size_t i = 0; i < mlz__got.nhooks; i++) {
        if (inl[i].state == MLZ_INLINE_PREPARED) mlz_inline_install(&inl[i]);
        if (inl[i].state == MLZ_INLINE_INSTALLED) n++;
    }
    mark_inlined();
    return n;
}

int mlz_got_inline_remove(size_t *left)
{
    int n = 0;
    if (left) *left = 0;
    for (size_t i = 0; i < mlz__got.nhooks; i++) {
        if (inl[i].state == MLZ_INLINE_PREPARED &&
            memcmp((const void *)inl[i].at, inl[i].jmp, inl[i].jmp_len) == 0)
            inl[i].state = MLZ_INLINE_INSTALLED;   /* written by an injector (inline_sites.h) */
        if (inl[i].state != MLZ_INLINE_INSTALLED) continue;
        int rc = mlz_inline_remove(&inl[i]);
        if (rc == 0) n++;
        else if (left) (*left)++;
    }
    mark_inlined();
    return n;
}

size_t mlz_got_inline_list(mlz_got_inline_info *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < mlz__got.nhooks; i++) {
        if (!tried[i]) continue;
        if (n < cap) {
            const mlz_inline *h = &inl[i];
            int ok = h->state != 0;
            out[n] = (mlz_got_inline_info){
                .name = mlz__got.name[i], .module = inl_module[i] ? inl_module[i] : "",
                .fn = h->fn, .at = h->at, .trampoline = ok ? (uintptr_t)h->trampoline : 0,
                .len = h->len, .rip_fixups = h->rip_fixups, .branch_fixups = h->branch_fixups,
                .installed = h->state == MLZ_INLINE_INSTALLED, .why = ok ? "" : h->why,
                .jmp_len = h->jmp_len,
            };
            memcpy(out[n].orig, h->orig, sizeof out[n].orig);
            memcpy(out[n].jmp, h->jmp, sizeof out[n].jmp);
        }
        n++;
    }
    return n;
}

int mlz__format_inline(char *buf, size_t len)
{
    size_t pos = 0;
    mlz_got_inline_info v[MLZ_GOT_MAX_HOOKS];
    size_t n = mlz_got_inline_list(v, MLZ_GOT_MAX_HOOKS);
    for (size_t i = 0; i < n; i++) {
        const mlz_got_inline_info *h = &v[i];
        const char *mod = h->module[0] ? h->module : "(main executable)";
        char *b = pos < len ? buf + pos : NULL;
        size_t room = pos < len ? len - pos : 0;
        int k;
        if (h->trampoline)
            k = snprintf(b, room, "inline hook %s at %#lx in %s: %u bytes moved to %#lx (%u RIP-relative, %u branch fix-ups), %s\n",
                         h->name, (unsigned long)h->at, mod, h->len, (unsigned long)h->trampoline,
                         h->rip_fixups, h->branch_fixups, h->installed ? "installed" : "not installed");
        else
            k = snprintf(b, room, "inline hook %s at %#lx in %s: refused: %s\n", h->name, (unsigned long)h->fn, mod, h->why);
        if (k > 0) pos += (size_t)k;
    }
    return (int)pos;
}
