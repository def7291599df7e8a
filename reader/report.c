/*
 * report.c - see report.h.
 */
#include "report.h"
#include "cli.h"

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

int rep_load(const char *cmd, const char *path, const rep_at *at, mlz_reader **r, prof *p)
{
    *r = cli_open(cmd, path, 0);
    if (!*r) return 1;
    uint64_t start = mlz_reader_header(*r)->start_us;
    uint64_t until = rep_at_until(at, start);
    if (at && at->s && until < start) {
        mlz_reader_close(*r);
        return cli_error(cmd, "%s: --at %llu is before the recording starts (%llu)", path,
                         (unsigned long long)until, (unsigned long long)start);
    }
    mlz_error e = { 0 };
    if (prof_replay(p, *r, until, &e)) {
        cli_print_format_error(cmd, path, &e);
        rep_unload(*r, p);
        return 1;
    }
    return 0;
}

void rep_unload(mlz_reader *r, prof *p)
{
    prof_free(p);
    mlz_reader_close(r);
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

int rep_out_open(const char *cmd, const char *path, rep_out *o)
{
    memset(o, 0, sizeof *o);
    if (!path || !strcmp(path, "-")) {
        o->f = stdout;
        return 0;
    }
    o->path = strdup(path);
    if (!o->path) return cli_error(cmd, "out of memory");
    /* A device or a pipe (-o /dev/null, a fifo) is written as it is: a
     * rename over it would replace it with a regular file. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        o->f = fopen(path, "w");
        if (!o->f) {
            int rc = cli_error(cmd, "%s: %s", path, strerror(errno));
            free(o->path);
            return rc;
        }
        return 0;
    }
    if (asprintf(&o->tmp, "%s.%d.tmp", path, (int)getpid()) < 0) {
        free(o->path);
        return cli_error(cmd, "out of memory");
    }
    o->f = fopen(o->tmp, "w");
    if (!o->f) {
        int rc = cli_error(cmd, "%s: %s", path, strerror(errno));
        free(o->path);
        free(o->tmp);
        return rc;
    }
    return 0;
}

int rep_out_close(const char *cmd, rep_out *o, int ok)
{
    int rc = 0;
    if (o->f == stdout) {
        if (fflush(stdout) || ferror(stdout)) rc = ok ? cli_error(cmd, "writing the output: %s", strerror(errno)) : 1;
        return ok ? rc : 1;
    }
    int err = ferror(o->f) ? EIO : 0;
    if (fclose(o->f) && !err) err = errno;
    if (ok && err) rc = cli_error(cmd, "%s: %s", o->path, strerror(err));
    else if (ok && o->tmp && rename(o->tmp, o->path)) rc = cli_error(cmd, "%s: %s", o->path, strerror(errno));
    if (!ok || rc) { if (o->tmp) unlink(o->tmp); rc = 1; }
    free(o->path);
    free(o->tmp);
    return rc;
}
