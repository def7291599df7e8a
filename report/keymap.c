/*
 * keymap.c - see keymap.h. Open addressing over a power-of-two table of
 * entry numbers, kept at most half full; keys live in chunks that never move,
 * so the pointers keymap_key returns stay valid while the map grows.
 */
#include "keymap.h"

#include <stdlib.h>
#include <string.h>

#define KEYMAP_CHUNK 65536   /* arena chunk; larger keys get a chunk of their own */

typedef struct kentry {
    const char *key;
    uint32_t len, hash;
} kentry;

typedef struct kchunk {
    struct kchunk *next;
    size_t used, cap;
    char data[];
} kchunk;

struct keymap {
    uint32_t *slots;          /* entry index + 1; 0 = empty */
    size_t mask;
    kentry *e;
    size_t n, cap;
    kchunk *chunks;
};

static uint32_t hash_of(const void *key, size_t len)
{
    /* FNV-1a, folded: keys are short (frames, strings), so it is enough. */
    const unsigned char *p = key;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

keymap *keymap_new(void)
{
    keymap *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->mask = 255;
    m->slots = calloc(m->mask + 1, sizeof *m->slots);
    if (!m->slots) { free(m); return NULL; }
    return m;
}

void keymap_free(keymap *m)
{
    if (!m) return;
    for (kchunk *c = m->chunks, *nx; c; c = nx) { nx = c->next; free(c); }
    free(m->slots);
    free(m->e);
    free(m);
}

static const char *store(keymap *m, const void *key, size_t len)
{
    kchunk *c = m->chunks;
    if (!c || c->cap - c->used < len + 1) {
        size_t cap = len + 1 > KEYMAP_CHUNK ? len + 1 : KEYMAP_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = m->chunks;
        m->chunks = c;
    }
    char *p = c->data + c->used;
    memcpy(p, key, len);
    p[len] = 0;   /* string keys can be used as C strings */
    c->used += len + 1;
    return p;
}

static int grow(keymap *m)
{
    size_t mask = m->mask * 2 + 1;
    uint32_t *s = calloc(mask + 1, sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < m->n; i++) {
        size_t j = m->e[i].hash & mask;
        while (s[j]) j = (j + 1) & mask;
        s[j] = (uint32_t)i + 1;
    }
    free(m->slots);
    m->slots = s;
    m->mask = mask;
    return 0;
}

static size_t probe(const keymap *m, const void *key, size_t len, uint32_t h)
{
    size_t j = h & m->mask;
    while (m->slots[j]) {
        const kentry *e = &m->e[m->slots[j] - 1];
        if (e->hash == h && e->len == len && !memcmp(e->key, key, len)) return j;
        j = (j + 1) & m->mask;
    }
    return j;
}

uint32_t keymap_find(const keymap *m, const void *key, size_t len)
{
    size_t j = probe(m, key, len, hash_of(key, len));
    return m->slots[j] ? m->slots[j] - 1 : UINT32_MAX;
}

uint32_t keymap_intern(keymap *m, const void *key, size_t len, int *added)
{
    uint32_t h = hash_of(key, len);
    size_t j = probe(m, key, len, h);
    if (added) *added = 0;
    if (m->slots[j]) return m->slots[j] - 1;
    if (len > UINT32_MAX || m->n >= UINT32_MAX - 1) return UINT32_MAX;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        kentry *e = realloc(m->e, cap * sizeof *e);
        if (!e) return UINT32_MAX;
        m->e = e;
        m->cap = cap;
    }
    const char *k = store(m, key, len);
    if (!k) return UINT32_MAX;
    m->e[m->n] = (kentry){ k, (uint32_t)len, h };
    m->slots[j] = (uint32_t)++m->n;
    if (m->n * 2 > m->mask && grow(m)) {
        m->slots[j] = 0;   /* keep the map consistent: undo the insert */
        m->n--;
        return UINT32_MAX;
    }
    if (added) *added = 1;
    return (uint32_t)(m->n - 1);
}

const char *keymap_key(const keymap *m, uint32_t i, size_t *len)
{
    if (len) *len = m->e[i].len;
    return m->e[i].key;
}

size_t keymap_count(const keymap *m)
{
    return m->n;
}
