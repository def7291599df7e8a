/*
 * arc_write.c - ids and declarations of the .arc stream (seed 003).
 */
#include "arc.h"

uint64_t arc_new_id(arc_ids *ids, uint64_t size)
{
    if (size == 0 || size > ARC_MAX_SIZE) return 0;
    unsigned k = arc_offset_bits(size), c = k - 5;
    /* The class's region spans bits 0..36: 2^(37-k) slots of 2^k bytes. */
    if (ids->next[c] >= (1ull << (37 - k))) return 0;
    return ARC_CLASS_BIT | ((uint64_t)c << 37) | (ids->next[c]++ << k);
}

static int put_u64(FILE *f, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
    return fwrite(b, 1, 8, f) == 8 ? 0 : -1;
}

int arc_put_forward(FILE *f, uint64_t id, uint64_t size)
{
    return put_u64(f, arc_header(id, size, 1));
}

int arc_put_object(FILE *f, uint64_t id, uint64_t size, const uint8_t *bitmap, const uint8_t *data)
{
    size_t nb = ARC_BITMAP_BYTES(size);
    if (put_u64(f, arc_header(id, size, 0))) return -1;
    if (nb && fwrite(bitmap, 1, nb, f) != nb) return -1;
    return fwrite(data, 1, size, f) == size ? 0 : -1;
}
