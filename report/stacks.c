/*
 * stacks.c - see stacks.h.
 */
#include "stacks.h"

#include <stdlib.h>
#include <string.h>

int st_frames_init(st_frames *t)
{
    memset(t, 0, sizeof *t);
    t->map = keymap_new();
    return t->map ? 0 : -1;
}

void st_frames_free(st_frames *t)
{
    keymap_free(t->map);
    free(t->f);
    memset(t, 0, sizeof *t);
}

uint32_t st_frame_of(st_frames *t, const mlz_meta *m, const mlz_frame *f)
{
    const char *fn = rep_func(m, f), *file = mlz_meta_file(m, f->file_id);
    if (!file) file = "";
    size_t lf = strlen(fn), ll = strlen(file);
    char stackbuf[512], *key = lf + ll + 6 <= sizeof stackbuf ? stackbuf : malloc(lf + ll + 6);
    if (!key) return ST_NONE;
    /* "func\0file\0" + line: the names cannot contain NUL, so this is unambiguous. */
    memcpy(key, fn, lf + 1);
    memcpy(key + lf + 1, file, ll + 1);
    memcpy(key + lf + ll + 2, &f->line, 4);
    int added;
    uint32_t i = keymap_intern(t->map, key, lf + ll + 6, &added);
    if (key != stackbuf) free(key);
    if (i == UINT32_MAX || !added) return i;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        st_frame *nf = realloc(t->f, cap * sizeof *nf);
        if (!nf) return ST_NONE;   /* the key stays interned without a frame: give up */
        t->f = nf;
        t->cap = cap;
    }
    const char *k = keymap_key(t->map, i, NULL);
    t->f[t->n++] = (st_frame){ k, k + lf + 1, f->line, f->inlined };
    return i;
}

static uint32_t new_node(st_tree *t, uint32_t parent, uint32_t frame)
{
    if (t->count == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        st_node *n = realloc(t->n, cap * sizeof *n);
        if (!n) return ST_NONE;
        t->n = n;
        t->cap = cap;
    }
    uint32_t id = (uint32_t)t->count++;
    st_node *x = &t->n[id];
    memset(x, 0, sizeof *x);
    x->frame = frame;
    x->parent = parent;
    x->first_child = x->next_sibling = ST_NONE;
    if (parent != ST_NONE) {
        x->depth = t->n[parent].depth + 1;
        x->next_sibling = t->n[parent].first_child;
        t->n[parent].first_child = id;
    }
    return id;
}

int st_tree_init(st_tree *t, st_frames *frames)
{
    memset(t, 0, sizeof *t);
    t->frames = frames;
    t->kids = keymap_new();
    if (!t->kids || new_node(t, ST_NONE, ST_NONE) == ST_NONE) {
        st_tree_free(t);
        return -1;
    }
    return 0;
}

void st_tree_free(st_tree *t)
{
    keymap_free(t->kids);
    free(t->n);
    memset(t, 0, sizeof *t);
}

uint32_t st_tree_child(const st_tree *t, uint32_t parent, uint32_t frame)
{
    uint32_t key[2] = { parent, frame };
    uint32_t i = keymap_find(t->kids, key, sizeof key);
    return i == UINT32_MAX ? ST_NONE : i + 1;   /* node id = key index + 1 (st_tree_add) */
}

int st_tree_add(st_tree *t, const mlz_meta *m, const mlz_stack *st, const est *v)
{
    uint32_t node = 0;
    t->n[0].total.value += v->value;
    t->n[0].total.var += v->var;
    for (uint32_t j = st->depth; j-- > 0;) {
        uint32_t fr = st_frame_of(t->frames, m, &st->frames[j]);
        if (fr == ST_NONE) return -1;
        uint32_t key[2] = { node, fr };
        int added;
        uint32_t k = keymap_intern(t->kids, key, sizeof key, &added);
        if (k == UINT32_MAX) return -1;
        /* Nodes are created in the order their keys are interned, so the
         * key's index + 1 is the node id (node 0, the root, has no key). */
        if (added && new_node(t, node, fr) != k + 1) return -1;
        node = k + 1;
        t->n[node].total.value += v->value;
        t->n[node].total.var += v->var;
    }
    t->n[node].self.value += v->value;
    t->n[node].self.var += v->var;
    return 0;
}

int st_tree_from_prof(st_tree *t, const prof *p, enum rep_metric m)
{
    for (size_t i = 0; i < p->nsites; i++) {
        const prof_site *s = &p->sites[i];
        if (p->site_of[i] != i || !s->samples) continue;
        const est *v = rep_site_est(s, m);
        if (v->value <= 0) continue;
        if (st_tree_add(t, p->meta, s->stack, v)) return -1;
    }
    return 0;
}

static const st_tree *g_sort_tree;
static int cmp_kids(const void *a, const void *b)
{
    const st_node *x = &g_sort_tree->n[*(const uint32_t *)a], *y = &g_sort_tree->n[*(const uint32_t *)b];
    if (x->total.value != y->total.value) return x->total.value < y->total.value ? 1 : -1;
    const st_frame *fx = &g_sort_tree->frames->f[x->frame], *fy = &g_sort_tree->frames->f[y->frame];
    int c = strcmp(fx->func, fy->func);
    if (c) return c;
    c = strcmp(fx->file, fy->file);
    return c ? c : (fx->line > fy->line) - (fx->line < fy->line);
}

int st_tree_sort(st_tree *t)
{
    uint32_t *tmp = malloc((t->count ? t->count : 1) * sizeof *tmp);
    if (!tmp) return -1;
    g_sort_tree = t;
    for (size_t i = 0; i < t->count; i++) {
        size_t k = 0;
        for (uint32_t c = t->n[i].first_child; c != ST_NONE; c = t->n[c].next_sibling) tmp[k++] = c;
        if (k < 2) continue;
        qsort(tmp, k, sizeof *tmp, cmp_kids);
        t->n[i].first_child = tmp[0];
        for (size_t j = 0; j + 1 < k; j++) t->n[tmp[j]].next_sibling = tmp[j + 1];
        t->n[tmp[k - 1]].next_sibling = ST_NONE;
    }
    free(tmp);
    return 0;
}
