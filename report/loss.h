/*
 * loss.h - what a trace lost while it was recorded, in one line: the
 * payload's counters (finalize copies them into the trace's metadata) of
 * samples it had to give up and of frees it could not record.
 */
#ifndef MLZ_LOSS_H
#define MLZ_LOSS_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

/* Writes a one-line description (no newline) into buf and returns 1 when
 * the counters object (metadata "counters", may be NULL) shows a loss, or
 * that the payload raised its sampling rate (the metadata's rate) to keep up;
 * returns 0 and leaves buf empty otherwise. */
int mlz_loss_describe(const json_t *counters, uint64_t rate, char *buf, size_t len);

/* The same for a .mlyze file: opens it and reads its metadata. 0 when the
 * file has no loss or cannot be read (its own errors are reported elsewhere). */
int mlz_loss_of_file(const char *path, char *buf, size_t len);

#endif
