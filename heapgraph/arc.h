/*
 * arc.h - the Arcmem .arc object stream (seed 003, docs/FORMAT.md "Heap
 * dumps"): reading with every rule checked, and the pieces a writer needs.
 *
 * A stream is a sequence of declarations. Each starts with a u64 header
 * { objectid + size - 1 : 48, unused : 15, is_forward_decl : 1 }; bits 37..41
 * give the object's offset bits (5 + field), bit 42 is always 1. A full
 * declaration is followed by a pointer bitmap of ARC_BITMAP_BYTES(size) bytes
 * (one bit per whole 64-bit word of data, least significant bit first) and
 * the size bytes of data; a tagged word is 0 or an address inside a declared
 * object (bit 63: a weak reference).
 */
#ifndef MLZ_ARC_H
#define MLZ_ARC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ARC_FORWARD      (1ull << 63)   /* header: forward declaration */
#define ARC_WEAK         (1ull << 63)   /* pointer word: weak reference */
#define ARC_CLASS_BIT    (1ull << 42)   /* header: always set */
#define ARC_MAX_SIZE     (1ull << 36)   /* offset bits top out at 36 */
/* The bitmap: one bit per whole 64-bit word (size // 8 bits), in bytes. */
#define ARC_BITMAP_BYTES(size) ((((size) / 8) + 7) / 8)

/* Header fields. */
static inline unsigned arc_offset_bits(uint64_t size)      /* 5..36 for 1..2^36 */
{
    unsigned k = 5;
    while (k < 64 && (1ull << k) < size) k++;
    return k;
}
static inline uint64_t arc_header(uint64_t id, uint64_t size, int forward)
{
    return (id + size - 1) | (forward ? ARC_FORWARD : 0);
}

/* Ids: objects of one offset-bit class k get consecutive 2^k slots in the
 * class's region (bit 42 set, bits 37..41 = k - 5). */
typedef struct arc_ids {
    uint64_t next[32];        /* slots used per class */
} arc_ids;
/* A fresh id for an object of `size` (1..ARC_MAX_SIZE); 0 when the class is full. */
uint64_t arc_new_id(arc_ids *ids, uint64_t size);

/* Writing: each returns 0 or -1 (errno from stdio). */
int arc_put_forward(FILE *f, uint64_t id, uint64_t size);
int arc_put_object(FILE *f, uint64_t id, uint64_t size, const uint8_t *bitmap, const uint8_t *data);

/* ---- reading */
typedef struct arc_obj {
    uint64_t id, size;
    uint64_t off;             /* byte offset of its full declaration */
    uint64_t fwd_off;         /* of its forward declaration, UINT64_MAX if none */
    const uint8_t *bitmap, *data;   /* into the stream */
} arc_obj;

typedef struct arc_error {
    uint64_t offset;          /* byte offset in the stream */
    const char *rule;         /* short rule name, as docs/FORMAT.md lists them */
    char msg[200];
} arc_error;

typedef struct arc_file {
    uint8_t *buf;             /* the stream (owned) */
    size_t len;
    arc_obj *objs;            /* in full-declaration order */
    size_t nobjs;
    uint32_t *by_id;          /* object indices sorted by id */
    size_t root;              /* index of the first element's object */
} arc_file;

/* Parses and checks every rule; 0, or -1 with *e naming the first violation
 * (lowest byte offset). a owns buf afterwards in both cases. */
int  arc_parse(arc_file *a, uint8_t *buf, size_t len, arc_error *e);
/* Reads path and parses it; -1 with e->rule "io" when the file cannot be read. */
int  arc_open(arc_file *a, const char *path, arc_error *e);
void arc_close(arc_file *a);
/* The object whose range holds value (bit 63 ignored); -1 if none. */
long arc_find(const arc_file *a, uint64_t value);
/* Whether data word w of object o is tagged as a pointer. */
static inline int arc_tagged(const arc_obj *o, uint64_t w)
{
    return (o->bitmap[w / 8] >> (w % 8)) & 1;
}

#endif
