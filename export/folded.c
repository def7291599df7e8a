/*
 * folded.c - see folded.h.
 */
#include "folded.h"
#include "keymap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct line_ref { const char *text; double v; } line_ref;

static int cmp_line(const void *a, const void *b)
{
    return strcmp(((const line_ref *)a)->text, ((const line_ref *)b)->text);
}

/* Appends s to buf (growing it); in a name (sep 0), ';' and line breaks are
 * made harmless. */
static int append(char **buf, size_t *n, size_t *cap, const char *s, int sep)
{
    size_t len = strlen(s);
    if (*n + len + 8 > *cap) {
        size_t c = (*cap ? *cap : 256);
        while (*n + len + 8 > c) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        (*buf)[(*n)++] = sep ? ch : ch == ';' ? ':' : (ch == '\n' || ch == '\r') ? ' ' : ch;
    }
    (*buf)[*n] = 0;
    return 0;
}

int folded_write(FILE *f, const prof *p, enum rep_metric m, char *err, size_t errlen)
{
    keymap *lines = keymap_new();
    double *val = calloc(p->nsites ? p->nsites : 1, sizeof *val);
    line_ref *out = NULL;
    char *buf = NULL;
    size_t cap = 0;
    int rc = -1;
    if (!lines || !val) goto oom;
    for (size_t i = 0; i < p->nsites; i++) {
        const prof_site *s = &p->sites[i];
        if (p->site_of[i] != i || !s->samples) continue;
        double v = rep_site_est(s, m)->value;
        if (!(v > 0)) continue;
        size_t n = 0;
        const mlz_stack *st = s->stack;
        if (append(&buf, &n, &cap, "", 1)) goto oom;
        for (uint32_t j = st->depth; j-- > 0;) {
            if ((j + 1 < st->depth && append(&buf, &n, &cap, ";", 1)) ||
                append(&buf, &n, &cap, rep_func(p->meta, &st->frames[j]), 0) ||
                (st->frames[j].inlined && append(&buf, &n, &cap, "_[i]", 1)))
                goto oom;
        }
        if (!st->depth && append(&buf, &n, &cap, "[no frames]", 1)) goto oom;
        uint32_t k = keymap_intern(lines, buf, n, NULL);
        if (k == UINT32_MAX) goto oom;
        val[k] += v;   /* at most one line per site: k < nsites */
    }
    size_t nl = keymap_count(lines);
    out = malloc((nl ? nl : 1) * sizeof *out);
    if (!out) goto oom;
    for (size_t k = 0; k < nl; k++) out[k] = (line_ref){ keymap_key(lines, (uint32_t)k, NULL), val[k] };
    qsort(out, nl, sizeof *out, cmp_line);
    for (size_t k = 0; k < nl; k++) {
        long long v = llround(out[k].v);
        if (v > 0) fprintf(f, "%s %lld\n", out[k].text, v);
    }
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "out of memory");
done:
    free(buf);
    free(out);
    free(val);
    keymap_free(lines);
    return rc;
}
