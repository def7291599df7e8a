/*
 * export.c - what the export writers share (export.h).
 */
#include "errbuf.h"
#include "export.h"

mlz_reader *export_open_events(const export_job *j, const char *format)
{
    mlz_error e = { 0 };
    mlz_reader *r = mlz_reader_open(j->path, 0, &e);
    if (!r) {
        errbuf_set(j->err, j->errlen, "%s: %s", j->path, e.msg);
        return NULL;
    }
    uint64_t rate = mlz_reader_meta(r)->rate;
    if (rate > 1) {
        errbuf_set(j->err, j->errlen,
                   "%s is sampled (rate %llu): %s files hold every allocation; record an exact trace "
                   "(memlyze run -r 1, memlyze-attach -r 1)", j->path, (unsigned long long)rate, format);
        mlz_reader_close(r);
        return NULL;
    }
    return r;
}
