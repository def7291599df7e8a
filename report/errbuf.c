/*
 * errbuf.c - see errbuf.h.
 */
#include "errbuf.h"

#include <stdarg.h>
#include <stdio.h>

int errbuf_set(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && len) vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}
