/*
 * jsonw.h - a small JSON emitter that never allocates: it writes into the
 * caller's buffer and remembers overflow instead of failing mid-way. Used
 * for .mlyze metadata by the payload (inside the target) and by the tools.
 * Commas are inserted automatically; keys are NULL inside arrays.
 */
#ifndef MLZ_JSONW_H
#define MLZ_JSONW_H

#include <stddef.h>
#include <stdint.h>

#define MLZ_JW_DEPTH 32

typedef struct mlz_jw {
    char  *buf;
    size_t cap, len;
    int    overflow;          /* set once anything did not fit */
    int    depth;
    unsigned char count[MLZ_JW_DEPTH];  /* members written per open level (0/1) */
    char   closer[MLZ_JW_DEPTH];        /* '}' or ']' per open level */
} mlz_jw;

void mlz_jw_init(mlz_jw *w, char *buf, size_t cap);
void mlz_jw_obj(mlz_jw *w, const char *key);      /* opens {  */
void mlz_jw_arr(mlz_jw *w, const char *key);      /* opens [  */
void mlz_jw_end(mlz_jw *w);                       /* closes } or ] */
void mlz_jw_str(mlz_jw *w, const char *key, const char *s);
void mlz_jw_strn(mlz_jw *w, const char *key, const char *s, size_t n);
void mlz_jw_u64(mlz_jw *w, const char *key, uint64_t v);
void mlz_jw_i64(mlz_jw *w, const char *key, int64_t v);
void mlz_jw_bool(mlz_jw *w, const char *key, int v);
/* Key from a number: the spec's tables are keyed by decimal ids. */
void mlz_jw_idkey_str(mlz_jw *w, uint64_t id, const char *s);
void mlz_jw_idkey_arr(mlz_jw *w, uint64_t id);
/* 0 when everything fit and all levels are closed. */
int  mlz_jw_ok(const mlz_jw *w);

#endif
