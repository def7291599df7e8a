/*
 * sitejson.c - see sitejson.h.
 */
#include "sitejson.h"

void sitejson_est(json_t *o, const char *key, const est *e)
{
    char ci[96];
    snprintf(ci, sizeof ci, "%s_ci95", key);
    json_object_set_new(o, key, json_real(e->value));
    json_object_set_new(o, ci, json_real(est_ci95(e)));
}

json_t *sitejson_site(const prof_site *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "stack_id", json_integer((json_int_t)s->stack->id));
    json_object_set_new(o, "samples", json_integer((json_int_t)s->samples));
    json_object_set_new(o, "live_samples", json_integer((json_int_t)s->live_samples));
    sitejson_est(o, "live_bytes", &s->live_bytes);
    sitejson_est(o, "live_count", &s->live_count);
    sitejson_est(o, "alloc_bytes", &s->alloc_bytes);
    sitejson_est(o, "alloc_count", &s->alloc_count);
    json_object_set_new(o, "peak_bytes", json_real(s->peak_bytes));
    json_object_set_new(o, "peak_us", json_integer((json_int_t)s->peak_us));
    return o;
}

json_t *sitejson_frame_names(const mlz_meta *m, const mlz_stack *st, uint32_t max)
{
    json_t *fa = json_array();
    char name[512];
    for (uint32_t j = 0; j < st->depth && j < max; j++) {
        prof_frame_name(m, &st->frames[j], name, sizeof name);
        json_array_append_new(fa, json_string(name));
    }
    return fa;
}

int sitejson_dump(json_t *report, json_t *sites, FILE *f)
{
    json_object_set_new(report, "sites", sites);
    int rc = json_dumpf(report, f, JSON_INDENT(1) | JSON_REAL_PRECISION(17)) || fputc('\n', f) == EOF ? -1 : 0;
    json_decref(report);
    return rc;
}
