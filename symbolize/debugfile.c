/*
 * debugfile.c - separate debug files with compressed sections, inflated
 * into memory before libdw opens them.
 *
 * Debian's -dbg packages compress their .debug_* sections (SHF_COMPRESSED,
 * zlib), and libdw inflates every one of them with zlib when it opens the
 * file: libc6-dbg's 10 MB took ~100 ms of a snapshot that otherwise takes
 * ~50. libdeflate inflates the same bytes twice as fast. The file libdw gets
 * is a memfd: the original bytes, then each compressed section's inflated
 * bytes appended, its section header pointing at them, uncompressed. libdw
 * then has nothing left to inflate. Anything unexpected (another class or
 * byte order, zstd sections, a size that does not add up) leaves the file
 * as it was, for libdw to read its own way.
 */
#include "debugfile.h"

#include <elf.h>
#include <libdeflate.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef ELFCOMPRESS_ZLIB
#define ELFCOMPRESS_ZLIB 1
#endif

/* Larger inflated sections are taken for corruption (libc's biggest: 6 MB),
 * as are sections that claim more than deflate can give (1032:1 at best),
 * and files that would inflate beyond 8 GiB in all. */
#define INFLATED_MAX (1ull << 30)
#define DEFLATE_RATIO_MAX 1032
#define TOTAL_MAX (8ull << 30)

static uint64_t align16(uint64_t v) { return (v + 15) & ~(uint64_t)15; }

/* The section headers of an ELF64 file of this machine's byte order, or NULL. */
static const Elf64_Shdr *section_headers(const uint8_t *f, uint64_t size)
{
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)f;
    static const union { uint16_t v; uint8_t b[2]; } order = { 1 };
    uint8_t data = order.b[0] ? ELFDATA2LSB : ELFDATA2MSB;
    if (size < sizeof *e || memcmp(e->e_ident, ELFMAG, SELFMAG) || e->e_ident[EI_CLASS] != ELFCLASS64 ||
        e->e_ident[EI_DATA] != data || e->e_shentsize != sizeof(Elf64_Shdr) || e->e_shnum == 0 ||
        e->e_shoff > size || (size - e->e_shoff) / sizeof(Elf64_Shdr) < e->e_shnum || e->e_shoff % 8)
        return NULL;
    return (const Elf64_Shdr *)(f + e->e_shoff);
}

/* The zlib header of section s, if it is one we inflate; NULL otherwise. */
static const Elf64_Chdr *zlib_section(const uint8_t *f, uint64_t size, const Elf64_Shdr *s)
{
    if (!(s->sh_flags & SHF_COMPRESSED) || s->sh_type == SHT_NOBITS || s->sh_offset > size ||
        size - s->sh_offset < s->sh_size || s->sh_size < sizeof(Elf64_Chdr) || s->sh_offset % 8)
        return NULL;
    const Elf64_Chdr *c = (const Elf64_Chdr *)(f + s->sh_offset);
    return c->ch_type == ELFCOMPRESS_ZLIB && c->ch_size <= INFLATED_MAX &&
           c->ch_size <= (s->sh_size - sizeof *c) * DEFLATE_RATIO_MAX + 64 ? c : NULL;
}

/* Writes f to the memfd but for the compressed bytes of the sections we
 * inflate: a memfd page never written is never allocated. 0 or -1. */
static int write_but_compressed(const uint8_t *f, uint64_t size, int mfd)
{
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)f;
    const Elf64_Shdr *sh = section_headers(f, size);
    uint64_t at = 0;
    while (at < size) {
        /* The next compressed section at or after at, if any. */
        uint64_t next = size, end = size;
        for (unsigned i = 0; i < e->e_shnum; i++)
            if (zlib_section(f, size, &sh[i]) && sh[i].sh_offset >= at && sh[i].sh_offset < next)
                next = sh[i].sh_offset, end = sh[i].sh_offset + sh[i].sh_size;
        if (next > at && pwrite(mfd, f + at, next - at, (off_t)at) != (ssize_t)(next - at)) return -1;
        at = end;
    }
    return 0;
}

/* The memfd image of f: its bytes, then from offset head (page-aligned)
 * each compressed section inflated, the section headers pointing there.
 * 0, or -1 if a section does not inflate to its size. */
static int build_image(const uint8_t *f, uint64_t size, int mfd, uint64_t head, uint64_t total)
{
    const Elf64_Ehdr *e = (const Elf64_Ehdr *)f;
    const Elf64_Shdr *sh = section_headers(f, size);
    size_t shbytes = (size_t)e->e_shnum * sizeof *sh;
    Elf64_Shdr *nsh = malloc(shbytes);
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    /* Populated in one call: a fault per page costs more than inflating it. */
    uint8_t *tail = mmap(NULL, total - head, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, mfd, (off_t)head);
    int rc = nsh && d && tail != MAP_FAILED && !write_but_compressed(f, size, mfd) ? 0 : -1;
    if (!rc) memcpy(nsh, sh, shbytes);
    uint64_t at = head;
    for (unsigned i = 0; !rc && i < e->e_shnum; i++) {
        const Elf64_Chdr *c = zlib_section(f, size, &sh[i]);
        if (!c) continue;
        size_t got = 0;
        /* The file may have changed since total was added up: stay inside. */
        if (c->ch_size > total - at) {
            rc = -1;
            break;
        }
        if (libdeflate_zlib_decompress(d, c + 1, sh[i].sh_size - sizeof *c, tail + (at - head), c->ch_size, &got) !=
                LIBDEFLATE_SUCCESS || got != c->ch_size) {
            rc = -1;
            break;
        }
        nsh[i].sh_offset = at;
        nsh[i].sh_size = c->ch_size;
        nsh[i].sh_flags &= ~(uint64_t)SHF_COMPRESSED;
        nsh[i].sh_addralign = c->ch_addralign;
        at += align16(c->ch_size);
    }
    if (!rc && pwrite(mfd, nsh, shbytes, (off_t)e->e_shoff) != (ssize_t)shbytes) rc = -1;
    if (tail != MAP_FAILED) munmap(tail, total - head);
    if (d) libdeflate_free_decompressor(d);
    free(nsh);
    return rc;
}

int sym_debug_inflated(int fd)
{
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) return fd;
    uint64_t size = (uint64_t)st.st_size;
    const uint8_t *f = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f == MAP_FAILED) return fd;
    const Elf64_Shdr *sh = section_headers(f, size);
    uint64_t head = (size + 4095) & ~(uint64_t)4095, total = head;
    for (unsigned i = 0; sh && i < ((const Elf64_Ehdr *)f)->e_shnum; i++) {
        const Elf64_Chdr *c = zlib_section(f, size, &sh[i]);
        if (c) total += align16(c->ch_size);
    }
    int mfd = total > head && total - head <= TOTAL_MAX ? memfd_create("memlyze-debuginfo", MFD_CLOEXEC) : -1;
    int ok = mfd >= 0 && ftruncate(mfd, (off_t)total) == 0 && build_image(f, size, mfd, head, total) == 0;
    munmap((void *)f, size);
    if (!ok) {
        if (mfd >= 0) close(mfd);
        return fd;
    }
    close(fd);
    return mfd;
}
