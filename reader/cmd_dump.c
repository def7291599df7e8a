/*
 * cmd_dump.c - memlyze dump FILE: the binary file as stable, line-oriented
 * text (the "binary-to-ASCII translator" of the HATF paper). The grammar is
 * in docs/FORMAT.md; memlyze undump turns it back into identical bytes.
 */
#include "cli.h"

#include <string.h>

/* Metadata bytes, escaped so that the line is ASCII and reversible. */
static void put_escaped(FILE *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\') fputs("\\\\", out);
        else if (c == '\n') fputs("\\n", out);
        else if (c < 0x20 || c >= 0x7f) fprintf(out, "\\x%02x", c);
        else fputc(c, out);
    }
}

static int run(int argc, char **argv)
{
    if (argc != 2) return cli_usage_error(&cmd_dump, argc < 2 ? "no file given" : "one file at a time");
    const char *path = argv[1];
    mlz_reader *r = cli_open("dump", path, MLZ_READ_NO_INDEX);
    if (!r) return 1;
    const mlz_header *h = mlz_reader_header(r);
    const mlz_meta *m = mlz_reader_meta(r);
    FILE *out = stdout;

    fprintf(out, "mlyze-dump 1\n");
    fprintf(out, "header version=%u start_us=%llu flags=0x%x stream_len=%llu event_count=%llu raw_len=%llu\n",
            h->version, (unsigned long long)h->start_us, h->flags, (unsigned long long)h->stream_len,
            (unsigned long long)h->event_count, (unsigned long long)h->raw_len);
    size_t last = sizeof h->rest;
    while (last > 0 && h->rest[last - 1] == 0) last--;
    if (last) {
        fprintf(out, "rest ");
        for (size_t i = 0; i < last; i++) fprintf(out, "%02x", h->rest[i]);
        fputc('\n', out);
    }
    fprintf(out, "meta ");
    put_escaped(out, m->json, m->json_len);
    fputc('\n', out);

    mlz_event ev;
    mlz_error e = { 0 };
    int rc, lz4 = (h->flags & MLZ_FLAGS_BLOCKS) != 0;
    uint64_t n = 0;
    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) {
        if (lz4 && mlz_reader_at_block_start(r) && n > 0) fprintf(out, "block\n");
        n++;
        unsigned long long dt = (unsigned long long)ev.delta_us, t = (unsigned long long)ev.time_us;
        switch (ev.type) {
        case MLZ_EV_ALLOC:
            fprintf(out, "alloc dt=%llu t=%llu addr=0x%llx size=%llu stack=%llu thread=%u\n", dt, t,
                    (unsigned long long)ev.addr, (unsigned long long)ev.size,
                    (unsigned long long)ev.stack_id, ev.thread);
            break;
        case MLZ_EV_FREE:
            fprintf(out, "free dt=%llu t=%llu addr=0x%llx\n", dt, t, (unsigned long long)ev.addr);
            break;
        case MLZ_EV_GC:
            fprintf(out, "gc dt=%llu t=%llu objects=%llu bytes=%llu\n", dt, t,
                    (unsigned long long)ev.objects, (unsigned long long)ev.bytes);
            break;
        case MLZ_EV_MARKER:
            fprintf(out, "marker dt=%llu t=%llu name=%llu\n", dt, t, (unsigned long long)ev.name_id);
            break;
        default:
            fprintf(out, "ext type=%d dt=%llu t=%llu len=%llu data=", ev.type, dt, t,
                    (unsigned long long)ev.len);
            for (uint64_t i = 0; i < ev.len; i++) fprintf(out, "%02x", ev.data[i]);
            fputc('\n', out);
        }
    }
    if (rc < 0) {
        fflush(out);
        cli_print_format_error("dump", path, &e);
        mlz_reader_close(r);
        return 1;
    }
    fprintf(out, "end events=%llu\n", (unsigned long long)n);
    mlz_reader_close(r);
    if (fflush(out) || ferror(out)) return cli_error("dump", "write error on standard output");
    return 0;
}

const mlz_command cmd_dump = {
    "dump", run, "print a file as text, one event per line",
    "usage: memlyze dump FILE\n"
    "\n"
    "Prints FILE as line-oriented text: a header line, the metadata (escaped, on\n"
    "one line), then one line per event:\n"
    "  alloc dt=US t=US addr=0xHEX size=N stack=ID thread=N\n"
    "  free dt=US t=US addr=0xHEX\n"
    "  gc dt=US t=US objects=N bytes=N\n"
    "  marker dt=US t=US name=ID\n"
    "  ext type=N dt=US t=US len=N data=HEX\n"
    "dt is the encoded delta in microseconds, t the absolute time (informative).\n"
    "Compressed files show \"block\" where a new 64 KiB block starts. The grammar\n"
    "is stable (docs/FORMAT.md); memlyze undump turns it back into the same bytes.\n",
};
