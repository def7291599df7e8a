/*
 * meta_stacks.c - the fast path for "stack_traces" (see meta_stacks.h).
 *
 * Two small scanners: one follows the document's top level (jansson then
 * checks the rest of the document, with the stack_traces value replaced
 * by {}); the other parses that value, strictly, into an array of frames.
 * Either declines (-1) rather than guess: the caller then parses the
 * whole document the slow, general way.
 */
#include "meta_stacks.h"
#include "growbuf.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64   /* nesting the top-level scan follows */

static const char *ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    return p;
}

/* Past a string starting at p (at its opening quote); NULL if unterminated. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\') {
            if (++p == end) return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

/* Past one JSON value at p; NULL where the scan cannot follow. Not a
 * validator: jansson reads the document afterwards. */
static const char *skip_value(const char *p, const char *end, int depth)
{
    if (p >= end || depth > MAX_DEPTH) return NULL;
    if (*p == '"') return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = ws(p + 1, end);
        if (p < end && *p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (p >= end || *p != '"' || !(p = skip_string(p, end))) return NULL;
                p = ws(p, end);
                if (p >= end || *p != ':') return NULL;
                p = ws(p + 1, end);
            }
            if (!(p = skip_value(p, end, depth + 1))) return NULL;
            p = ws(p, end);
            if (p < end && *p == ',') { p = ws(p + 1, end); continue; }
            return p < end && *p == close ? p + 1 : NULL;
        }
    }
    const char *q = p;   /* number, true, false, null */
    while (q < end && ((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'z') || *q == '-' || *q == '+' ||
                       *q == '.' || *q == 'E'))
        q++;
    return q > p ? q : NULL;
}

static const char *stacks_at(const char *p, const char *end, mlz_raw_stacks *s);

int mlz_meta_fast_stacks(const char *text, size_t len, size_t *b, size_t *e, mlz_raw_stacks *s)
{
    static const char key[] = "\"stack_traces\"";
    const char *end = text + len, *p = ws(text, end);
    memset(s, 0, sizeof *s);
    if (p >= end || *p != '{') return -1;
    p = ws(p + 1, end);
    int found = 0;
    while (p < end && *p == '"') {
        const char *k = p;
        if (!(p = skip_string(p, end))) goto decline;
        int is_stacks = (size_t)(p - k) == sizeof key - 1 && !memcmp(k, key, sizeof key - 1);
        p = ws(p, end);
        if (p >= end || *p != ':') goto decline;
        p = ws(p + 1, end);
        const char *v = p;
        if (is_stacks) {
            if (found++ || !(p = stacks_at(p, end, s))) goto decline;   /* twice: jansson's to report */
            *b = (size_t)(v - text);
            *e = (size_t)(p - text);
        } else if (!(p = skip_value(p, end, 1))) {
            goto decline;
        }
        p = ws(p, end);
        if (p >= end || *p != ',') break;
        p = ws(p + 1, end);
    }
    if (found) return 0;
decline:
    mlz_raw_stacks_free(s);
    return -1;
}

/* A non-negative integer of at most 18 digits, no leading zero, not
 * followed by a fraction or exponent. */
static const char *uint_at(const char *p, const char *end, uint64_t *v)
{
    const char *q = p;
    uint64_t x = 0;
    while (q < end && *q >= '0' && *q <= '9' && q - p < 19) x = x * 10 + (uint64_t)(*q++ - '0');
    if (q == p || q - p > 18 || (*p == '0' && q - p > 1)) return NULL;
    if (q < end && (*q == '.' || *q == 'e' || *q == 'E' || (*q >= '0' && *q <= '9'))) return NULL;
    *v = x;
    return q;
}

enum { K_FILE = 1, K_LINE = 2, K_FUNC = 4, K_MODULE = 8, K_ADDR = 16, K_INLINE = 32 };

/* One frame object at p; past it, or NULL. */
static const char *frame_at(const char *p, const char *end, mlz_raw_frame *f)
{
    static const struct { const char *name; unsigned len, bit; } keys[] = {
        { "\"file_id\"", 9, K_FILE }, { "\"line\"", 6, K_LINE }, { "\"func_id\"", 9, K_FUNC },
        { "\"module\"", 8, K_MODULE }, { "\"addr\"", 6, K_ADDR }, { "\"inline\"", 8, K_INLINE },
    };
    if (p >= end || *p != '{') return NULL;
    memset(f, 0, sizeof *f);
    unsigned seen = 0;
    p = ws(p + 1, end);
    while (p < end && *p == '"') {
        unsigned bit = 0;
        for (unsigned k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if ((size_t)(end - p) >= keys[k].len && p[1] == keys[k].name[1] && !memcmp(p, keys[k].name, keys[k].len)) {
                bit = keys[k].bit;
                p += keys[k].len;
                break;
            }
        if (!bit || (seen & bit)) return NULL;
        seen |= bit;
        p = ws(p, end);
        if (p >= end || *p != ':') return NULL;
        p = ws(p + 1, end);
        if (bit == K_INLINE) {
            if ((size_t)(end - p) >= 4 && !memcmp(p, "true", 4)) f->inlined = 1, p += 4;
            else if ((size_t)(end - p) >= 5 && !memcmp(p, "false", 5)) p += 5;
            else return NULL;
        } else {
            uint64_t *dst = bit == K_FILE ? &f->file : bit == K_LINE ? &f->line : bit == K_FUNC ? &f->func
                          : bit == K_MODULE ? &f->module : &f->addr;
            if (!(p = uint_at(p, end, dst))) return NULL;
        }
        p = ws(p, end);
        if (p >= end || *p != ',') break;
        p = ws(p + 1, end);
        if (p >= end || *p != '"') return NULL;
    }
    if (p >= end || *p != '}') return NULL;
    if ((seen & (K_FILE | K_LINE | K_FUNC)) != (K_FILE | K_LINE | K_FUNC) || f->line > UINT32_MAX) return NULL;
    f->has_module = (seen & K_MODULE) != 0;
    return p + 1;
}

static int cmp_id(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The stacks object at p, into s (which the caller frees); past it, or
 * NULL. */
static const char *stacks_at(const char *p, const char *end, mlz_raw_stacks *s)
{
    size_t cap_s = 0, cap_first = 0, cap_f = 0, nf = 0;
    if (p >= end || *p != '{') return NULL;
    p = ws(p + 1, end);
    while (p < end && *p == '"') {
        uint64_t id = 0;   /* the key: decimal, no leading zero, no overflow */
        const char *d = ++p;
        while (p < end && *p >= '0' && *p <= '9') {
            if (id > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) return NULL;
            id = id * 10 + (uint64_t)(*p++ - '0');
        }
        if (p == d || (*d == '0' && p - d > 1) || p >= end || *p != '"') return NULL;
        p = ws(p + 1, end);
        if (p >= end || *p != ':') return NULL;
        p = ws(p + 1, end);
        if (p >= end || *p != '[') return NULL;
        if (grow_to((void **)&s->id, &cap_s, s->n + 1, sizeof *s->id) ||
            grow_to((void **)&s->first, &cap_first, s->n + 2, sizeof *s->first))
            return NULL;
        s->id[s->n] = id;
        s->first[s->n++] = nf;
        p = ws(p + 1, end);
        while (p < end && *p == '{') {
            if (grow_to((void **)&s->frames, &cap_f, nf + 1, sizeof *s->frames)) return NULL;
            if (!(p = frame_at(p, end, &s->frames[nf++]))) return NULL;
            p = ws(p, end);
            if (p >= end || *p != ',') break;
            p = ws(p + 1, end);
            if (p >= end || *p != '{') return NULL;
        }
        if (p >= end || *p != ']') return NULL;
        p = ws(p + 1, end);
        if (p >= end || *p != ',') break;
        p = ws(p + 1, end);
        if (p >= end || *p != '"') return NULL;
    }
    if (p >= end || *p != '}') return NULL;
    if (grow_to((void **)&s->first, &cap_first, s->n + 1, sizeof *s->first)) return NULL;
    s->first[s->n] = nf;
    /* Two keys of one id: jansson rejects the duplicate, so decline. */
    uint64_t *ids = malloc((s->n ? s->n : 1) * sizeof *ids);
    if (!ids) return NULL;
    if (s->n) memcpy(ids, s->id, s->n * sizeof *ids);
    qsort(ids, s->n, sizeof *ids, cmp_id);
    int dup = 0;
    for (size_t i = 1; i < s->n; i++) dup |= ids[i] == ids[i - 1];
    free(ids);
    return dup ? NULL : p + 1;
}

int mlz_meta_parse_stacks(const char *p, size_t n, mlz_raw_stacks *s)
{
    memset(s, 0, sizeof *s);
    const char *q = stacks_at(p, p + n, s);
    if (q && ws(q, p + n) == p + n) return 0;
    mlz_raw_stacks_free(s);
    return -1;
}

void mlz_raw_stacks_free(mlz_raw_stacks *s)
{
    free(s->id);
    free(s->first);
    free(s->frames);
    memset(s, 0, sizeof *s);
}
