/*
 * procdata.c - the writable segments of a module, cut at its data symbols.
 *
 * A segment is every PT_LOAD with PF_W: [bias + p_vaddr, + p_memsz), which
 * covers .data, .bss and the RELRO part. Each OBJECT symbol inside starts a
 * piece and ends it (its start rounded down, its end up to 8 bytes, so
 * pointer words stay whole); gaps between symbols are pieces without a name.
 * Names come from .symtab when the file has one (local symbols know their
 * source file from the STT_FILE entry before them), else from .dynsym.
 * Global symbols have no STT_FILE: their file comes from the DWARF of the
 * module when it has some (the compile unit that defines the variable).
 */
#include "procdata.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct sym { uint64_t addr, end; const char *name, *file; uint64_t value; } sym;

/* Link-time address -> source file of the variables the DWARF defines at a
 * fixed address (DW_OP_addr), sorted by address. */
typedef struct var_file { uint64_t addr; char *file; } var_file;

static int by_var(const void *x, const void *y)
{
    const var_file *a = x, *b = y;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static size_t dwarf_var_files(int fd, var_file **out)
{
    Dwarf *dw = dwarf_begin(fd, DWARF_C_READ);
    size_t n = 0, cap = 0, hsize;
    Dwarf_Off off = 0, next;
    *out = NULL;
    if (!dw) return 0;
    while (dwarf_nextcu(dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
        Dwarf_Die cu, die;
        if (dwarf_offdie(dw, off + hsize, &cu) && dwarf_child(&cu, &die) == 0) {
            const char *name = dwarf_diename(&cu), *base = name ? strrchr(name, '/') : NULL;
            base = base ? base + 1 : name;
            do {
                Dwarf_Attribute at;
                Dwarf_Op *ops;
                size_t nops;
                if (dwarf_tag(&die) != DW_TAG_variable || !base ||
                    !dwarf_attr(&die, DW_AT_location, &at) || dwarf_getlocation(&at, &ops, &nops) || nops != 1 ||
                    ops[0].atom != DW_OP_addr)
                    continue;
                if (n == cap) {
                    cap = cap ? cap * 2 : 64;
                    var_file *nv = realloc(*out, cap * sizeof *nv);
                    if (!nv) break;
                    *out = nv;
                }
                (*out)[n++] = (var_file){ ops[0].number, strdup(base) };
            } while (dwarf_siblingof(&die, &die) == 0);
        }
        off = next;
    }
    dwarf_end(dw);
    qsort(*out, n, sizeof **out, by_var);
    return n;
}

static const char *var_file_of(const var_file *v, size_t n, uint64_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v[mid].addr < addr) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && v[lo].addr == addr ? v[lo].file : NULL;
}

static int by_addr(const void *x, const void *y)
{
    const sym *a = x, *b = y;
    if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
    return a->end > b->end ? -1 : a->end < b->end;   /* the larger first */
}

static int push(pm_piece **v, size_t *n, size_t *cap, uint64_t addr, uint64_t end, const sym *s)
{
    if (end <= addr) return 0;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        pm_piece *nv = realloc(*v, c * sizeof *nv);
        if (!nv) return -1;
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = (pm_piece){ addr, end - addr, s && s->name ? strdup(s->name) : NULL,
                               s && s->file ? strdup(s->file) : NULL };
    return 0;
}

int pm_data_pieces(pid_t pid, const mlz_proc_module *m, pm_piece **v, size_t *n, size_t *cap)
{
    int fd = mlz_proc_module_open(pid, m);
    if (fd < 0) return -1;
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    int rc = -1;
    sym *syms = NULL;
    var_file *vf = NULL;
    size_t ns = 0, cs = 0, nph, nvf = 0;
    if (!e || elf_getphdrnum(e, &nph)) goto out;

    /* Symbols: .symtab if present, else .dynsym. */
    Elf_Scn *scn = NULL, *use = NULL;
    GElf_Shdr ush;
    while ((scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh)) continue;
        if (sh.sh_type == SHT_SYMTAB || (sh.sh_type == SHT_DYNSYM && !use)) { use = scn; ush = sh; }
    }
    if (use) {
        Elf_Data *d = elf_getdata(use, NULL);
        size_t cnt = ush.sh_entsize ? ush.sh_size / ush.sh_entsize : 0;
        const char *file = NULL;
        for (size_t i = 0; d && i < cnt; i++) {
            GElf_Sym s;
            if (!gelf_getsym(d, (int)i, &s)) continue;
            const char *nm = elf_strptr(e, ush.sh_link, s.st_name);
            if (GELF_ST_TYPE(s.st_info) == STT_FILE) { file = nm; continue; }
            if (GELF_ST_TYPE(s.st_info) != STT_OBJECT || s.st_shndx == SHN_UNDEF || !s.st_size || !nm) continue;
            if (ns == cs) {
                cs = cs ? cs * 2 : 256;
                sym *nv = realloc(syms, cs * sizeof *nv);
                if (!nv) goto out;
                syms = nv;
            }
            uint64_t a = (m->bias + s.st_value) & ~7ull, z = (m->bias + s.st_value + s.st_size + 7) & ~7ull;
            syms[ns++] = (sym){ a, z, nm, GELF_ST_BIND(s.st_info) == STB_LOCAL ? file : NULL, s.st_value };
        }
    }
    nvf = dwarf_var_files(fd, &vf);
    for (size_t i = 0; i < ns && nvf; i++)
        if (!syms[i].file) syms[i].file = var_file_of(vf, nvf, syms[i].value);
    qsort(syms, ns, sizeof *syms, by_addr);

    for (size_t i = 0; i < nph; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(e, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_W)) continue;
        uint64_t at = (m->bias + ph.p_vaddr) & ~7ull, end = (m->bias + ph.p_vaddr + ph.p_memsz + 7) & ~7ull;
        for (size_t k = 0; k < ns && at < end; k++) {
            if (syms[k].end <= at || syms[k].addr >= end) continue;
            if (syms[k].addr > at && push(v, n, cap, at, syms[k].addr, NULL)) goto out;
            uint64_t s0 = syms[k].addr > at ? syms[k].addr : at, s1 = syms[k].end < end ? syms[k].end : end;
            if (push(v, n, cap, s0, s1, &syms[k])) goto out;
            at = s1;
        }
        if (push(v, n, cap, at, end, NULL)) goto out;
    }
    rc = 0;
out:
    for (size_t i = 0; i < nvf; i++) free(vf[i].file);
    free(vf);
    free(syms);
    if (e) elf_end(e);
    close(fd);
    return rc;
}

void pm_free_pieces(pm_piece *v, size_t n)
{
    for (size_t i = 0; i < n; i++) { free(v[i].name); free(v[i].file); }
    free(v);
}
