/*
 * dumpalloc_write.c - memlyze export --format dumpalloc: the event stream of
 * a trace as dumpalloc records (dumpalloc.h; docs/FORMAT.md, "dumpalloc").
 * The profile is not enough here: the trace is read again, event by event.
 */
#include "dumpalloc.h"
#include "errbuf.h"
#include "export.h"

#include <string.h>

static void put_u32(FILE *f, uint32_t v)
{
    uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    fwrite(b, 1, 4, f);
}

static void put_u64(FILE *f, uint64_t v)
{
    put_u32(f, (uint32_t)v);
    put_u32(f, (uint32_t)(v >> 32));
}

static void put_head(FILE *f, const char *type, size_t len)
{
    fwrite(type, 1, 4, f);
    put_u32(f, (uint32_t)len);
}

/* Strings longer than this are cut: a record must fit its 32-bit length. */
#define STR_MAX 65535u

static size_t str_len(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return n > STR_MAX ? STR_MAX : n;
}

static void put_str(FILE *f, const char *s)
{
    size_t n = str_len(s);
    put_u32(f, (uint32_t)n);
    if (n) fwrite(s, 1, n, f);
}

/* One frame: PCAL when symbolized and asked for, else NTVE. Inlined frames
 * share their caller's address, so NTVE chains leave them out. */
static void put_frame(FILE *f, const mlz_meta *m, const mlz_frame *fr, enum export_frames how)
{
    const char *fn = mlz_meta_function(m, fr->func_id);
    if (how == EXPORT_FRAMES_SYMBOLS && fn && *fn && strcmp(fn, "??")) {
        const char *file = mlz_meta_file(m, fr->file_id);
        put_head(f, "FRAM", 4 + 4 + str_len(fn) + 4 + str_len(file) + 4);
        fwrite("PCAL", 1, 4, f);
        put_str(f, fn);
        put_str(f, file);
        put_u32(f, fr->line);
        return;
    }
    if (fr->inlined) return;
    put_head(f, "FRAM", 12);
    fwrite("NTVE", 1, 4, f);
    put_u64(f, rep_frame_pc(m, fr));
}

int dumpalloc_export(const export_job *j)
{
    mlz_error e = { 0 };
    mlz_reader *r = export_open_events(j, "dumpalloc");
    if (!r) return -1;
    const mlz_meta *m = mlz_reader_meta(r);
    FILE *f = j->f;

    const char *exe = m->exe ? m->exe : "";
    put_head(f, "PROC", 4 + 4 + str_len(exe));
    put_u32(f, m->pid >= 0 ? (uint32_t)m->pid : 0);
    put_str(f, exe);
    for (size_t i = 0; i < m->nmodules; i++) {
        put_head(f, "OBJE", 4 + str_len(m->modules[i].path));
        put_str(f, m->modules[i].path);
    }

    mlz_event ev;
    int k;
    while ((k = mlz_reader_next(r, &ev, &e)) > 0 && ev.time_us <= j->until_us) {
        if (ev.type == MLZ_EV_ALLOC) {
            /* ASIZ first: the size dumpalloc's ALOC lacks (a memlyze record
             * other readers skip by its length). */
            put_head(f, "ASIZ", 16);
            put_u64(f, ev.addr);
            put_u64(f, ev.size);
            put_head(f, "ALOC", 20);
            put_u64(f, ev.addr);
            put_u64(f, ev.time_us / 1000000);
            put_u32(f, (uint32_t)(ev.time_us % 1000000 * 1000));
            const mlz_stack *st = mlz_meta_stack(m, ev.stack_id);
            for (uint32_t i = 0; st && i < st->depth; i++) put_frame(f, m, &st->frames[i], j->frames);
            put_head(f, "FRAM", 4);
            fwrite("TERM", 1, 4, f);
        } else if (ev.type == MLZ_EV_FREE) {
            put_head(f, "DALC", 8);
            put_u64(f, ev.addr);
        }
    }
    mlz_reader_close(r);
    if (k < 0) return errbuf_set(j->err, j->errlen, "%s: %s at byte %llu: %s", j->path, mlz_rule_name(e.rule), (unsigned long long)e.offset, e.msg);
    if (ferror(f)) return errbuf_set(j->err, j->errlen, "writing the output failed");
    return 0;
}
