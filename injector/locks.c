/*
 * locks.c - the glibc locks an injected call may need, read from outside
 * while every thread of the target is stopped.
 *
 * dlopen takes the loader's locks; the payload's start-up creates a thread
 * and its detach joins one (the thread-stack cache lock); both allocate (an
 * arena lock). A remote call that starts while another thread holds one of
 * these waits for that thread - forever, if the holder waits for the thread
 * we borrowed (a library constructor waiting for the main thread), or if we
 * borrowed the holder itself (a thread stopped inside its own
 * pthread_join). Lists of function names cannot see this (internal and
 * static functions have no names in Debian's libc); the lock words can:
 *
 *   _rtld_global._dl_load_lock, _dl_load_write_lock, _dl_load_tls_lock
 *       recursive pthread mutexes: __lock at +0, the holder's tid at +8,
 *       __kind (PTHREAD_MUTEX_RECURSIVE_NP = 1) at +16;
 *   _rtld_global._dl_stack_cache_lock    an int, 0 when free;
 *   main_arena and the arenas linked from it by `next`: the mutex (an int)
 *       is the first field of struct malloc_state.
 *
 * `_rtld_global` is exported by ld.so (GLIBC_PRIVATE); the offsets inside it
 * change between glibc versions. They come from the separate debug info
 * (Debian's libc6-dbg, found by build id) when it is installed, else from
 * the table below, checked against the live process (the three recursive
 * mutexes must say so in their __kind). main_arena is static: only debug
 * info gives its address; without it, arena locks are judged by unwinding
 * (safepoint.c) as before.
 */
#include "injector.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* glibc builds whose struct rtld_global we know, recognised by its size and
 * checked by the mutex kinds. Tested: Debian 12 (glibc 2.36, x86_64). */
static const struct rtld_layout {
    const char *glibc;
    uint64_t size;
    uint64_t load, write, tls, stack_cache;
} known[] = {
    { "2.36", 4336, 2568, 2608, 2648, 4328 },
};

enum { MUTEX_OWNER = 8, MUTEX_KIND = 16, RECURSIVE_NP = 1 };

/* A symbol's link-time value from a debug file's .symtab (statics too). */
static uint64_t symtab_value(Elf *e, const char *name)
{
    Elf_Scn *scn = NULL;
    GElf_Shdr sh;
    while ((scn = elf_nextscn(e, scn))) {
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB) continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t count = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
        for (size_t i = 0; d && i < count; i++) {
            GElf_Sym s;
            const char *nm;
            if (gelf_getsym(d, (int)i, &s) && s.st_value && (nm = elf_strptr(e, sh.sh_link, s.st_name)) &&
                !strcmp(nm, name))
                return s.st_value;
        }
    }
    return 0;
}

/* Member offsets of struct `type` defined at the top of one CU. */
static int cu_members(Dwarf_Die *cu, const char *type, const char *const *names, uint64_t *offs, int n)
{
    Dwarf_Die die, m;
    int found = 0;
    if (dwarf_child(cu, &die) != 0) return 0;
    do {
        const char *nm;
        if (dwarf_tag(&die) != DW_TAG_structure_type || !(nm = dwarf_diename(&die)) || strcmp(nm, type) ||
            dwarf_hasattr(&die, DW_AT_declaration) || dwarf_child(&die, &m) != 0)
            continue;
        do {
            Dwarf_Attribute a;
            Dwarf_Word w;
            const char *mn = dwarf_diename(&m);
            if (dwarf_tag(&m) != DW_TAG_member || !mn) continue;
            for (int i = 0; i < n; i++)
                if (!strcmp(mn, names[i]) && dwarf_attr(&m, DW_AT_data_member_location, &a) &&
                    dwarf_formudata(&a, &w) == 0) {
                    offs[i] = w;
                    found++;
                }
        } while (dwarf_siblingof(&m, &m) == 0);
        return found;
    } while (dwarf_siblingof(&die, &die) == 0);
    return 0;
}

/* Member offsets of struct `type` from DWARF: in the CU holding code
 * address `hint` (fast: one CU), else in the first CU that defines it. */
static int dwarf_members(Dwarf *dw, uint64_t hint, const char *type, const char *const *names, uint64_t *offs, int n)
{
    Dwarf_Die cu;
    if (hint && dwarf_addrdie(dw, hint, &cu) && cu_members(&cu, type, names, offs, n) == n) return n;
    Dwarf_Off off = 0, next;
    size_t hsize;
    while (dwarf_nextcu(dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
        int f;
        if (dwarf_offdie(dw, off + hsize, &cu) && (f = cu_members(&cu, type, names, offs, n)) > 0) return f;
        off = next;
    }
    return 0;
}

/* Open a debug file for DWARF (and its ELF for .symtab). */
static Dwarf *open_debug(const char *path, int *fd)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return NULL;
    Dwarf *dw = dwarf_begin(*fd, DWARF_C_READ);
    if (!dw) { close(*fd); *fd = -1; }
    return dw;
}

static int from_debug_info(const char *ld_debug, uint64_t rtld, mlz_glibc_locks *L)
{
    static const char *const names[] = { "_dl_load_lock", "_dl_load_write_lock", "_dl_load_tls_lock",
                                         "_dl_stack_cache_lock" };
    uint64_t offs[4] = { 0 };
    int fd;
    Dwarf *dw = open_debug(ld_debug, &fd);
    if (!dw) return -1;
    Elf *e = dwarf_getelf(dw);
    int n = dwarf_members(dw, e ? symtab_value(e, "_dl_start") : 0, "rtld_global", names, offs, 4);
    dwarf_end(dw);
    close(fd);
    if (n != 4) return -1;
    for (int i = 0; i < 3; i++) L->rtld[i] = rtld + offs[i];
    L->stack_cache = rtld + offs[3];
    return 0;
}

static int from_table(uint64_t rtld, uint64_t size, mlz_glibc_locks *L)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const struct rtld_layout *k = &known[i];
        if (k->size != size) continue;
        uint64_t at[3] = { rtld + k->load, rtld + k->write, rtld + k->tls };
        int ok = 1;
        for (int j = 0; j < 3 && ok; j++) {
            int32_t kind;
            ok = mlz__mem_peek(at[j] + MUTEX_KIND, &kind, sizeof kind) == 0 && kind == RECURSIVE_NP;
        }
        if (!ok) continue;
        memcpy(L->rtld, at, sizeof at);
        L->stack_cache = rtld + k->stack_cache;
        snprintf(L->source, sizeof L->source, "built-in layout of glibc %s", k->glibc);
        return 0;
    }
    return -1;
}

/* main_arena from libc's debug info: its .symtab has the static symbol, its
 * DWARF the offset of `next`. */
static void arenas_from_debug(const char *libc_debug, uint64_t bias, mlz_glibc_locks *L)
{
    static const char *const names[] = { "next" };
    uint64_t next = 0;
    int fd;
    Dwarf *dw = open_debug(libc_debug, &fd);
    if (!dw) return;
    Elf *e = dwarf_getelf(dw);
    uint64_t v = e ? symtab_value(e, "main_arena") : 0;
    if (v && dwarf_members(dw, symtab_value(e, "__libc_malloc"), "malloc_state", names, &next, 1) == 1) {
        L->main_arena = v + bias;
        L->arena_next = next;
    }
    dwarf_end(dw);
    close(fd);
}

int mlz__locks_find(pid_t pid, mlz_glibc_locks *L)
{
    static const char *const rtld_name[] = { "_rtld_global" };
    mlz_proc_module ld, libc;
    mlz_proc_sym rtld;
    char ld_debug[512], libc_debug[512];
    memset(L, 0, sizeof *L);
    /* Tests force the fallback (unwinding alone) that unknown glibcs get. */
    const char *force = getenv("MEMLYZE_LOCKS");
    if (force && !strcmp(force, "unwind")) return MLZ_INJ_EELF;
    if (mlz_proc_module_find(pid, mlz_proc_is_ldso, &ld) || mlz_proc_module_load(pid, &ld) ||
        mlz_proc_syms(pid, &ld, rtld_name, &rtld, 1) != 1) {
        mlz__err_clear();
        return MLZ_INJ_EELF;
    }
    mlz_proc_debug_file(&ld, ld_debug, sizeof ld_debug);
    if (mlz__mem_open(pid)) return MLZ_INJ_EIO;
    if (ld_debug[0] && from_debug_info(ld_debug, rtld.addr, L) == 0) snprintf(L->source, sizeof L->source, "debug info");
    else if (from_table(rtld.addr, rtld.size, L)) return MLZ_INJ_EELF;
    if (mlz_proc_module_find(pid, mlz_proc_is_libc, &libc) == 0 && mlz_proc_module_load(pid, &libc) == 0 &&
        mlz_proc_debug_file(&libc, libc_debug, sizeof libc_debug) == 0)
        arenas_from_debug(libc_debug, libc.bias, L);
    mlz__err_clear();
    return 0;
}

static const char *const rtld_what[3] = {
    "the dynamic loader's lock (inside dlopen, dlclose or a library constructor)",
    "the loader's module-list lock (inside dl_iterate_phdr)",
    "the loader's TLS lock (creating a thread or loading a library)",
};

/* A mutex records its owner by the id the target sees (its own PID
 * namespace, in a container): back to ours, for naming and unwinding it. */
static pid_t host_tid(mlz_tgroup *g, pid_t owner)
{
    if (owner <= 0 || mlz__ns_tid(g->pid, g->pid) == g->pid) return owner;
    for (int i = 0; i < g->n; i++)
        if (g->t[i].state != MLZ_T_GONE && mlz__ns_tid(g->pid, g->t[i].tid) == owner) return g->t[i].tid;
    return owner;
}

int mlz__locks_busy(const mlz_glibc_locks *L, mlz_tgroup *g, char *why, size_t cap, pid_t *holder)
{
    char name[64];
    int busy = 0;
    if (mlz__mem_open(g->pid)) return 0;
    for (int i = 0; i < 3 && !busy; i++) {
        int32_t m[3];
        if (!L->rtld[i] || mlz__mem_peek(L->rtld[i], m, sizeof m) || (m[0] == 0 && m[2] == 0)) continue;
        busy = MLZ_LOCK_LOADER;
        *holder = host_tid(g, m[2]);
        if (m[2] > 0)
            snprintf(why, cap, "thread %d (%s) holds %s", (int)*holder,
                     mlz__thread_name(g->pid, *holder, name, sizeof name), rtld_what[i]);
        else
            snprintf(why, cap, "a thread holds %s", rtld_what[i]);
    }
    int32_t v;
    if (!busy && L->stack_cache && mlz__mem_peek(L->stack_cache, &v, sizeof v) == 0 && v) {
        busy = MLZ_LOCK_STACKS;
        snprintf(why, cap, "a thread holds the thread-stack cache lock (creating, joining or ending a thread)");
    }
    /* Arenas: a held one is normal in a busy program (its holder is only
     * running malloc code); safepoint.c decides whether a holder is parked. */
    uint64_t arena[MLZ_ARENAS_MAX];
    int n = busy ? 0 : mlz__locks_arenas(L, arena, MLZ_ARENAS_MAX);
    for (int i = 0; i < n && !busy; i++) {
        if (mlz__mem_peek(arena[i], &v, sizeof v)) break;
        if (v) { busy = MLZ_LOCK_ARENA; snprintf(why, cap, "a malloc arena lock is held"); }
    }
    return busy;
}

int mlz__locks_arenas(const mlz_glibc_locks *L, uint64_t *out, int cap)
{
    uint64_t a = L ? L->main_arena : 0;
    int n = 0;
    while (a && n < cap) {
        out[n++] = a;
        uint64_t next;
        if (mlz__mem_peek(a + L->arena_next, &next, sizeof next) || next == L->main_arena) break;
        a = next;
    }
    return n;
}
