/*
 * cli_io.c - the inputs and outputs of commands: a file opened and replayed
 * up to a moment, an output that appears under its name only when complete.
 * Command-layer helpers: on failure they print one line naming the command.
 */
#include "cli.h"
#include "report.h"
#include "mlz_format.h"
#include "tmp_guard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cli_load(const char *cmd, const char *path, const rep_at *at, mlz_reader **r, prof *p)
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
        cli_unload(*r, p);
        return 1;
    }
    return 0;
}

void cli_unload(mlz_reader *r, prof *p)
{
    prof_free(p);
    mlz_reader_close(r);
}

int cli_out_open(const char *cmd, const char *path, cli_out *o)
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
    int exists = stat(path, &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
        o->f = fopen(path, "w");
        if (!o->f) {
            int rc = cli_error(cmd, "%s: %s", path, strerror(errno));
            free(o->path);
            return rc;
        }
        return 0;
    }
    /* A report replaces a report, never a trace: `export -o t.mlyze
     * t.mlyze` once replaced the recording with its own flame graph. */
    char magic[4];
    FILE *old = exists ? fopen(path, "rb") : NULL;
    int is_trace = old && fread(magic, 1, 4, old) == 4 && !memcmp(magic, MLZ_MAGIC, 4);
    if (old) fclose(old);
    if (is_trace) {
        free(o->path);
        return cli_error(cmd, "%s is a memlyze trace: not replacing it with a report (choose another -o)", path);
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
    mlz_tmp_guard_add(o->tmp);
    return 0;
}

int cli_out_close(const char *cmd, cli_out *o, int ok)
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
    if (o->tmp) mlz_tmp_guard_drop(o->tmp);
    free(o->path);
    free(o->tmp);
    return rc;
}
