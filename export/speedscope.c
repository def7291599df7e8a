/*
 * speedscope.c - see speedscope.h. Frames are shared between the profiles
 * and identified by symbol (function, file, line), so speedscope merges the
 * same call site across stacks.
 */
#include "speedscope.h"
#include "stacks.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define SPEEDSCOPE_SCHEMA "https://www.speedscope.app/file-format-schema.json"

static const struct {
    const char *name, *unit;
    int which;               /* 0 live bytes, 1 allocated bytes, 2 live objects, 3 allocations */
} metrics[] = {
    { "live bytes", "bytes", 0 },
    { "allocated bytes", "bytes", 1 },
    { "live objects", "none", 2 },
    { "allocations", "none", 3 },
};

static double value_of(const prof_site *s, int which)
{
    switch (which) {
    case 1: return s->alloc_bytes.value;
    case 2: return s->live_count.value;
    case 3: return s->alloc_count.value;
    default: return s->live_bytes.value;
    }
}

int speedscope_write(FILE *f, const prof *p, const char *name, char *err, size_t errlen)
{
    st_frames fr = { 0 };
    int rc = -1;
    json_t *root = json_object(), *frames = json_array(), *profiles = json_array();
    json_t **stacks = calloc(p->nsites ? p->nsites : 1, sizeof *stacks);
    if (st_frames_init(&fr) || !root || !frames || !profiles || !stacks) goto oom;

    /* Each site's stack, root first, as indices into the shared frames. */
    for (size_t i = 0; i < p->nsites; i++) {
        const prof_site *s = &p->sites[i];
        if (p->site_of[i] != i || !s->samples) continue;
        const mlz_stack *st = s->stack;
        json_t *a = stacks[i] = json_array();
        if (!a) goto oom;
        for (uint32_t j = st->depth; j-- > 0;) {
            size_t before = fr.n;
            uint32_t k = st_frame_of(&fr, p->meta, &st->frames[j]);
            if (k == ST_NONE) goto oom;
            if (fr.n > before) {   /* a new frame: describe it once */
                json_t *o = json_object();
                json_object_set_new(o, "name", json_string(fr.f[k].func));
                if (*fr.f[k].file) json_object_set_new(o, "file", json_string(fr.f[k].file));
                if (fr.f[k].line) json_object_set_new(o, "line", json_integer(fr.f[k].line));
                json_array_append_new(frames, o);
            }
            json_array_append_new(a, json_integer(k));
        }
    }
    for (size_t q = 0; q < sizeof metrics / sizeof metrics[0]; q++) {
        json_t *pr = json_object(), *samples = json_array(), *weights = json_array();
        double total = 0;
        char pname[512];
        for (size_t i = 0; i < p->nsites; i++) {
            if (!stacks[i]) continue;
            double v = value_of(&p->sites[i], metrics[q].which);
            if (!(v > 0)) continue;
            json_array_append(samples, stacks[i]);
            json_array_append_new(weights, json_real(v));
            total += v;
        }
        snprintf(pname, sizeof pname, "%s: %s", name, metrics[q].name);
        json_object_set_new(pr, "type", json_string("sampled"));
        json_object_set_new(pr, "name", json_string(pname));
        json_object_set_new(pr, "unit", json_string(metrics[q].unit));
        json_object_set_new(pr, "startValue", json_integer(0));
        json_object_set_new(pr, "endValue", json_real(total));
        json_object_set_new(pr, "samples", samples);
        json_object_set_new(pr, "weights", weights);
        json_array_append_new(profiles, pr);
    }
    json_object_set_new(root, "$schema", json_string(SPEEDSCOPE_SCHEMA));
    json_object_set_new(root, "shared", json_pack("{s:o}", "frames", frames));
    frames = NULL;
    json_object_set_new(root, "profiles", profiles);
    profiles = NULL;
    json_object_set_new(root, "name", json_string(name));
    json_object_set_new(root, "activeProfileIndex", json_integer(0));
    json_object_set_new(root, "exporter", json_string("memlyze"));
    if (json_dumpf(root, f, JSON_COMPACT | JSON_REAL_PRECISION(12))) {
        snprintf(err, errlen, "write failed");
        goto out;
    }
    fputc('\n', f);
    rc = 0;
    goto out;
oom:
    snprintf(err, errlen, "out of memory");
out:
    for (size_t i = 0; stacks && i < p->nsites; i++) json_decref(stacks[i]);
    free(stacks);
    json_decref(frames);
    json_decref(profiles);
    json_decref(root);
    st_frames_free(&fr);
    return rc;
}
