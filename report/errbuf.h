/*
 * errbuf.h - library code in reader/ reports failures as one line in the
 * caller's buffer and returns -1; only commands print.
 */
#ifndef MLZ_ERRBUF_H
#define MLZ_ERRBUF_H

#include <stddef.h>

/* Formats the message into err (len bytes); returns -1. */
int errbuf_set(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
