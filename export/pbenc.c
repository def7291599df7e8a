/*
 * pbenc.c - see pbenc.h. Wire types: 0 varint, 2 length-delimited.
 */
#include "pbenc.h"

#include <stdlib.h>
#include <string.h>

enum { PB_VARINT = 0, PB_LEN = 2 };

static int reserve(pb_buf *b, size_t more)
{
    if (b->oom) return -1;
    if (b->cap - b->n >= more) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->n < more) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) { b->oom = 1; return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

void pb_reset(pb_buf *b) { b->n = 0; }

void pb_free(pb_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void pb_raw_varint(pb_buf *b, uint64_t v)
{
    if (reserve(b, 10)) return;
    while (v >= 0x80) {
        b->p[b->n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b->p[b->n++] = (uint8_t)v;
}

static void tag(pb_buf *b, unsigned field, unsigned wire)
{
    pb_raw_varint(b, (uint64_t)field << 3 | wire);
}

void pb_uint(pb_buf *b, unsigned field, uint64_t v)
{
    if (!v) return;
    tag(b, field, PB_VARINT);
    pb_raw_varint(b, v);
}

void pb_int(pb_buf *b, unsigned field, int64_t v)
{
    pb_uint(b, field, (uint64_t)v);   /* negative int64: 10 bytes, as protobuf does */
}

void pb_bool(pb_buf *b, unsigned field, int v)
{
    pb_uint(b, field, v ? 1 : 0);
}

void pb_bytes(pb_buf *b, unsigned field, const void *data, size_t len)
{
    tag(b, field, PB_LEN);
    pb_raw_varint(b, len);
    if (reserve(b, len)) return;
    if (len) memcpy(b->p + b->n, data, len);
    b->n += len;
}

void pb_packed(pb_buf *b, unsigned field, const uint64_t *v, size_t n)
{
    if (!n) return;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t x = v[i];
        do { len++; x >>= 7; } while (x);
    }
    tag(b, field, PB_LEN);
    pb_raw_varint(b, len);
    for (size_t i = 0; i < n; i++) pb_raw_varint(b, v[i]);
}
