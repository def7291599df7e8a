/*
 * proc_internal.h - what the files of the proc library share.
 */
#ifndef MLZ_PROC_INTERNAL_H
#define MLZ_PROC_INTERNAL_H

/* Records one line for mlz_proc_error() and returns code. */
int mlz__proc_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
