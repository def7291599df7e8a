/*
 * report.c - see report.h.
 */
#include "report.h"
#include "cli.h"          /* cli_bytes, cli_parse_time: formatting only */


#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rep_parse_metric(const char *s, enum rep_metric *m)
{
    if (!strcmp(s, "live")) *m = REP_LIVE;
    else if (!strcmp(s, "allocated")) *m = REP_ALLOCATED;
    else if (!strcmp(s, "count")) *m = REP_COUNT;
    else return -1;
    return 0;
}

const char *rep_metric_name(enum rep_metric m)
{
    return m == REP_ALLOCATED ? "allocated bytes" : m == REP_COUNT ? "allocations" : "live bytes";
}

const est *rep_site_est(const prof_site *s, enum rep_metric m)
{
    return m == REP_ALLOCATED ? &s->alloc_bytes : m == REP_COUNT ? &s->alloc_count : &s->live_bytes;
}

const char *rep_fmt_value(enum rep_metric m, double v, char *buf, size_t len)
{
    if (m == REP_COUNT) snprintf(buf, len, "%.0f", v);
    else cli_bytes(v, buf, len);
    return buf;
}

int rep_parse_at(const char *s, rep_at *at)
{
    uint64_t t;
    at->s = NULL;
    if (cli_parse_time(s, 0, &t)) return -1;
    at->s = s;
    return 0;
}

uint64_t rep_at_until(const rep_at *at, uint64_t start_us)
{
    uint64_t t;
    if (!at || !at->s || cli_parse_time(at->s, start_us, &t)) return UINT64_MAX;
    return t;
}



const char *rep_func(const mlz_meta *m, const mlz_frame *f)
{
    const char *fn = mlz_meta_function(m, f->func_id);
    return fn && *fn ? fn : "??";
}

uint64_t rep_module_bias(const mlz_meta *m, size_t module)
{
    if (module >= m->nmodules) return 0;
    json_t *mods = json_object_get(m->root, "modules");
    json_t *b = json_object_get(json_array_get(mods, module), "bias");
    if (json_is_integer(b)) return (uint64_t)json_integer_value(b);
    return m->modules[module].base;
}

uint64_t rep_frame_pc(const mlz_meta *m, const mlz_frame *f)
{
    if (f->module < 0 || (size_t)f->module >= m->nmodules) return f->addr;
    return rep_module_bias(m, (size_t)f->module) + f->addr;
}


