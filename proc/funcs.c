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

int mlz_proc_elf_func(int fd, const char *name, uint64_t *value, uint64_t *size)
{
    if (elf_version(EV_CURRENT) == EV_NONE) return mlz__proc_fail(MLZ_PROC_EELF, "libelf: %s", elf_errmsg(-1));
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    if (!e) return mlz__proc_fail(MLZ_PROC_EELF, "not an ELF file: %s", elf_errmsg(-1));
    int rc = find_in(e, SHT_SYMTAB, name, value, size);
    if (rc == 0) rc = find_in(e, SHT_DYNSYM, name, value, size);
    elf_end(e);
    if (rc == MLZ_PROC_EAMBIG) return mlz__proc_fail(rc, "%s names several functions", name);
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
