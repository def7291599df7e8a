/*
 * procmaps.c - read the protection of pages from /proc/self/maps.
 *
 * RELRO pages must be made writable only for the write and then given back
 * exactly the protection they had: assuming PROT_READ would, for example,
 * strip PROT_EXEC from a text page holding a TEXTREL slot, or make a page
 * that something else made writable read-only again. mprotect has no "get",
 * so we read the kernel's view. No stdio (it allocates): open/read into a
 * stack buffer and parse "lo-hi perms ..." lines by hand into an mmap'd
 * table, sorted because the kernel prints mappings in address order.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "got_internal.h"

static int hexval(int c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Parse the start of one line; returns 0 if it is not a mapping line. */
static int parse_line(const char *s, size_t n, mlz__range *out)
{
    size_t i = 0;
    uintptr_t lo = 0, hi = 0;
    int v;
    while (i < n && (v = hexval(s[i])) >= 0) lo = lo << 4 | (uintptr_t)v, i++;
    if (i >= n || s[i] != '-') return 0;
    i++;
    while (i < n && (v = hexval(s[i])) >= 0) hi = hi << 4 | (uintptr_t)v, i++;
    if (i + 4 >= n || s[i] != ' ') return 0;
    i++;
    int prot = 0;
    if (s[i] == 'r') prot |= PROT_READ;
    if (s[i + 1] == 'w') prot |= PROT_WRITE;
    if (s[i + 2] == 'x') prot |= PROT_EXEC;
    out->lo = lo;
    out->hi = hi;
    out->prot = prot;
    return 1;
}

int mlz__maps_errno;

int mlz__maps_load(mlz__maps *m)
{
    m->n = 0;
    m->loaded = 0;
    int fd;
    do fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        mlz__maps_errno = errno;
        return MLZ_GOT_EIO;
    }

    char buf[8192];
    char carry[96];          /* start of a line split across reads; the fields we need fit */
    size_t nc = 0;
    int skipping = 0;        /* inside the unneeded tail of a long line */
    int rc = 0;
    for (;;) {
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { rc = MLZ_GOT_EIO; break; }
        if (got == 0) break;
        const char *p = buf, *end = buf + got;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            const char *stop = nl ? nl : end;
            const char *line = p;
            size_t len = (size_t)(stop - p);
            if (nc || skipping || !nl) {
                /* continue or start a split line in carry[] */
                if (!skipping) {
                    size_t k = len < sizeof carry - nc ? len : sizeof carry - nc;
                    memcpy(carry + nc, p, k);
                    nc += k;
                    if (nc == sizeof carry) skipping = 1;
                }
                line = carry;
                len = nc;
                if (!nl) break;                  /* need the next read */
            }
            mlz__range r;
            if (parse_line(line, len, &r)) {
                if (mlz__vec_reserve((void **)&m->r, &m->cap, sizeof *m->r, m->n + 1)) {
                    rc = MLZ_GOT_ENOMEM;
                    goto out;
                }
                m->r[m->n++] = r;
            }
            nc = 0;
            skipping = 0;
            p = nl + 1;
        }
    }
out:
    close(fd);
    if (rc == 0) m->loaded = 1;
    return rc;
}

int mlz__maps_prot(const mlz__maps *m, uintptr_t addr)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < m->r[mid].lo) hi = mid;
        else if (addr >= m->r[mid].hi) lo = mid + 1;
        else return m->r[mid].prot;
    }
    return -1;
}
