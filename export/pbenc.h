/*
 * pbenc.h - a minimal protocol-buffers encoder: varints, length-delimited
 * fields and packed repeated integers into a growing byte buffer. Enough to
 * write pprof's profile.proto; nested messages are built in a second buffer
 * and appended with pb_bytes.
 *
 * Scalars equal to zero are left out, as proto3 does: a reader takes the
 * default. Out of memory sticks in b->oom; check it once at the end.
 */
#ifndef MLZ_PBENC_H
#define MLZ_PBENC_H

#include <stddef.h>
#include <stdint.h>

typedef struct pb_buf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} pb_buf;

void pb_reset(pb_buf *b);                       /* empties it, keeps the memory */
void pb_free(pb_buf *b);
void pb_raw_varint(pb_buf *b, uint64_t v);
void pb_uint(pb_buf *b, unsigned field, uint64_t v);       /* varint field, skipped when 0 */
void pb_int(pb_buf *b, unsigned field, int64_t v);         /* int64 (two's complement varint) */
void pb_bool(pb_buf *b, unsigned field, int v);
void pb_bytes(pb_buf *b, unsigned field, const void *data, size_t len);  /* always written */
void pb_packed(pb_buf *b, unsigned field, const uint64_t *v, size_t n); /* packed varints */

#endif
