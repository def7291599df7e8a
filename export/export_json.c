/*
 * export_json.c - see export_json.h.
 */
#include "export_json.h"
#include "report.h"
#include "sitejson.h"

#include <jansson.h>
#include <stdlib.h>

static int cmp_live(const void *a, const void *b)
{
    double x = (*(const prof_site *const *)a)->live_bytes.value;
    double y = (*(const prof_site *const *)b)->live_bytes.value;
    return x < y ? 1 : x > y ? -1 : 0;
}

static json_t *frame_json(const mlz_meta *m, const mlz_frame *f)
{
    char label[1024];
    const char *file = mlz_meta_file(m, f->file_id);
    prof_frame_label(m, f, label, sizeof label);
    return json_pack("{s:s, s:s, s:i, s:s, s:i, s:I, s:b}", "function", rep_func(m, f),
                     "file", file ? file : "", "line", (int)f->line, "label", label,
                     "module", (int)f->module, "address", (json_int_t)rep_frame_pc(m, f),
                     "inlined", f->inlined);
}

int export_json_write(FILE *f, const prof *p, const char *file, uint64_t start_us, uint64_t at_us,
                      char *err, size_t errlen)
{
    const mlz_meta *m = p->meta;
    prof_site **order = malloc((p->nsites ? p->nsites : 1) * sizeof *order);
    json_t *root = json_object(), *sites = json_array(), *mods = json_array(), *tot = json_object();
    int rc = -1;
    if (!order || !root || !sites || !mods || !tot) {
        json_decref(sites); json_decref(mods); json_decref(tot);
        goto oom;
    }
    size_t k = 0;
    uint64_t samples = 0;
    for (size_t i = 0; i < p->nsites; i++)
        if (p->site_of[i] == i && p->sites[i].samples) {
            order[k++] = &p->sites[i];
            samples += p->sites[i].samples;
        }
    qsort(order, k, sizeof *order, cmp_live);

    json_object_set_new(root, "format", json_string("memlyze-export"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "file", json_string(file));
    json_object_set_new(root, "kind", m->kind ? json_string(m->kind) : json_null());
    json_object_set_new(root, "rate", json_integer((json_int_t)p->rate));
    json_object_set_new(root, "pid", json_integer((json_int_t)m->pid));
    json_object_set_new(root, "exe", m->exe ? json_string(m->exe) : json_null());
    json_object_set_new(root, "start_us", json_integer((json_int_t)start_us));
    json_object_set_new(root, "at_us", json_integer((json_int_t)at_us));

    sitejson_est(tot, "live_bytes", &p->live_bytes);
    sitejson_est(tot, "live_count", &p->live_count);
    json_object_set_new(tot, "live_samples", json_integer((json_int_t)p->live_samples));
    json_object_set_new(tot, "samples", json_integer((json_int_t)samples));
    json_object_set_new(tot, "peak_bytes", json_real(p->peak_bytes));
    json_object_set_new(tot, "peak_us", json_integer((json_int_t)p->peak_us));
    json_object_set_new(root, "totals", tot);

    for (size_t i = 0; i < m->nmodules; i++) {
        const mlz_meta_module *mod = &m->modules[i];
        json_array_append_new(mods, json_pack("{s:s, s:o, s:I, s:I, s:I}", "path", mod->path ? mod->path : "",
                                              "build_id", mod->build_id ? json_string(mod->build_id) : json_null(),
                                              "base", (json_int_t)mod->base, "size", (json_int_t)mod->size,
                                              "bias", (json_int_t)rep_module_bias(m, i)));
    }
    json_object_set_new(root, "modules", mods);

    for (size_t i = 0; i < k; i++) {
        const prof_site *s = order[i];
        json_t *o = sitejson_site(s), *fa = json_array();
        for (uint32_t j = 0; j < s->stack->depth; j++)
            json_array_append_new(fa, frame_json(m, &s->stack->frames[j]));
        json_object_set_new(o, "frames", fa);
        json_array_append_new(sites, o);
    }
    rc = sitejson_dump(root, sites, f);
    if (rc) snprintf(err, errlen, "write failed");
    free(order);
    return rc;
oom:
    snprintf(err, errlen, "out of memory");
    json_decref(root);
    free(order);
    return rc;
}
