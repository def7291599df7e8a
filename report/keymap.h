/*
 * keymap.h - byte-string key -> dense index, for interning in the report
 * writers (frames, functions, locations, strings of a pprof string table,
 * nodes of a frame tree). Keys are copied into an arena; the n-th distinct key
 * gets index n, so callers keep their own parallel arrays.
 */
#ifndef MLZ_KEYMAP_H
#define MLZ_KEYMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct keymap keymap;   /* opaque */

keymap  *keymap_new(void);
void     keymap_free(keymap *m);
/* Index of key, adding it when absent (*added = 1). UINT32_MAX on out of memory. */
uint32_t keymap_intern(keymap *m, const void *key, size_t len, int *added);
/* Index of key, or UINT32_MAX when absent. */
uint32_t keymap_find(const keymap *m, const void *key, size_t len);
/* The key of index i (its bytes stay valid until keymap_free). */
const char *keymap_key(const keymap *m, uint32_t i, size_t *len);
size_t   keymap_count(const keymap *m);

#endif
