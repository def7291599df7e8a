/*
 * elfimage.c - a module's ELF image as the process mapped it.
 *
 * Addresses come from the very file the process mapped, never from a file
 * of ours (a process in a container, or started before an upgrade, has
 * other libraries than we do). The file is opened through
 * /proc/PID/map_files (the mapping itself; root only), /proc/PID/root/PATH
 * (the process's view of the file system) or, for a memfd or a deleted
 * file, a descriptor the process still holds (/proc/PID/fd: the injector
 * keeps the payload's memfd open); each must have the device and inode
 * that maps shows. Symbols come from .dynsym with libelf, skipping hidden
 * (non-default) versions so `dlopen` is dlopen@@GLIBC_2.34 and not a compat
 * one.
 *
 * A module with no file we can open (a library replaced on disk, a memfd
 * without map_files access and no descriptor left) is read from the
 * process's memory instead: ELF header, program headers, PT_NOTE, then
 * PT_DYNAMIC's .dynsym/.dynstr/.gnu.version as the loader mapped them.
 */
#include "proc.h"
#include "proc_internal.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_PHDR 64

typedef struct image {
    pid_t pid;
    const mlz_proc_module *m;
    int fd;                      /* the file, or -1: read from memory */
    Elf *e;
    Elf64_Phdr ph[MAX_PHDR];
    int nph;
    uint64_t bias;
} image;

static int same_file(int fd, const mlz_proc_module *m)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == m->ino && st.st_dev == m->dev;
}

/* A descriptor the process holds on the module's file (a memfd, a deleted
 * file), opened anew through /proc/PID/fd. */
static int open_held(pid_t pid, const mlz_proc_module *m)
{
    char dir[64], p[64 + 256];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    int fd = -1;
    while (fd < 0 && (de = readdir(d))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat st;
        if (stat(p, &st) || st.st_ino != m->ino || st.st_dev != m->dev) continue;
        fd = open(p, O_RDONLY | O_CLOEXEC);
        if (!same_file(fd, m) && fd >= 0) { close(fd); fd = -1; }
    }
    closedir(d);
    return fd;
}

/* The file behind the module as the process sees it; -1 when none opens. */
static int open_module(pid_t pid, const mlz_proc_module *m)
{
    return mlz_proc_module_open(pid, m);
}

int mlz_proc_module_open(pid_t pid, const mlz_proc_module *m)
{
    char p[4096 + 64];
    int fd = -1;
    if (m->first_start) {
        snprintf(p, sizeof p, "/proc/%d/map_files/%llx-%llx", (int)pid, (unsigned long long)m->first_start,
                 (unsigned long long)m->first_end);
        fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && !same_file(fd, m)) { close(fd); fd = -1; }
    }
    int memfd = strncmp(m->path, "/memfd:", 7) == 0;
    if (fd < 0 && !memfd) {
        snprintf(p, sizeof p, "/proc/%d/root%s", (int)pid, m->path);
        fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && !same_file(fd, m)) { close(fd); fd = -1; }
    }
    if (fd < 0 && (memfd || m->deleted)) fd = open_held(pid, m);
    return fd;
}

static int image_from_file(image *im)
{
    GElf_Ehdr eh;
    size_t n;
    elf_version(EV_CURRENT);
    im->e = elf_begin(im->fd, ELF_C_READ, NULL);
    if (!im->e || elf_kind(im->e) != ELF_K_ELF || !gelf_getehdr(im->e, &eh) || eh.e_machine != EM_X86_64 ||
        elf_getphdrnum(im->e, &n))
        return mlz__proc_fail(MLZ_PROC_EELF, "%s: not an x86_64 ELF file", im->m->path);
    for (size_t i = 0; i < n && im->nph < MAX_PHDR; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(im->e, (int)i, &ph)) continue;
        im->ph[im->nph++] = (Elf64_Phdr){ ph.p_type, ph.p_flags, ph.p_offset, ph.p_vaddr, ph.p_paddr,
                                          ph.p_filesz, ph.p_memsz, ph.p_align };
    }
    return 0;
}

static int image_from_memory(image *im)
{
    Elf64_Ehdr eh;
    uint64_t base = im->m->first_start;
    int rc;
    if (!base) return mlz__proc_fail(MLZ_PROC_EELF, "%s: no mapping of its ELF header", im->m->path);
    if ((rc = mlz_proc_read(im->pid, base, &eh, sizeof eh))) return rc;
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > MAX_PHDR)
        return mlz__proc_fail(MLZ_PROC_EELF, "%s: no x86_64 ELF image in memory", im->m->path);
    if ((rc = mlz_proc_read(im->pid, base + eh.e_phoff, im->ph, eh.e_phnum * sizeof *im->ph))) return rc;
    im->nph = eh.e_phnum;
    return 0;
}

/* Load bias: where the offset-0 segment sits minus its link-time address. */
static int image_bias(image *im)
{
    for (int i = 0; i < im->nph; i++) {
        if (im->ph[i].p_type != PT_LOAD) continue;
        if (im->ph[i].p_offset != 0) break;
        im->bias = im->m->first_start - (im->ph[i].p_vaddr & ~(uint64_t)0xfff);
        return 0;
    }
    return mlz__proc_fail(MLZ_PROC_EELF, "%s: no PT_LOAD at file offset 0", im->m->path);
}

static void image_close(image *im)
{
    if (im->e) elf_end(im->e);
    if (im->fd >= 0) close(im->fd);
}

static int image_open(pid_t pid, const mlz_proc_module *m, image *im)
{
    memset(im, 0, sizeof *im);
    im->pid = pid;
    im->m = m;
    if (!m->first_start) return mlz__proc_fail(MLZ_PROC_EELF, "%s: no mapping of file offset 0", m->path);
    im->fd = open_module(pid, m);
    int rc = im->fd >= 0 ? image_from_file(im) : image_from_memory(im);
    if (!rc) rc = image_bias(im);
    if (rc) image_close(im);
    return rc;
}

/* The bytes of segment ph (up to cap), from the file or memory. */
static ssize_t segment_bytes(const image *im, const Elf64_Phdr *ph, void *buf, size_t cap)
{
    size_t n = ph->p_filesz < cap ? ph->p_filesz : cap;
    if (im->fd >= 0) return pread(im->fd, buf, n, (off_t)ph->p_offset);
    return mlz_proc_read(im->pid, ph->p_vaddr + im->bias, buf, n) ? -1 : (ssize_t)n;
}

static void image_build_id(const image *im, uint8_t *id, size_t *len)
{
    *len = 0;
    for (int i = 0; i < im->nph && !*len; i++) {
        uint8_t note[4096];
        if (im->ph[i].p_type != PT_NOTE) continue;
        ssize_t n = segment_bytes(im, &im->ph[i], note, sizeof note);
        for (size_t off = 0; n > 0 && off + sizeof(Elf64_Nhdr) <= (size_t)n;) {
            Elf64_Nhdr nh;
            memcpy(&nh, note + off, sizeof nh);
            size_t name = off + sizeof nh, desc = name + ((nh.n_namesz + 3) & ~3u);
            if (desc + nh.n_descsz > (size_t)n) break;
            if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && !memcmp(note + name, "GNU", 4) &&
                nh.n_descsz <= 64) {
                memcpy(id, note + desc, nh.n_descsz);
                *len = nh.n_descsz;
                break;
            }
            off = desc + ((nh.n_descsz + 3) & ~3u);
        }
    }
}

int mlz_proc_module_load(pid_t pid, mlz_proc_module *m)
{
    image im;
    int rc = image_open(pid, m, &im);
    if (rc) return rc;
    m->bias = im.bias;
    image_build_id(&im, m->build_id, &m->build_id_len);
    m->loaded = 1;
    image_close(&im);
    return 0;
}

/* One symbol against the wanted names: the rule both readers share. */
static int take_symbol(const char *nm, const Elf64_Sym *s, int hidden, uint64_t bias, const char *const *names,
                       mlz_proc_sym *out, int n)
{
    int type = ELF64_ST_TYPE(s->st_info);
    if (s->st_shndx == SHN_UNDEF || !s->st_value || hidden) return 0;
    if (type != STT_FUNC && type != STT_OBJECT && type != STT_GNU_IFUNC) return 0;
    for (int k = 0; k < n; k++)
        if (!out[k].addr && strcmp(nm, names[k]) == 0) {
            if (type == STT_GNU_IFUNC) return 0;   /* a resolver, not the function: never call it */
            out[k] = (mlz_proc_sym){ s->st_value + bias, s->st_size };
            return 1;
        }
    return 0;
}

static int file_syms(image *im, const char *const *names, mlz_proc_sym *out, int n)
{
    Elf_Scn *scn = NULL, *dynsym = NULL, *versym = NULL;
    GElf_Shdr sh, dsh = { 0 };
    int found = 0;
    while ((scn = elf_nextscn(im->e, scn))) {
        if (!gelf_getshdr(scn, &sh)) continue;
        if (sh.sh_type == SHT_DYNSYM) { dynsym = scn; dsh = sh; }
        else if (sh.sh_type == SHT_GNU_versym) versym = scn;
    }
    if (!dynsym) return mlz__proc_fail(MLZ_PROC_EELF, "%s: no .dynsym", im->m->path);
    Elf_Data *d = elf_getdata(dynsym, NULL), *vd = versym ? elf_getdata(versym, NULL) : NULL;
    size_t count = dsh.sh_entsize ? dsh.sh_size / dsh.sh_entsize : 0;
    for (size_t i = 0; d && i < count; i++) {
        GElf_Sym s;
        GElf_Versym v = 0;
        if (!gelf_getsym(d, (int)i, &s)) continue;
        if (vd && !gelf_getversym(vd, (int)i, &v)) v = 0;
        const char *nm = elf_strptr(im->e, dsh.sh_link, s.st_name);
        Elf64_Sym s64 = { s.st_name, s.st_info, s.st_other, s.st_shndx, s.st_value, s.st_size };
        if (nm) found += take_symbol(nm, &s64, (v & 0x8000) != 0, im->bias, names, out, n);
    }
    return found;
}

/* The dynamic symbols from the process's memory (PT_DYNAMIC). */
static int memory_syms(image *im, const char *const *names, mlz_proc_sym *out, int n)
{
    uint64_t dyn = 0, symtab = 0, strtab = 0, strsz = 0, versym = 0, bias = im->bias;
    int found = 0, rc;
    for (int i = 0; i < im->nph; i++)
        if (im->ph[i].p_type == PT_DYNAMIC) dyn = im->ph[i].p_vaddr + bias;
    if (!dyn) return mlz__proc_fail(MLZ_PROC_EELF, "%s: no PT_DYNAMIC", im->m->path);
    for (int i = 0; i < 512; i++) {
        Elf64_Dyn d;
        if ((rc = mlz_proc_read(im->pid, dyn + (uint64_t)i * sizeof d, &d, sizeof d))) return rc;
        if (d.d_tag == DT_NULL) break;
        /* glibc relocates these in place on x86_64; be safe either way. */
        uint64_t v = d.d_un.d_ptr < bias ? d.d_un.d_ptr + bias : d.d_un.d_ptr;
        if (d.d_tag == DT_SYMTAB) symtab = v;
        else if (d.d_tag == DT_STRTAB) strtab = v;
        else if (d.d_tag == DT_STRSZ) strsz = d.d_un.d_val;
        else if (d.d_tag == DT_VERSYM) versym = v;
    }
    /* .dynsym runs up to .dynstr in every layout ld produces. */
    if (!symtab || strtab <= symtab || !strsz || strsz > (64u << 20) || strtab - symtab > (64u << 20))
        return mlz__proc_fail(MLZ_PROC_EELF, "%s: no readable dynamic symbol table in memory", im->m->path);
    size_t nsym = (strtab - symtab) / sizeof(Elf64_Sym);
    Elf64_Sym *syms = malloc(nsym * sizeof *syms);
    char *str = malloc(strsz + 1);
    uint16_t *vs = versym ? malloc(nsym * 2) : NULL;
    if (!syms || !str || (versym && !vs)) { rc = mlz__proc_fail(MLZ_PROC_ENOMEM, "out of memory"); goto out; }
    if ((rc = mlz_proc_read(im->pid, symtab, syms, nsym * sizeof *syms)) ||
        (rc = mlz_proc_read(im->pid, strtab, str, strsz)) || (vs && (rc = mlz_proc_read(im->pid, versym, vs, nsym * 2))))
        goto out;
    str[strsz] = 0;
    for (size_t i = 1; i < nsym; i++)
        if (syms[i].st_name < strsz)
            found += take_symbol(str + syms[i].st_name, &syms[i], vs && (vs[i] & 0x8000), bias, names, out, n);
    rc = found;
out:
    free(syms);
    free(str);
    free(vs);
    return rc;
}

int mlz_proc_syms(pid_t pid, const mlz_proc_module *m, const char *const *names, mlz_proc_sym *out, int n)
{
    image im;
    for (int k = 0; k < n; k++) out[k] = (mlz_proc_sym){ 0, 0 };
    int rc = image_open(pid, m, &im);
    if (rc) return rc;
    rc = im.fd >= 0 ? file_syms(&im, names, out, n) : memory_syms(&im, names, out, n);
    image_close(&im);
    return rc;
}

int mlz_proc_cave(pid_t pid, const mlz_proc_module *m, uint64_t *addr, size_t *len)
{
    image im;
    uint64_t end = 0;
    int rc = image_open(pid, m, &im);
    if (rc) return rc;
    for (int i = 0; i < im.nph; i++)
        if (im.ph[i].p_type == PT_LOAD && (im.ph[i].p_flags & PF_X) && im.ph[i].p_vaddr + im.ph[i].p_memsz > end)
            end = im.ph[i].p_vaddr + im.ph[i].p_memsz;
    image_close(&im);
    if (!end) return mlz__proc_fail(MLZ_PROC_EELF, "%s: no executable segment", m->path);
    *addr = end + im.bias;
    *len = (size_t)(((end + 4095) & ~(uint64_t)4095) - end);
    return 0;
}

int mlz_proc_build_id_path(const uint8_t *b, size_t n, char *path, size_t cap)
{
    if (cap) path[0] = 0;
    if (n < 2 || n * 2 + 40 >= cap) return -1;
    const char *dir = getenv("MEMLYZE_DEBUG_DIR");     /* tests: another place, or none */
    int k = snprintf(path, cap, "%s/.build-id/%02x/", dir ? dir : "/usr/lib/debug", b[0]);
    for (size_t i = 1; i < n && k > 0 && (size_t)k < cap; i++) k += snprintf(path + k, cap - (size_t)k, "%02x", b[i]);
    if (k <= 0 || (size_t)k + 7 > cap) { path[0] = 0; return -1; }
    snprintf(path + k, cap - (size_t)k, ".debug");
    return 0;
}

int mlz_proc_debug_file(const mlz_proc_module *m, char *path, size_t cap)
{
    if (m->build_id_len < 2) return mlz__proc_fail(MLZ_PROC_ENOENT, "%s: no build id", m->path);
    if (mlz_proc_build_id_path(m->build_id, m->build_id_len, path, cap))
        return mlz__proc_fail(MLZ_PROC_ENOENT, "debug path too long");
    if (access(path, R_OK)) {
        int e = errno;
        mlz__proc_fail(MLZ_PROC_ENOENT, "%s: no debug file %s: %s", m->path, path, strerror(e));
        path[0] = 0;
        return MLZ_PROC_ENOENT;
    }
    return 0;
}
