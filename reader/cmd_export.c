/*
 * cmd_export.c - memlyze export: a profile in the formats other tools read.
 *
 * Each format is one row of EXPORT_FORMATS: its name, the output names that
 * imply it, its writer (an export_fn in its own file) and its help text. The
 * usage text, the --format error and the name guess all come from the table.
 */
#include "cli.h"
#include "export.h"
#include "export_json.h"
#include "folded.h"
#include "pprof.h"
#include "speedscope.h"

#include <getopt.h>
#include <string.h>
#include <unistd.h>

/* Row flags. */
#define EXP_BINARY 0x1   /* never to a terminal */
#define EXP_METRIC 0x2   /* takes --metric */
#define EXP_FRAMES 0x4   /* takes --frames */

/* The writers of the formats older than the table, as export_fns. */
static int pprof_export(const export_job *j)
{
    return pprof_write(j->f, j->p, j->start_us, j->moment_us, j->err, j->errlen);
}

static int speedscope_export(const export_job *j)
{
    const char *base = strrchr(j->path, '/');
    return speedscope_write(j->f, j->p, base ? base + 1 : j->path, j->err, j->errlen);
}

static int folded_export(const export_job *j)
{
    return folded_write(j->f, j->p, j->metric, j->err, j->errlen);
}

static int json_export(const export_job *j)
{
    return export_json_write(j->f, j->p, j->path, j->start_us, j->moment_us, j->err, j->errlen);
}

/* X(name, extensions, writer, flags, help): help lines are indented to
 * line up after "  NAME" in the usage text. */
#define EXPORT_FORMATS(X)                                                                   \
    X("pprof", ".pb.gz .pprof .pb", pprof_export, EXP_BINARY,                               \
      "gzip'd profile.proto in Go's heap convention (alloc_objects,\n"                      \
      "               alloc_space, inuse_objects, inuse_space; period = the rate),\n"       \
      "               for pprof, Pyroscope and Parca\n")                                    \
    X("speedscope", ".speedscope.json", speedscope_export, 0,                                \
      "speedscope's JSON file format, one profile per metric (live\n"                       \
      "               bytes, allocated bytes, live objects, allocations)\n")                \
    X("folded", ".folded", folded_export, EXP_METRIC,                                       \
      "'root;...;leaf VALUE' lines (flamegraph.pl, inferno)\n")                             \
    X("json", ".json", json_export, 0,                                                      \
      "every site with all estimates, 95% intervals and frames\n")                          \
    X("dumpalloc", ".dumpalloc", dumpalloc_export, EXP_BINARY | EXP_FRAMES,                  \
      "the allocation and free events of an exact trace as dumpalloc\n"                    \
      "               records, up to --at (sizes in memlyze's ASIZ records, which\n"          \
      "               other readers skip); frames as --frames says\n")                              \
    X("heaptrack", ".heaptrack", heaptrack_export, 0,                                         \
      "heaptrack's data file (what heaptrack_print and heaptrack_gui open):\n"              \
      "               every allocation and free of an exact trace, up to --at;\n"           \
      "               plain text (zstd it to .zst if you like)\n")

typedef struct export_format {
    const char *name;
    const char *exts;         /* space-separated suffixes of output names */
    export_fn write;
    unsigned flags;
} export_format;

#define ROW(name, exts, fn, flags, help) { name, exts, fn, flags },
static const export_format formats[] = { EXPORT_FORMATS(ROW) };
#undef ROW
#define NFORMATS (sizeof formats / sizeof formats[0])

#define NAME(name, exts, fn, flags, help) ", " name
static const char format_names[] = EXPORT_FORMATS(NAME);   /* ", pprof, ..." */
#undef NAME
/* A help paragraph: the name, then its text and the output names implying it. */
#define HELP(name, exts, fn, flags, help) "  " name "\n               " help "               (-o names ending " exts ")\n"

static const export_format *format_named(const char *s)
{
    for (size_t i = 0; i < NFORMATS; i++)
        if (!strcmp(formats[i].name, s)) return &formats[i];
    return NULL;
}

/* The format an output name implies (`-o heap.pb.gz`): the longest matching
 * suffix wins, so x.speedscope.json is speedscope, not json. */
static const export_format *format_of_name(const char *out)
{
    const export_format *best = NULL;
    size_t best_len = 0, n = out ? strlen(out) : 0;
    for (size_t i = 0; out && i < NFORMATS; i++) {
        for (const char *e = formats[i].exts; *e;) {
            size_t l = strcspn(e, " ");
            if (l <= n && l > best_len && !memcmp(out + n - l, e, l)) best = &formats[i], best_len = l;
            e += l;
            e += strspn(e, " ");
        }
    }
    return best;
}

static int run(int argc, char **argv)
{
    const char *out = NULL, *metric = NULL, *frames = NULL;
    const export_format *fmt = NULL;
    export_job j = { .metric = REP_LIVE, .frames = EXPORT_FRAMES_SYMBOLS };
    rep_at at = { 0 };
    int c;
    static const struct option opts[] = {
        { "format", required_argument, 0, 'f' }, { "output", required_argument, 0, 'o' },
        { "at", required_argument, 0, 'a' }, { "metric", required_argument, 0, 'm' },
        { "frames", required_argument, 0, 'F' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:o:", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (!(fmt = format_named(optarg)))
                return cli_usage_error(&cmd_export, "--format takes one of %s", format_names + 2);
            break;
        case 'o':
            out = optarg;
            break;
        case 'a':
            if (rep_parse_at(optarg, &at))
                return cli_usage_error(&cmd_export, "--at takes seconds since the start (2.5) or a timestamp in µs");
            break;
        case 'm':
            metric = optarg;
            if (rep_parse_metric(optarg, &j.metric))
                return cli_usage_error(&cmd_export, "--metric takes live, allocated or count");
            break;
        case 'F':
            frames = optarg;
            if (!strcmp(optarg, "native")) j.frames = EXPORT_FRAMES_NATIVE;
            else if (!strcmp(optarg, "symbols")) j.frames = EXPORT_FRAMES_SYMBOLS;
            else return cli_usage_error(&cmd_export, "--frames takes native or symbols");
            break;
        default:
            return cli_usage_error(&cmd_export, "bad option");
        }
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_export, "need exactly one FILE");
    if (!fmt) fmt = format_of_name(out);
    if (!fmt) return cli_usage_error(&cmd_export, "need --format (one of %s) or an -o name that implies one", format_names + 2);
    if (metric && !(fmt->flags & EXP_METRIC))
        return cli_usage_error(&cmd_export, "--metric does not apply to --format %s (it carries every metric)", fmt->name);
    if (frames && !(fmt->flags & EXP_FRAMES))
        return cli_usage_error(&cmd_export, "--frames does not apply to --format %s", fmt->name);
    if ((fmt->flags & EXP_BINARY) && (!out || !strcmp(out, "-")) && isatty(STDOUT_FILENO))
        return cli_usage_error(&cmd_export, "%s output is binary: give -o FILE or redirect stdout", fmt->name);

    const char *path = argv[optind];
    mlz_reader *r;
    prof p;
    if (cli_load("export", path, &at, &r, &p)) return 1;
    j.path = path;
    j.p = &p;
    j.start_us = mlz_reader_header(r)->start_us;
    j.until_us = rep_at_until(&at, j.start_us);
    j.moment_us = at.s ? j.until_us : p.last_us;

    cli_out o;
    if (cli_out_open("export", out, &o)) {
        cli_unload(r, &p);
        return 1;
    }
    char err[256] = "";
    j.f = o.f;
    j.err = err;
    j.errlen = sizeof err;
    int rc = fmt->write(&j);
    if (rc) cli_error("export", "%s", err);
    int crc = cli_out_close("export", &o, rc == 0);
    cli_unload(r, &p);
    return rc || crc ? 1 : 0;
}

const mlz_command cmd_export = {
    "export", run, "write a profile or trace for other tools (pprof, speedscope, heaptrack...)",
    "usage: memlyze export --format F [-o OUT] [--at TIME] [--metric M] [--frames K] FILE\n"
    "\n"
    "Writes the heap profile of FILE (a trace or a snapshot) in another format.\n"
    "Values are estimates already scaled by the sampling rate.\n"
    "  -f, --format F   one of the formats below; without it, implied by OUT's name\n"
    "  -o, --output OUT the file to write (default: standard output)\n"
    "  --at TIME        the heap at that moment of a trace: seconds since its start\n"
    "                   (2.5) or an absolute timestamp in µs since the epoch\n"
    "  --metric M       folded values: live (default), allocated (bytes) or count\n"
    "                   (allocations)\n"
    "  --frames K       dumpalloc frames: symbols (default: PCAL function, file and\n"
    "                   line where the trace is symbolized, else NTVE addresses) or\n"
    "                   native (NTVE addresses only)\n"
    "\n"
    "Formats:\n" EXPORT_FORMATS(HELP),
};
