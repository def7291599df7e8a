/*
 * stackbounds.c - the calling thread's stack mapping, without malloc.
 *
 * pthread_getattr_np would allocate (its cpuset, and stdio on /proc/self/maps
 * for the main thread), and it may be called from inside malloc. So we read
 * /proc/self/maps with raw syscalls (errno is never touched: the malloc hook
 * must not clobber the application's errno) through a small on-stack buffer
 * and stop at the line whose range holds the stack pointer. Lines are parsed
 * as a stream, so paths longer than the buffer need no special case.
 *
 * Cost: one openat/read.../close, tens of microseconds in a large process,
 * which is why callers cache the result per thread (mlz_stack_cache).
 */
#include "unwind.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>

#define MAPS_BUF 1024

static long raw_syscall3(long n, long a, long b, long c)
{
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return ret;
}

static inline uint64_t current_sp(void)
{
    uint64_t sp;
    __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
    return sp;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return -1;
}

/* Each line starts "start-end "; everything after the first space is skipped. */
static int maps_find(int fd, uint64_t addr, uint64_t *lo, uint64_t *hi)
{
    char buf[MAPS_BUF];
    enum { START, END, SKIP } st = START;
    uint64_t start = 0, end = 0;

    for (;;) {
        long n = raw_syscall3(SYS_read, fd, (long)buf, sizeof buf);
        if (n == -EINTR)
            continue;
        if (n < 0)
            return (int)n;
        if (n == 0)
            return -ENOENT;
        for (long i = 0; i < n; i++) {
            char ch = buf[i];
            int h;
            switch (st) {
            case START:
                if (ch == '-') { st = END; break; }
                if ((h = hexval(ch)) < 0) { st = SKIP; break; }
                start = start << 4 | (uint64_t)h;
                break;
            case END:
                if ((h = hexval(ch)) >= 0) { end = end << 4 | (uint64_t)h; break; }
                if (addr >= start && addr < end) {
                    *lo = start;
                    *hi = end;
                    return 0;
                }
                if (start > addr)
                    return -ENOENT;     /* lines are sorted by address */
                st = SKIP;
                break;
            case SKIP:
                break;
            }
            if (ch == '\n') {
                st = START;
                start = end = 0;
            }
        }
    }
}

int mlz_stack_bounds(uint64_t *lo, uint64_t *hi)
{
    uint64_t sp = current_sp();
    /* thread-self: /proc/self is the main thread, whose maps read empty
     * once it has exited (pthread_exit in main) while we run on. */
    long fd = raw_syscall3(SYS_openat, AT_FDCWD, (long)"/proc/thread-self/maps",
                           O_RDONLY | O_CLOEXEC);
    if (fd < 0)   /* before Linux 3.17 */
        fd = raw_syscall3(SYS_openat, AT_FDCWD, (long)"/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return (int)fd;
    int rc = maps_find((int)fd, sp, lo, hi);
    raw_syscall3(SYS_close, fd, 0, 0);
    return rc;
}

uint64_t mlz_stack_cache_hi(mlz_stack_cache *c)
{
    uint64_t sp = current_sp(), lo, hi;

    if (sp >= c->lo && sp < c->hi)
        return c->hi;
    if (mlz_stack_bounds(&lo, &hi) < 0)
        return 0;
    c->lo = lo;
    c->hi = hi;
    return hi;
}
