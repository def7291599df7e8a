/*
 * errmsg.c - the injector's one error line and its progress notes.
 *
 * The first cause recorded wins: a later failure while backing out (a
 * thread that cannot be restored, a scratch page that cannot be unmapped)
 * must not replace the reason the user needs to read.
 */
#include "injector.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static char errbuf[1024];
int mlz__verbose;

void mlz__err(const char *fmt, ...)
{
    if (errbuf[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
}

const char *mlz__errmsg(void) { return errbuf; }

int mlz__proc_err(int rc)
{
    mlz__err("%s", mlz_proc_error());
    return rc == MLZ_PROC_EIO || rc == MLZ_PROC_ENOMEM ? MLZ_INJ_EIO : MLZ_INJ_EELF;
}
void mlz__err_clear(void) { errbuf[0] = 0; }

void mlz__note(const char *fmt, ...)
{
    if (!mlz__verbose) return;
    static uint64_t t0;
    if (!t0) t0 = mlz__now_us();
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "memlyze: [%7.2f ms] ", (mlz__now_us() - t0) / 1000.0);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

uint64_t mlz__now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}
