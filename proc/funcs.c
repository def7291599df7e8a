/*
 * funcs.c - a function by name, for --hook: a custom allocator need not be
 * exported, so the file's full symbol table (.symtab) is read first, its
 * dynamic one (.dynsym) when the file is stripped.
 */
#include "proc.h"
#include "proc_internal.h"

#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Defined functions called name in the table of type t: 1 found (value,
 * size), 0 none, MLZ_PROC_EAMBIG for two of them at different values. */
static int find_in(Elf *e, Elf64_Word t, const char *name, uint64_t *value, uint64_t *size)
{
    Elf_Scn *scn = NULL;
    int found = 0;
    while ((scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != t || !sh.sh_entsize) continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym s;
            if (!gelf_getsym(d, (int)i, &s) || GELF_ST_TYPE(s.st_info) != STT_FUNC || s.st_shndx == SHN_UNDEF ||
                !s.st_value)
                continue;
            const char *nm = elf_strptr(e, sh.sh_link, s.st_name);
            if (!nm || strcmp(nm, name)) continue;
            if (found && *value != s.st_value) return MLZ_PROC_EAMBIG;
            *value = s.st_value;
            *size = s.st_size;
            found = 1;
        }
    }
    return found;
}

/* The name of a symbol (not a section's or file's, not value itself)
 * whose value lies in (value, value + span), or NULL. */
static const char *symbol_inside(Elf *e, uint64_t value, uint64_t span, uint64_t *off)
{
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM) || !sh.sh_entsize) continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym s;
            int t;
            if (!gelf_getsym(d, (int)i, &s) || s.st_shndx == SHN_UNDEF || s.st_shndx == SHN_ABS ||
                (t = GELF_ST_TYPE(s.st_info)) == STT_SECTION || t == STT_FILE)
                continue;
            if (s.st_value > value && s.st_value < value + span) {
                const char *nm = elf_strptr(e, sh.sh_link, s.st_name);
                *off = s.st_value - value;
                return nm && *nm ? nm : "(unnamed)";
            }
        }
    }
    return NULL;
}

int mlz_proc_elf_func(int fd, const char *name, uint64_t *value, uint64_t *size)
{
    if (elf_version(EV_CURRENT) == EV_NONE) return mlz__proc_fail(MLZ_PROC_EELF, "libelf: %s", elf_errmsg(-1));
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    if (!e) return mlz__proc_fail(MLZ_PROC_EELF, "not an ELF file: %s", elf_errmsg(-1));
    int rc = find_in(e, SHT_SYMTAB, name, value, size);
    if (rc == 0) rc = find_in(e, SHT_DYNSYM, name, value, size);
    uint64_t off = 0;
    /* Within the function: what follows it is another one, and a jump moves
     * no byte past the end of its function (relocate.c). */
    uint64_t span = rc == 1 && *size && *size < MLZ_PROC_ENTRY_SPAN ? *size : MLZ_PROC_ENTRY_SPAN;
    const char *inside = rc == 1 ? symbol_inside(e, *value, span, &off) : NULL;
    if (inside)
        mlz__proc_fail(MLZ_PROC_EENTRY, "symbol %s lies %llu bytes into %s, in the bytes an inline hook moves: "
                       "code elsewhere may jump there", inside, (unsigned long long)off, name);
    elf_end(e);
    if (rc == MLZ_PROC_EAMBIG) return mlz__proc_fail(rc, "%s names several functions", name);
    if (inside) return MLZ_PROC_EENTRY;
    return rc == 1 ? 0 : mlz__proc_fail(MLZ_PROC_ENOENT, "no function %s", name);
}

int mlz_proc_func(pid_t pid, const mlz_proc_module *m, const char *name, mlz_proc_sym *out)
{
    *out = (mlz_proc_sym){ 0, 0 };
    int fd = mlz_proc_module_open(pid, m);
    if (fd < 0) {   /* no file to read: the exported functions, from memory */
        const char *names[1] = { name };
        int n = mlz_proc_syms(pid, m, names, out, 1);
        return n == 1 ? 0 : n < 0 ? n : mlz__proc_fail(MLZ_PROC_ENOENT, "no function %s in %s", name, m->path);
    }
    uint64_t value, size;
    int rc = mlz_proc_elf_func(fd, name, &value, &size);
    close(fd);
    if (rc) {
        char why[256];
        snprintf(why, sizeof why, "%s", mlz_proc_error());
        return mlz__proc_fail(rc, "%s: %s", m->path, why);
    }
    *out = (mlz_proc_sym){ value + m->bias, size };
    return 0;
}
