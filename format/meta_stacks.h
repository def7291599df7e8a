/*
 * meta_stacks.h - a fast path for the largest part of a trace's metadata,
 * its "stack_traces" object, parsed straight into frames without a JSON
 * tree (jansson builds some 17 allocations per frame: 70 ms for the 26000
 * frames of a recorded redis). It takes exactly the shape our writers
 * produce; on anything else it declines, and metadata.c parses the whole
 * document with jansson as before, so results and errors never differ.
 */
#ifndef MLZ_META_STACKS_H
#define MLZ_META_STACKS_H

#include <stddef.h>
#include <stdint.h>

/* A frame as written, before its ids are checked against the tables. */
typedef struct mlz_raw_frame {
    uint64_t file, func, line, module, addr;
    uint8_t  has_module, inlined;
} mlz_raw_frame;

typedef struct mlz_raw_stacks {
    size_t         n;        /* stacks, in document order */
    uint64_t      *id;       /* [n] */
    size_t        *first;    /* [n + 1]: stack i's frames are frames[first[i] .. first[i + 1]) */
    mlz_raw_frame *frames;
} mlz_raw_stacks;

/* Finds the top-level key "stack_traces" of the JSON document
 * text[0..len) and parses its value as mlz_meta_parse_stacks does: 0 with
 * the value's span [*b, *e) and the stacks in s; -1 (s left empty) if
 * there is no such key, or two, or the scan cannot follow the top level,
 * or the value is not of the shape below. */
int mlz_meta_fast_stacks(const char *text, size_t len, size_t *b, size_t *e, mlz_raw_stacks *s);

/* Parses the stack_traces object p[0..n): decimal keys (no leading zero),
 * each an array of frame objects with non-negative integers file_id, line
 * (< 2^32), func_id and optionally module and addr (at most 18 digits),
 * and an optional boolean inline, each key at most once. 0, or -1 (s
 * left empty) on anything else, or on two stacks with one id. */
int mlz_meta_parse_stacks(const char *p, size_t n, mlz_raw_stacks *s);

void mlz_raw_stacks_free(mlz_raw_stacks *s);

#endif
