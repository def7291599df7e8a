/*
 * elfsym.c - find functions in the modules the TARGET mapped.
 *
 * Addresses come from the very file the target mapped, never from our own
 * libc (a target in a container, or started before an upgrade, has another
 * libc than we do). The file is opened through /proc/PID/map_files (the
 * mapping itself; root only) or else /proc/PID/root/PATH (the target's view
 * of the file system), and must have the device and inode the target's
 * maps show. Symbols come from .dynsym with libelf, skipping hidden (non-
 * default) versions so `dlopen` is dlopen@@GLIBC_2.34 and not a compat one.
 *
 * A module with no file we can open - our own memfd payload seen by a user
 * without CAP_SYS_ADMIN (map_files is root's), a library replaced on disk -
 * is read from the target's memory instead: ELF header, PT_DYNAMIC, then .dynsym/.dynstr/.gnu.version
 * as the loader mapped them.
 */
#include "injector.h"

#include <errno.h>
#include <fcntl.h>
#include <elfutils/libdwelf.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int mlz__match_libc(const char *path)
{
    const char *b = base_name(path);
    return strcmp(b, "libc.so.6") == 0 || (strncmp(b, "libc-2.", 7) == 0 && strstr(b, ".so"));
}

int mlz__match_ldso(const char *path)
{
    return strncmp(base_name(path), "ld-linux", 8) == 0;
}

int mlz__match_payload(const char *path)
{
    return strncmp(path, "/memfd:memlyze-payload", 22) == 0 || strncmp(base_name(path), "libmemlyze", 10) == 0;
}

int mlz__module_find(pid_t pid, int (*match)(const char *path), mlz_module *m)
{
    char mpath[64], line[4096 + 256];
    snprintf(mpath, sizeof mpath, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(mpath, "r");
    if (!f) { mlz__err("cannot read %s: %s", mpath, strerror(errno)); return MLZ_INJ_EIO; }
    int found = 0;
    memset(m, 0, sizeof *m);
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi, off, ino;
        unsigned maj, mnr;
        char perms[8];
        int pos = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &lo, &hi, perms, &off, &maj, &mnr, &ino, &pos) < 7 || !pos)
            continue;
        char *path = line + pos;
        path[strcspn(path, "\n")] = 0;
        char *del = strstr(path, " (deleted)");
        if (del && del[10] == 0) *del = 0;
        if (!*path || !ino) continue;
        if (found) {
            if (strcmp(path, m->path) || ino != m->ino) continue;
            if (lo < m->base) m->base = lo;
            if (hi > m->end) m->end = hi;
            if (off == 0 && !m->first_start) { m->first_start = lo; m->first_end = hi; }
            continue;
        }
        if (!match(path)) continue;
        found = 1;
        snprintf(m->path, sizeof m->path, "%s", path);
        m->base = lo;
        m->end = hi;
        m->dev = makedev(maj, mnr);
        m->ino = ino;
        if (off == 0) { m->first_start = lo; m->first_end = hi; }
    }
    fclose(f);
    if (!found || !m->first_start) return MLZ_INJ_EELF;
    return 0;
}

/* Open the file behind the module, as the target sees it. */
static int open_module(pid_t pid, const mlz_module *m)
{
    char p[4096 + 64];
    struct stat st;
    int fd;
    snprintf(p, sizeof p, "/proc/%d/map_files/%llx-%llx", (int)pid,
             (unsigned long long)m->first_start, (unsigned long long)m->first_end);
    fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && m->path[0] == '/') {
        snprintf(p, sizeof p, "/proc/%d/root%s", (int)pid, m->path);
        fd = open(p, O_RDONLY | O_CLOEXEC);
    }
    if (fd < 0) { mlz__err("cannot open %s as the target sees it: %s", m->path, strerror(errno)); return -1; }
    if (fstat(fd, &st) || st.st_ino != m->ino || st.st_dev != m->dev) {
        mlz__err("%s is not the file the target mapped (replaced since it was loaded?)", m->path);
        close(fd);
        return -1;
    }
    return fd;
}

typedef struct elfh { int fd; Elf *e; } elfh;

static int elf_begin_module(pid_t pid, const mlz_module *m, elfh *h)
{
    elf_version(EV_CURRENT);
    h->fd = open_module(pid, m);
    if (h->fd < 0) return MLZ_INJ_EIO;
    h->e = elf_begin(h->fd, ELF_C_READ, NULL);
    GElf_Ehdr eh;
    if (!h->e || elf_kind(h->e) != ELF_K_ELF || !gelf_getehdr(h->e, &eh) || eh.e_machine != EM_X86_64) {
        mlz__err("%s: not an x86_64 ELF file", m->path);
        if (h->e) elf_end(h->e);
        close(h->fd);
        return MLZ_INJ_EELF;
    }
    return 0;
}

static void elf_done(elfh *h)
{
    elf_end(h->e);
    close(h->fd);
}

/* Load bias: where the offset-0 segment sits minus its link-time address. */
static int module_bias(const mlz_module *m, Elf *e, uint64_t *bias)
{
    size_t n;
    if (elf_getphdrnum(e, &n)) return MLZ_INJ_EELF;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(e, (int)i, &ph) || ph.p_type != PT_LOAD) continue;
        if (ph.p_offset != 0) break;
        *bias = m->first_start - (ph.p_vaddr & ~(uint64_t)0xfff);
        return 0;
    }
    mlz__err("%s: no PT_LOAD at file offset 0", m->path);
    return MLZ_INJ_EELF;
}

/* The dynamic symbols of a module, from the target's memory. */
static int mem_syms(const mlz_module *m, const char *const *names, uint64_t *addrs, int n)
{
    Elf64_Ehdr eh;
    Elf64_Phdr ph[64];
    uint64_t base = m->first_start, bias = 0, dyn = 0, symtab = 0, strtab = 0, strsz = 0, versym = 0;
    int found = 0, rc;
    if ((rc = mlz__mem_read(base, &eh, sizeof eh))) return rc;
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_machine != EM_X86_64 || eh.e_phnum > 64) return MLZ_INJ_EELF;
    if ((rc = mlz__mem_read(base + eh.e_phoff, ph, eh.e_phnum * sizeof *ph))) return rc;
    for (int i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0) { bias = base - (ph[i].p_vaddr & ~(uint64_t)0xfff); break; }
    for (int i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_type == PT_DYNAMIC) dyn = ph[i].p_vaddr + bias;
    if (!dyn) return MLZ_INJ_EELF;
    for (int i = 0; i < 512; i++) {
        Elf64_Dyn d;
        if ((rc = mlz__mem_read(dyn + (uint64_t)i * sizeof d, &d, sizeof d))) return rc;
        if (d.d_tag == DT_NULL) break;
        /* glibc relocates these in place on x86_64; be safe either way. */
        uint64_t v = d.d_un.d_ptr < bias ? d.d_un.d_ptr + bias : d.d_un.d_ptr;
        if (d.d_tag == DT_SYMTAB) symtab = v;
        else if (d.d_tag == DT_STRTAB) strtab = v;
        else if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
        else if (d.d_tag == DT_VERSYM) versym = v;
    }
    /* .dynsym runs up to .dynstr in every layout ld produces. */
    if (!symtab || strtab <= symtab || !strsz || strsz > (64u << 20) || strtab - symtab > (64u << 20)) return MLZ_INJ_EELF;
    size_t nsym = (strtab - symtab) / sizeof(Elf64_Sym);
    Elf64_Sym *syms = malloc(nsym * sizeof *syms);
    char *str = malloc(strsz + 1);
    uint16_t *vs = versym ? malloc(nsym * 2) : NULL;
    for (int k = 0; k < n; k++) addrs[k] = 0;
    if (!syms || !str || (versym && !vs)) { rc = MLZ_INJ_EIO; goto out; }
    if ((rc = mlz__mem_read(symtab, syms, nsym * sizeof *syms)) || (rc = mlz__mem_read(strtab, str, strsz)) ||
        (vs && (rc = mlz__mem_read(versym, vs, nsym * 2))))
        goto out;
    str[strsz] = 0;
    for (size_t i = 1; i < nsym; i++) {
        int type = ELF64_ST_TYPE(syms[i].st_info);
        if (syms[i].st_shndx == SHN_UNDEF || !syms[i].st_value || syms[i].st_name >= strsz) continue;
        if (type != STT_FUNC && type != STT_OBJECT) continue;
        if (vs && (vs[i] & 0x8000)) continue;
        for (int k = 0; k < n; k++)
            if (!addrs[k] && strcmp(str + syms[i].st_name, names[k]) == 0) { addrs[k] = syms[i].st_value + bias; found++; }
    }
    rc = found;
out:
    free(syms);
    free(str);
    free(vs);
    return rc;
}

int mlz__module_syms(pid_t pid, const mlz_module *m, const char *const *names, uint64_t *addrs, int n)
{
    elfh h;
    uint64_t bias;
    int had_err = mlz__errmsg()[0] != 0;
    int rc = elf_begin_module(pid, m, &h), found = 0;
    if (rc == MLZ_INJ_EIO) {
        /* No file to open (a memfd without map_files access, a library
         * deleted or replaced since): read the loaded image instead; the
         * open failure is then no error. */
        rc = mem_syms(m, names, addrs, n);
        if (rc >= 0 && !had_err) mlz__err_clear();
        return rc;
    }
    if (rc) return rc;
    if ((rc = module_bias(m, h.e, &bias))) { elf_done(&h); return rc; }
    for (int i = 0; i < n; i++) addrs[i] = 0;

    Elf_Scn *scn = NULL, *dynsym = NULL, *versym = NULL;
    GElf_Shdr sh, dsh = { 0 };
    while ((scn = elf_nextscn(h.e, scn))) {
        if (!gelf_getshdr(scn, &sh)) continue;
        if (sh.sh_type == SHT_DYNSYM) { dynsym = scn; dsh = sh; }
        else if (sh.sh_type == SHT_GNU_versym) versym = scn;
    }
    if (!dynsym) { elf_done(&h); mlz__err("%s: no .dynsym", m->path); return MLZ_INJ_EELF; }
    Elf_Data *d = elf_getdata(dynsym, NULL), *vd = versym ? elf_getdata(versym, NULL) : NULL;
    size_t count = dsh.sh_entsize ? dsh.sh_size / dsh.sh_entsize : 0;
    for (size_t i = 0; d && i < count; i++) {
        GElf_Sym s;
        if (!gelf_getsym(d, (int)i, &s) || s.st_shndx == SHN_UNDEF || !s.st_value) continue;
        int type = GELF_ST_TYPE(s.st_info);
        if (type != STT_FUNC && type != STT_OBJECT && type != STT_GNU_IFUNC) continue;
        if (vd) {
            GElf_Versym v;
            if (gelf_getversym(vd, (int)i, &v) && (v & 0x8000)) continue;   /* hidden: compat version */
        }
        const char *nm = elf_strptr(h.e, dsh.sh_link, s.st_name);
        if (!nm) continue;
        for (int k = 0; k < n; k++)
            if (!addrs[k] && strcmp(nm, names[k]) == 0) {
                if (type == STT_GNU_IFUNC) break;   /* a resolver, not the function: never call it */
                addrs[k] = s.st_value + bias;
                found++;
            }
    }
    elf_done(&h);
    return found;
}

int mlz__module_cave(pid_t pid, const mlz_module *m, uint64_t *addr, size_t *len)
{
    elfh h;
    uint64_t bias, end = 0;
    size_t n;
    int rc = elf_begin_module(pid, m, &h);
    if (rc) return rc;
    if (!(rc = module_bias(m, h.e, &bias)) && !elf_getphdrnum(h.e, &n)) {
        for (size_t i = 0; i < n; i++) {
            GElf_Phdr ph;
            if (!gelf_getphdr(h.e, (int)i, &ph) || ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
            if (ph.p_vaddr + ph.p_memsz > end) end = ph.p_vaddr + ph.p_memsz;
        }
    }
    elf_done(&h);
    if (rc) return rc;
    if (!end) { mlz__err("%s: no executable segment", m->path); return MLZ_INJ_EELF; }
    *addr = end + bias;
    *len = (size_t)(((end + 4095) & ~(uint64_t)4095) - end);
    return 0;
}

int mlz__module_info(pid_t pid, const mlz_module *m, const char *sym, uint64_t *addr, uint64_t *size,
                     uint64_t *bias, char *debug_path, size_t cap)
{
    elfh h;
    int rc = elf_begin_module(pid, m, &h);
    if (rc) return rc;
    if ((rc = module_bias(m, h.e, bias))) { elf_done(&h); return rc; }
    *addr = *size = 0;
    Elf_Scn *scn = NULL;
    GElf_Shdr sh;
    while (sym && (scn = elf_nextscn(h.e, scn))) {
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM) continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t count = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
        for (size_t i = 0; d && i < count; i++) {
            GElf_Sym s;
            const char *nm;
            if (!gelf_getsym(d, (int)i, &s) || s.st_shndx == SHN_UNDEF) continue;
            if ((nm = elf_strptr(h.e, sh.sh_link, s.st_name)) && strcmp(nm, sym) == 0) {
                *addr = s.st_value + *bias;
                *size = s.st_size;
                break;
            }
        }
    }
    /* Separate debug info by build id, where distributions install it. */
    const void *id;
    ssize_t n = dwelf_elf_gnu_build_id(h.e, &id);
    elf_done(&h);
    if (debug_path && cap) {
        debug_path[0] = 0;
        if (n > 1 && (size_t)n * 2 + 40 < cap) {
            const unsigned char *b = id;
            const char *dir = getenv("MEMLYZE_DEBUG_DIR");     /* tests: another place, or none */
            int k = snprintf(debug_path, cap, "%s/.build-id/%02x/", dir ? dir : "/usr/lib/debug", b[0]);
            for (ssize_t i = 1; i < n; i++) k += snprintf(debug_path + k, cap - (size_t)k, "%02x", b[i]);
            snprintf(debug_path + k, cap - (size_t)k, ".debug");
            if (access(debug_path, R_OK)) debug_path[0] = 0;
        }
    }
    return 0;
}
