/*
 * procmem.c - reading another process without stopping it: its memory
 * (process_vm_readv, /proc/PID/mem as a fallback), its module map
 * (/proc/PID/maps plus each file's ELF headers), and a symbol of one of its
 * modules (libelf on the very file it mapped, via /proc/PID/map_files).
 */
#include "procmem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

int pm_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
    struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n == (ssize_t)len) return 0;
    /* Partial read across an unmapped page, or a kernel without the call. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    n = pread(fd, buf, len, (off_t)addr);
    close(fd);
    return n == (ssize_t)len ? 0 : -1;
}

/* Opens the file behind a mapping as the process sees it. */
static int open_mapped(pid_t pid, uint64_t start, uint64_t end, const char *path)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "/proc/%d/map_files/%llx-%llx", (int)pid, (unsigned long long)start,
             (unsigned long long)end);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) return fd;
    snprintf(p, sizeof p, "/proc/%d/root%s", (int)pid, path);
    return open(p, O_RDONLY | O_CLOEXEC);
}

int pm_open_module(pid_t pid, const pm_module *m)
{
    return open_mapped(pid, m->map_start, m->map_end, m->path);
}

/* Lowest PT_LOAD address (page-aligned) and the GNU build-id of an ELF. */
static int elf_facts(int fd, uint64_t *min_vaddr, uint8_t *bid, size_t *blen)
{
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    if (!e) return -1;
    size_t n;
    int rc = -1;
    *blen = 0;
    *min_vaddr = UINT64_MAX;
    if (elf_getphdrnum(e, &n) == 0) {
        for (size_t i = 0; i < n; i++) {
            GElf_Phdr ph;
            if (!gelf_getphdr(e, (int)i, &ph)) continue;
            if (ph.p_type == PT_LOAD && ph.p_vaddr < *min_vaddr)
                *min_vaddr = ph.p_vaddr & ~(uint64_t)(ph.p_align > 1 ? ph.p_align - 1 : 0);
            if (ph.p_type == PT_NOTE && !*blen) {
                Elf_Data *d = elf_getdata_rawchunk(e, (int64_t)ph.p_offset, ph.p_filesz, ELF_T_NHDR);
                size_t off = 0, no, doff;
                GElf_Nhdr nh;
                while (d && (off = gelf_getnote(d, off, &nh, &no, &doff)) > 0)
                    if (nh.n_type == NT_GNU_BUILD_ID && nh.n_descsz <= 64) {
                        memcpy(bid, (char *)d->d_buf + doff, nh.n_descsz);
                        *blen = nh.n_descsz;
                        break;
                    }
            }
        }
        rc = *min_vaddr == UINT64_MAX ? -1 : 0;
    }
    elf_end(e);
    return rc;
}

int pm_modules(pid_t pid, pm_module **out, size_t *count)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(p, "re");
    if (!f) return -1;
    pm_module *v = NULL;
    size_t n = 0, cap = 0;
    char line[PATH_MAX + 256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long s, e, off;
        char perms[8], path[PATH_MAX];
        path[0] = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %4095[^\n]", &s, &e, perms, &off, path) < 4) continue;
        char *pth = path;
        while (*pth == ' ') pth++;
        if (*pth != '/' && strcmp(pth, "[vdso]")) continue;
        pm_module *m = NULL;
        for (size_t i = 0; i < n; i++)
            if (!strcmp(v[i].path, pth)) m = &v[i];
        if (!m) {
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                pm_module *nv = realloc(v, cap * sizeof *nv);
                if (!nv) { fclose(f); pm_free_modules(v, n); return -1; }
                v = nv;
            }
            m = &v[n++];
            memset(m, 0, sizeof *m);
            m->path = strdup(pth);
            m->start = s;
            m->bias = UINT64_MAX;
        }
        if (s < m->start) m->start = s;
        if (e > m->end) m->end = e;
        if (off == 0 && m->bias == UINT64_MAX) {
            uint64_t minv;
            int fd = *pth == '/' ? open_mapped(pid, s, e, pth) : -1;
            if (fd >= 0 && elf_facts(fd, &minv, m->build_id, &m->build_id_len) == 0) m->bias = s - minv;
            if (fd >= 0) close(fd);
            m->map_start = s;
            m->map_end = e;
        }
    }
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (v[i].bias == UINT64_MAX) v[i].bias = v[i].start;
    *out = v;
    *count = n;
    return 0;
}

void pm_free_modules(pm_module *m, size_t n)
{
    for (size_t i = 0; i < n; i++) free(m[i].path);
    free(m);
}

int pm_symbol(pid_t pid, const pm_module *m, const char *name, uint64_t *addr)
{
    int fd = open_mapped(pid, m->map_start, m->map_end, m->path);
    if (fd < 0) return -1;
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    int rc = -1;
    Elf_Scn *scn = NULL;
    while (e && rc && (scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB)) continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t nsym = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
        for (size_t i = 0; d && i < nsym; i++) {
            GElf_Sym s;
            if (!gelf_getsym(d, (int)i, &s) || s.st_shndx == SHN_UNDEF) continue;
            const char *nm = elf_strptr(e, sh.sh_link, s.st_name);
            if (nm && !strcmp(nm, name)) {
                *addr = m->bias + s.st_value;
                rc = 0;
                break;
            }
        }
    }
    if (e) elf_end(e);
    close(fd);
    return rc;
}
