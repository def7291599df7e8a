/*
 * pairdiff.c - see pairdiff.h.
 */
#include "pairdiff.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static const char *session_of(const mlz_meta *m)
{
    json_t *v = m->root ? json_object_get((json_t *)m->root, "session") : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int pd_same_session(const mlz_meta *a, const mlz_meta *b, const char **why)
{
    const char *sa = session_of(a), *sb = session_of(b);
    if (a->pid && b->pid && a->pid != b->pid) *why = "different processes";
    else if (!sa || !sb) *why = "no sampling session recorded";
    else if (strcmp(sa, sb)) *why = "different attach sessions";
    else if (a->rate != b->rate) *why = "different sampling rates";
    else return 1;
    return 0;
}

typedef struct walk {
    const prof *self, *other;
    int sign;
    pd_fn fn;
    void *arg;
} walk;

/* Reports o (a sample of w->self) unless w->other holds the same sample. */
static void visit(const addr_obj *o, void *arg)
{
    walk *w = arg;
    const addr_obj *x = addrmap_find(&w->other->live, o->addr);
    if (x && x->time_us == o->time_us && x->size == o->size && x->thread == o->thread) return;
    w->fn(w->arg, w->self, o, w->sign);
}

void pd_changes(const prof *a, const prof *b, pd_fn fn, void *arg)
{
    walk born = { b, a, +1, fn, arg }, died = { a, b, -1, fn, arg };
    addrmap_each(&b->live, visit, &born);
    addrmap_each(&a->live, visit, &died);
}

void pd_add(pd_growth *g, double weight, double var, int sign)
{
    est *e = sign > 0 ? &g->born : &g->died;
    e->value += weight;
    e->var += var;
}

double pd_value(const pd_growth *g)
{
    return g->born.value - g->died.value;
}

/* Score interval of one part's total T: (est - T)^2 <= z^2 r T. */
static void score95(const est *e, double *lo, double *hi)
{
    const double z = 1.96;
    if (e->value <= 0 || e->var <= 0) { *lo = *hi = e->value; return; }
    double r = e->var / e->value, c = z * z * r / 2, h = sqrt(z * z * r * e->value + c * c);
    *lo = e->value + c - h;
    *hi = e->value + c + h;
    if (*lo < 0) *lo = 0;    /* rounding: the roots' product is est^2 >= 0 */
}

void pd_interval95(const pd_growth *g, double *lo, double *hi)
{
    double bl, bh, dl, dh, b = g->born.value, d = g->died.value;
    score95(&g->born, &bl, &bh);
    score95(&g->died, &dl, &dh);
    *lo = b - d - sqrt((b - bl) * (b - bl) + (dh - d) * (dh - d));
    *hi = b - d + sqrt((bh - b) * (bh - b) + (d - dl) * (d - dl));
}
