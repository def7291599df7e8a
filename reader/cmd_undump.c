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

/* The state of one undump: the header as read so far, and the writer once
 * the meta line has opened it. */
typedef struct {
    src_pos pos;
    const char *out;
    int force;
    mlz_header h;
    mlz_writer w;
    char *meta;
    int have_header, opened, ended, pending_block;
    uint64_t count;
} undump;

static uint8_t buf[MLZ_SPLIT_MAX_RAW], zbuf[MLZ_LZ4_BOUND], ext_data[MLZ_EXT_MAX];

/* "header version=V start_us=T flags=F": only headers the reader takes
 * (its own checks, on the header with the sizes the writer will seal). */
static int on_header(undump *u, const char *line)
{
    uint64_t v, st, fl;
    if (u->have_header || num(line, "version", &v) || num(line, "start_us", &st) || num(line, "flags", &fl))
        return bad(&u->pos, "malformed header line");
    mlz_header h = { .version = (uint32_t)v, .start_us = st, .flags = (uint32_t)fl };
    uint8_t hb[MLZ_HEADER_SIZE];
    mlz_error e = { 0 };
    mlz_header_encode(&h, hb);
    if (v > UINT32_MAX || fl > UINT32_MAX || mlz_header_decode(hb, &h, &e))
        return bad(&u->pos, "unsupported version or flags");
    u->h.version = (uint32_t)v;
    u->h.start_us = st;
    u->h.flags = (uint32_t)fl;
    u->have_header = 1;
    return 0;
}

static int on_rest(undump *u, const char *line)
{
    size_t n;
    if (!u->have_header || u->opened || hexbytes(line + 5, u->h.rest, sizeof u->h.rest, &n))
        return bad(&u->pos, "malformed rest line");
    return 0;
}

/* The meta line completes the header: the output is opened here. */
static int on_meta(undump *u, const char *line)
{
    size_t meta_len;
    if (!u->have_header || u->opened || !(u->meta = unescape(line + 5, &meta_len)))
        return bad(&u->pos, "malformed or misplaced meta line");
    mlz_writer_opts o = { .start_us = u->h.start_us, .meta = u->meta, .meta_len = meta_len,
                          .flags = u->h.flags & MLZ_FLAGS_BLOCKS, .replace = u->force,
                          .plain = !(u->h.flags & MLZ_FLAG_SEALED) || (u->h.flags & MLZ_FLAG_UNSEALED_V1),
                          .buf = buf, .buf_size = sizeof buf, .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    int e = mlz_writer_open(&u->w, u->out, &o);
    if (e) return cli_error("undump", "%s: %s", mlz_writer_error_path(&u->w, u->out), strerror(-e));
    mlz_writer_set_header_rest(&u->w, u->h.rest);
    u->opened = 1;
    return 0;
}

/* An event line into ev; 0 if it is well formed. */
static int parse_event(const char *line, mlz_event *ev)
{
    uint64_t x = 0;
    int ok = !num(line, "dt", &ev->delta_us);
    if (!strncmp(line, "alloc ", 6)) {
        ev->type = MLZ_EV_ALLOC;
        ok = ok && !num(line, "addr", &ev->addr) && !num(line, "size", &ev->size) &&
             !num(line, "stack", &ev->stack_id) && !num(line, "thread", &x) && x <= 0xffff;
        ev->thread = (uint16_t)x;
    } else if (!strncmp(line, "free ", 5)) {
        ev->type = MLZ_EV_FREE;
        ok = ok && !num(line, "addr", &ev->addr);
    } else if (!strncmp(line, "gc ", 3)) {
        ev->type = MLZ_EV_GC;
        ok = ok && !num(line, "objects", &ev->objects) && !num(line, "bytes", &ev->bytes);
    } else if (!strncmp(line, "marker ", 7)) {
        ev->type = MLZ_EV_MARKER;
        ok = ok && !num(line, "name", &ev->name_id);
    } else if (!strncmp(line, "ext ", 4)) {
        size_t n = 0;
        const char *d = field(line, "data");
        ok = ok && !num(line, "type", &x) && x >= MLZ_EV_EXT_FIRST && x < 128 && !num(line, "len", &ev->len) && d &&
             !hexbytes(d, ext_data, sizeof ext_data, &n) && n == ev->len;
        ev->type = (int)x;
        ev->data = ext_data;
    } else {
        ok = 0;
    }
    return ok ? 0 : -1;
}

static int on_event(undump *u, const char *line)
{
    mlz_event ev = { 0 };
    if (!u->opened || parse_event(line, &ev)) return bad(&u->pos, "malformed or misplaced event line");
    if (u->pending_block && mlz_writer_end_block(&u->w)) return bad(&u->pos, "write error");
    u->pending_block = 0;
    if (mlz_writer_raw_event(&u->w, &ev)) return cli_error("undump", "%s: write error: %s", u->out, strerror(-u->w.err));
    u->count++;
    return 0;
}

/* One line after the first; 0, or non-zero once the error is printed. */
static int on_line(undump *u, const char *line)
{
    if (u->ended) return bad(&u->pos, "text after the end line");
    if (!strncmp(line, "header ", 7)) return on_header(u, line);
    if (!strncmp(line, "rest ", 5)) return on_rest(u, line);
    if (!strncmp(line, "meta ", 5)) return on_meta(u, line);
    if (!strcmp(line, "block")) {
        if (!u->opened || !(u->h.flags & MLZ_FLAGS_BLOCKS)) return bad(&u->pos, "block line outside a compressed stream");
        u->pending_block = 1;
        return 0;
    }
    if (!strncmp(line, "end ", 4)) {
        uint64_t n;
        if (!u->opened || num(line, "events", &n) || n != u->count) return bad(&u->pos, "end line does not match the events");
        u->ended = 1;
        return 0;
    }
    return on_event(u, line);
}

/* Reads the text to its end line and closes the output; 0 or 1. */
static int undump_text(undump *u, FILE *in)
{
    char *line = NULL, first[32];
    size_t cap = 0;
    ssize_t len;
    int rc = 1;
    /* The first line read with a bound: other input (/dev/zero, a binary
     * file with no newline) is refused before getline takes it all in. */
    if (fgets(first, sizeof first, in)) {
        u->pos.lineno = 1;
        first[strcspn(first, "\n")] = 0;
        if (strcmp(first, "mlyze-dump 1")) { bad(&u->pos, "not memlyze dump text (first line must be \"mlyze-dump 1\")"); goto out; }
        while ((len = getline(&line, &cap, in)) >= 0) {
            u->pos.lineno++;
            if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
            if (on_line(u, line)) goto out;
        }
    }
    if (ferror(in)) { cli_error("undump", "%s: %s", u->pos.path, strerror(errno)); goto out; }
    if (!u->pos.lineno) { bad(&u->pos, "empty input (first line must be \"mlyze-dump 1\")"); goto out; }
    if (!u->ended) { bad(&u->pos, "text ends without the end line"); goto out; }
    int e = mlz_writer_close(&u->w);
    u->opened = 0;
    if (e) { cli_error("undump", "%s: %s", mlz_writer_error_path(&u->w, u->out), strerror(-e)); goto out; }
    rc = 0;
out:
    if (u->opened) mlz_writer_abort(&u->w);
    free(line);
    return rc;
}

static int run(int argc, char **argv)
{
    static undump u;
    int c;
    static const struct option opts[] = {
        { "output", required_argument, 0, 'o' }, { "force", no_argument, 0, 'f' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "o:f", opts, NULL)) != -1) {
        if (c == 'o') u.out = optarg;
        else if (c == 'f') u.force = 1;
        else return cli_usage_error(&cmd_undump, "bad option");
    }
    if (!u.out) return cli_usage_error(&cmd_undump, "missing -o OUTPUT");
    if (argc - optind > 1) return cli_usage_error(&cmd_undump, "one input at a time");
    u.pos = (src_pos){ optind < argc ? argv[optind] : "<stdin>", 0 };
    FILE *in = optind < argc ? fopen(argv[optind], "r") : stdin;
    if (!in) return cli_error("undump", "%s: %s", u.pos.path, strerror(errno));
    int rc = undump_text(&u, in);
    free(u.meta);
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
