/*
 * mem.c - another process's memory, read without stopping it, and the
 * library's error line.
 */
#include "proc.h"
#include "proc_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static _Thread_local char last_error[512];

const char *mlz_proc_error(void) { return last_error; }

int mlz__proc_fail(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

int mlz_proc_read(pid_t pid, uint64_t addr, void *buf, size_t len)
{
    struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };
    ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n == (ssize_t)len) return 0;
    /* Partial read across an unmapped page, or a kernel without the call. */
    int err = errno;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = pread(fd, buf, len, (off_t)addr);
        err = errno;
        close(fd);
        if (n == (ssize_t)len) return 0;
    } else {
        err = errno;
    }
    err = err ? err : EIO;
    mlz__proc_fail(MLZ_PROC_EIO, "cannot read %zu bytes at 0x%llx in process %d: %s", len,
                   (unsigned long long)addr, (int)pid, strerror(err));
    errno = err;     /* callers name it too */
    return MLZ_PROC_EIO;
}
