/*
 * resolve.c - find the real definition behind each hooked name.
 *
 * The hooks call the real function through the pointer found here, so it
 * must be the function the loader binds unversioned references to, and it
 * must be an actual definition:
 *  - not `&malloc` as the payload sees it: in a non-PIE executable that
 *    takes the address of malloc, the executable's dynsym carries an
 *    undefined `malloc` with a non-zero value (a "canonical PLT" entry), and
 *    every GLOB_DAT in the process is bound to that PLT stub, which jumps
 *    through the executable's JUMP_SLOT - the slot we patch. dlsym has the
 *    same problem (it accepts that entry), hence memray #685's loop;
 *  - not the payload's own definition when the payload was preloaded and
 *    exports malloc itself.
 * So dlsym(RTLD_DEFAULT) is used only as an oracle telling which module is
 * first in the global scope for the name (a module dlopen'ed RTLD_LOCAL is
 * not in the global scope even though dl_iterate_phdr lists it). If that
 * module really defines the name at that address, that is the real. If not
 * (canonical PLT, the payload, an IFUNC), we continue in load order after
 * that module - the order in which the startup objects form the global
 * scope - reading each module's own dynsym, skipping undefined entries.
 */
#include <dlfcn.h>
#include <string.h>
#include <sys/auxv.h>

#include "got_internal.h"

int mlz__skip_reason(const struct dl_phdr_info *info)
{
    uintptr_t vdso = getauxval(AT_SYSINFO_EHDR), ldso = getauxval(AT_BASE);
    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type != PT_LOAD) continue;
        uintptr_t s = info->dlpi_addr + p->p_vaddr, e = s + p->p_memsz;
        if (vdso && vdso >= s && vdso < e) return 1;
        if (ldso && ldso >= s && ldso < e) return 2;
        if (mlz__got.self_addr && mlz__got.self_addr >= s && mlz__got.self_addr < e) return 3;
    }
    return 0;
}

struct rctx {
    const char *name;
    uintptr_t oracle;       /* dlsym's answer */
    int phase;              /* 0: looking for the oracle's module; 1: taking the next definition */
    int started;            /* the walk is past the oracle's module */
    uintptr_t result;
};

static int rcb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct rctx *c = arg;
    int skip = mlz__skip_reason(info);
    mlz__dyn d;
    if (mlz__dyn_parse(info, &d) != 0) return 0;
    if (c->phase == 0) {
        if (!c->oracle || !mlz__in_module(&d, c->oracle)) return 0;
        c->started = 1;
        if (skip == 0 || skip == 2) {
            const ElfW(Sym) *s = mlz__dyn_lookup_def(&d, c->name);
            if (s && d.base + s->st_value == c->oracle) {
                c->result = c->oracle;
                return 1;
            }
        }
        return 0;
    }
    if (!c->started) {
        if (c->oracle && mlz__in_module(&d, c->oracle)) c->started = 1;
        return 0;
    }
    if (skip == 1 || skip == 3) return 0;
    const ElfW(Sym) *s = mlz__dyn_lookup_def(&d, c->name);
    if (s) {
        c->result = d.base + s->st_value;
        return 1;
    }
    return 0;
}

static uintptr_t resolve_one(const char *name)
{
    struct rctx c = { .name = name };
    c.oracle = (uintptr_t)dlsym(RTLD_DEFAULT, name);
    if (c.oracle) {
        dl_iterate_phdr(rcb, &c);
        if (c.result) return c.result;
    }
    /* Next definition after the oracle's module, or from the start when
     * the oracle found nothing or lies in no module. */
    c.phase = 1;
    c.started = c.oracle == 0 || !c.started;
    c.result = 0;
    if (!c.started) {
        /* phase 0 found the oracle's module: restart the walk and begin after it */
        dl_iterate_phdr(rcb, &c);
    } else {
        c.oracle = 0;
        dl_iterate_phdr(rcb, &c);
    }
    return c.result;
}

struct canon_ctx { int done; };

/* The canonical PLT stubs are in the main executable, first in the list. */
static int canon_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct canon_ctx *c = arg;
    if (c->done++) return 1;
    mlz__dyn d;
    if (mlz__dyn_parse(info, &d) != 0) return 1;
    for (size_t i = 0; i < mlz__got.nhooks; i++) {
        const ElfW(Sym) *s = mlz__dyn_lookup_any(&d, mlz__got.name[i]);
        mlz__got.canon[i] = (s && s->st_shndx == SHN_UNDEF && s->st_value)
                          ? d.base + s->st_value : 0;
    }
    return 1;
}

int mlz__resolve_reals(void)
{
    for (size_t i = 0; i < mlz__got.nhooks; i++) {
        const mlz_got_hook *h = &mlz__got.user_hooks[i];
        mlz__got.real[i] = h->fn ? h->fn : resolve_one(mlz__got.name[i]);
    }
    mlz__got.real_dlopen = (void *(*)(const char *, int))resolve_one("dlopen");
    mlz__got.real_dlmopen = (void *(*)(long, const char *, int))resolve_one("dlmopen");
    mlz__got.real_dlclose = (int (*)(void *))resolve_one("dlclose");
    struct canon_ctx cc = { 0 };
    dl_iterate_phdr(canon_cb, &cc);
    return 0;
}
