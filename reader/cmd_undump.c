/*
 * cmd_undump.c - memlyze undump: turns `memlyze dump` text back into the
 * binary file, byte for byte (same deltas, same block boundaries).
 */
#include "cli.h"
#include "codec_split.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

typedef struct {
    const char *path;
    unsigned long lineno;
} src_pos;

static int bad(const src_pos *p, const char *what)
{
    return cli_error("undump", "%s:%lu: %s", p->path, p->lineno, what);
}

/* Finds "key=" in the space-separated fields of line; returns the value. */
static const char *field(const char *line, const char *key)
{
    size_t k = strlen(key);
    for (const char *s = line; (s = strstr(s, key)); s += k)
        if ((s == line || s[-1] == ' ') && s[k] == '=') return s + k + 1;
    return NULL;
}

static int num(const char *line, const char *key, uint64_t *out)
{
    const char *v = field(line, key);
    if (!v || *v == '-' || *v == ' ' || !*v) return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || (*end && *end != ' ')) return -1;
    *out = x;
    return 0;
}

static int hexbytes(const char *v, uint8_t *out, size_t max, size_t *n)
{
    size_t i = 0;
    while (v[0] && v[0] != ' ') {
        unsigned x;
        if (i >= max || sscanf(v, "%2x", &x) != 1 || !v[1] || v[1] == ' ') return -1;
        out[i++] = (uint8_t)x;
        v += 2;
    }
    *n = i;
    return 0;
}

static char *unescape(const char *s, size_t *len)
{
    char *o = malloc(strlen(s) + 1);
    size_t n = 0;
    if (!o) return NULL;
    for (; *s; s++) {
        if (*s != '\\') { o[n++] = *s; continue; }
        s++;
        unsigned x;
        if (*s == '\\') o[n++] = '\\';
        else if (*s == 'n') o[n++] = '\n';
        else if (*s == 'x' && sscanf(s + 1, "%2x", &x) == 1 && s[1] && s[2]) { o[n++] = (char)x; s += 2; }
        else { free(o); return NULL; }
    }
    o[n] = 0;
    *len = n;
    return o;
}

static int run(int argc, char **argv)
{
    const char *out = NULL;
    int force = 0, c;
    static const struct option opts[] = {
        { "output", required_argument, 0, 'o' }, { "force", no_argument, 0, 'f' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "o:f", opts, NULL)) != -1) {
        if (c == 'o') out = optarg;
        else if (c == 'f') force = 1;
        else return cli_usage_error(&cmd_undump, "bad option");
    }
    if (!out) return cli_usage_error(&cmd_undump, "missing -o OUTPUT");
    if (argc - optind > 1) return cli_usage_error(&cmd_undump, "one input at a time");
    src_pos pos = { optind < argc ? argv[optind] : "<stdin>", 0 };
    FILE *in = optind < argc ? fopen(argv[optind], "r") : stdin;
    if (!in) return cli_error("undump", "%s: %s", pos.path, strerror(errno));

    static uint8_t buf[MLZ_SPLIT_MAX_RAW], zbuf[MLZ_LZ4_BOUND];
    static mlz_writer w;
    static uint8_t data[MLZ_EXT_MAX];
    mlz_header h = { 0 };
    char *line = NULL, *meta = NULL;
    size_t cap = 0, meta_len = 0;
    int have_header = 0, opened = 0, ended = 0, rc = 1, pending_block = 0;
    uint64_t count = 0;
    ssize_t len;

    while ((len = getline(&line, &cap, in)) >= 0) {
        pos.lineno++;
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (pos.lineno == 1) {
            if (strcmp(line, "mlyze-dump 1")) { bad(&pos, "not memlyze dump text (first line must be \"mlyze-dump 1\")"); goto out; }
            continue;
        }
        if (ended) { bad(&pos, "text after the end line"); goto out; }
        if (!strncmp(line, "header ", 7)) {
            uint64_t v, st, fl;
            if (have_header || num(line, "version", &v) || num(line, "start_us", &st) || num(line, "flags", &fl)) {
                bad(&pos, "malformed header line");
                goto out;
            }
            if (v != MLZ_VERSION || (fl & ~MLZ_FLAGS_KNOWN) || ((fl & MLZ_FLAGS_BLOCKS) && !(fl & MLZ_FLAG_SEALED)) || (fl & MLZ_FLAGS_BLOCKS) == MLZ_FLAGS_BLOCKS) {
                bad(&pos, "unsupported version or flags");
                goto out;
            }
            h.version = (uint32_t)v; h.start_us = st; h.flags = (uint32_t)fl;
            have_header = 1;
        } else if (!strncmp(line, "rest ", 5)) {
            size_t n;
            if (!have_header || opened || hexbytes(line + 5, h.rest, sizeof h.rest, &n)) {
                bad(&pos, "malformed rest line");
                goto out;
            }
        } else if (!strncmp(line, "meta ", 5)) {
            if (!have_header || opened || !(meta = unescape(line + 5, &meta_len))) {
                bad(&pos, "malformed or misplaced meta line");
                goto out;
            }
            mlz_writer_opts o = { .start_us = h.start_us, .meta = meta, .meta_len = meta_len,
                                  .flags = h.flags & MLZ_FLAGS_BLOCKS, .replace = force,
                                  .plain = !(h.flags & MLZ_FLAG_SEALED),
                                  .buf = buf, .buf_size = sizeof buf, .zbuf = zbuf, .zbuf_size = sizeof zbuf };
            int e = mlz_writer_open(&w, out, &o);
            if (e) { cli_error("undump", "%s: %s", out, strerror(-e)); goto out; }
            mlz_writer_set_header_rest(&w, h.rest);
            opened = 1;
        } else if (!strcmp(line, "block")) {
            if (!opened || !(h.flags & MLZ_FLAGS_BLOCKS)) { bad(&pos, "block line outside a compressed stream"); goto out; }
            pending_block = 1;
        } else if (!strncmp(line, "end ", 4)) {
            uint64_t n;
            if (!opened || num(line, "events", &n) || n != count) { bad(&pos, "end line does not match the events"); goto out; }
            ended = 1;
        } else {
            mlz_event ev = { 0 };
            uint64_t x = 0;
            int ok = opened && !num(line, "dt", &ev.delta_us);
            if (!strncmp(line, "alloc ", 6)) {
                ev.type = MLZ_EV_ALLOC;
                ok = ok && !num(line, "addr", &ev.addr) && !num(line, "size", &ev.size) &&
                     !num(line, "stack", &ev.stack_id) && !num(line, "thread", &x) && x <= 0xffff;
                ev.thread = (uint16_t)x;
            } else if (!strncmp(line, "free ", 5)) {
                ev.type = MLZ_EV_FREE;
                ok = ok && !num(line, "addr", &ev.addr);
            } else if (!strncmp(line, "gc ", 3)) {
                ev.type = MLZ_EV_GC;
                ok = ok && !num(line, "objects", &ev.objects) && !num(line, "bytes", &ev.bytes);
            } else if (!strncmp(line, "marker ", 7)) {
                ev.type = MLZ_EV_MARKER;
                ok = ok && !num(line, "name", &ev.name_id);
            } else if (!strncmp(line, "ext ", 4)) {
                size_t n = 0;
                const char *d = field(line, "data");
                ok = ok && !num(line, "type", &x) && x >= MLZ_EV_EXT_FIRST && x < 128 &&
                     !num(line, "len", &ev.len) && d && !hexbytes(d, data, sizeof data, &n) && n == ev.len;
                ev.type = (int)x;
                ev.data = data;
            } else {
                ok = 0;
            }
            if (!ok) { bad(&pos, "malformed or misplaced event line"); goto out; }
            if (pending_block && mlz_writer_end_block(&w)) { bad(&pos, "write error"); goto out; }
            pending_block = 0;
            if (mlz_writer_raw_event(&w, &ev)) { cli_error("undump", "%s: write error: %s", out, strerror(-w.err)); goto out; }
            count++;
        }
    }
    if (!ended) { bad(&pos, "text ends without the end line"); goto out; }
    int e = mlz_writer_close(&w);
    opened = 0;
    if (e) { cli_error("undump", "%s: %s", out, strerror(-e)); goto out; }
    rc = 0;
out:
    if (opened) mlz_writer_abort(&w);
    free(line);
    free(meta);
    if (in != stdin) fclose(in);
    return rc;
}

const mlz_command cmd_undump = {
    "undump", run, "turn dump text back into a binary file",
    "usage: memlyze undump [-f] -o OUTPUT [TEXT]\n"
    "\n"
    "Reads `memlyze dump` text from TEXT (or standard input) and writes the binary\n"
    ".mlyze file it describes to OUTPUT: byte-identical to the dumped file when\n"
    "the text is unchanged. The dt fields are used; t fields are ignored.\n"
    "  -o, --output FILE   where to write (refuses to replace an existing file)\n"
    "  -f, --force         replace OUTPUT if it exists\n",
};
