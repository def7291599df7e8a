/*
 * jsonw.c - see jsonw.h. No stdio, no malloc: safe inside the target.
 */
#include "jsonw.h"

#include <string.h>

void mlz_jw_init(mlz_jw *w, char *buf, size_t cap)
{
    memset(w, 0, sizeof *w);
    w->buf = buf;
    w->cap = cap;
}

static void put(mlz_jw *w, const char *s, size_t n)
{
    if (w->overflow || n > w->cap - w->len) { w->overflow = 1; return; }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

static void putc1(mlz_jw *w, char c) { put(w, &c, 1); }

static void put_u64(mlz_jw *w, uint64_t v)
{
    char d[20];
    int k = 0;
    do { d[k++] = (char)('0' + v % 10); v /= 10; } while (v);
    char o[20];
    for (int i = 0; i < k; i++) o[i] = d[k - 1 - i];
    put(w, o, (size_t)k);
}

static void put_string(mlz_jw *w, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    putc1(w, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { putc1(w, '\\'); putc1(w, (char)c); }
        else if (c == '\n') put(w, "\\n", 2);
        else if (c == '\t') put(w, "\\t", 2);
        else if (c < 0x20 || c == 0x7f) {
            char e[6] = { '\\', 'u', '0', '0', hex[c >> 4], hex[c & 15] };
            put(w, e, 6);
        } else putc1(w, (char)c);
    }
    putc1(w, '"');
}

/* Comma and key before a member. */
static void member(mlz_jw *w, const char *key, size_t keylen)
{
    if (w->depth > 0) {
        if (w->count[w->depth - 1]) putc1(w, ',');
        w->count[w->depth - 1] = 1;
    }
    if (key) {
        put_string(w, key, keylen);
        putc1(w, ':');
    }
}

static void open_level(mlz_jw *w, char c)
{
    putc1(w, c);
    if (w->depth >= MLZ_JW_DEPTH) { w->overflow = 1; return; }
    w->closer[w->depth] = c == '{' ? '}' : ']';
    w->count[w->depth++] = 0;
}

void mlz_jw_obj(mlz_jw *w, const char *key) { member(w, key, key ? strlen(key) : 0); open_level(w, '{'); }
void mlz_jw_arr(mlz_jw *w, const char *key) { member(w, key, key ? strlen(key) : 0); open_level(w, '['); }

void mlz_jw_end(mlz_jw *w)
{
    if (w->depth == 0) { w->overflow = 1; return; }
    w->depth--;
    putc1(w, w->closer[w->depth]);
}

void mlz_jw_strn(mlz_jw *w, const char *key, const char *s, size_t n)
{
    member(w, key, key ? strlen(key) : 0);
    put_string(w, s, n);
}

void mlz_jw_str(mlz_jw *w, const char *key, const char *s)
{
    mlz_jw_strn(w, key, s, strlen(s));
}

void mlz_jw_u64(mlz_jw *w, const char *key, uint64_t v)
{
    member(w, key, key ? strlen(key) : 0);
    put_u64(w, v);
}

void mlz_jw_i64(mlz_jw *w, const char *key, int64_t v)
{
    member(w, key, key ? strlen(key) : 0);
    if (v < 0) { putc1(w, '-'); put_u64(w, (uint64_t)0 - (uint64_t)v); }
    else put_u64(w, (uint64_t)v);
}

void mlz_jw_bool(mlz_jw *w, const char *key, int v)
{
    member(w, key, key ? strlen(key) : 0);
    if (v) put(w, "true", 4); else put(w, "false", 5);
}

static size_t id_text(uint64_t id, char out[21])
{
    char d[20];
    size_t k = 0;
    do { d[k++] = (char)('0' + id % 10); id /= 10; } while (id);
    for (size_t i = 0; i < k; i++) out[i] = d[k - 1 - i];
    out[k] = 0;
    return k;
}

void mlz_jw_idkey_str(mlz_jw *w, uint64_t id, const char *s)
{
    char k[21];
    member(w, k, id_text(id, k));
    put_string(w, s, strlen(s));
}

void mlz_jw_idkey_arr(mlz_jw *w, uint64_t id)
{
    char k[21];
    member(w, k, id_text(id, k));
    open_level(w, '[');
}

int mlz_jw_ok(const mlz_jw *w)
{
    return !w->overflow && w->depth == 0 ? 0 : -1;
}
