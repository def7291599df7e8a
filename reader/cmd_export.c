/*
 * cmd_export.c - memlyze export: a profile in the formats other tools read
 * (pprof, speedscope, folded stacks) or as our own JSON dump.
 */
#include "cli.h"
#include "export_json.h"
#include "folded.h"
#include "pprof.h"
#include "report.h"
#include "speedscope.h"

#include <getopt.h>
#include <string.h>
#include <unistd.h>

enum fmt { FMT_NONE, FMT_PPROF, FMT_SPEEDSCOPE, FMT_FOLDED, FMT_JSON };

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The format an output name implies, for `-o heap.pb.gz` without --format. */
static enum fmt fmt_of_name(const char *out)
{
    if (!out) return FMT_NONE;
    if (ends_with(out, ".pb.gz") || ends_with(out, ".pprof") || ends_with(out, ".pb")) return FMT_PPROF;
    if (ends_with(out, ".speedscope.json")) return FMT_SPEEDSCOPE;
    if (ends_with(out, ".folded")) return FMT_FOLDED;
    if (ends_with(out, ".json")) return FMT_JSON;
    return FMT_NONE;
}

static int run(int argc, char **argv)
{
    const char *out = NULL, *metric = NULL;
    enum fmt fmt = FMT_NONE;
    enum rep_metric m = REP_LIVE;
    rep_at at = { 0 };
    int c;
    static const struct option opts[] = {
        { "format", required_argument, 0, 'f' }, { "output", required_argument, 0, 'o' },
        { "at", required_argument, 0, 'a' }, { "metric", required_argument, 0, 'm' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:o:", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            if (!strcmp(optarg, "pprof")) fmt = FMT_PPROF;
            else if (!strcmp(optarg, "speedscope")) fmt = FMT_SPEEDSCOPE;
            else if (!strcmp(optarg, "folded")) fmt = FMT_FOLDED;
            else if (!strcmp(optarg, "json")) fmt = FMT_JSON;
            else return cli_usage_error(&cmd_export, "--format takes pprof, speedscope, folded or json");
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
            if (rep_parse_metric(optarg, &m))
                return cli_usage_error(&cmd_export, "--metric takes live, allocated or count");
            break;
        default:
            return cli_usage_error(&cmd_export, "bad option");
        }
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_export, "need exactly one FILE");
    if (fmt == FMT_NONE) fmt = fmt_of_name(out);
    if (fmt == FMT_NONE) return cli_usage_error(&cmd_export, "need --format pprof, speedscope, folded or json");
    if (metric && fmt != FMT_FOLDED)
        return cli_usage_error(&cmd_export, "--metric applies to --format folded (the others carry every metric)");
    if (fmt == FMT_PPROF && (!out || !strcmp(out, "-")) && isatty(STDOUT_FILENO))
        return cli_usage_error(&cmd_export, "pprof output is gzip'd binary: give -o FILE or redirect stdout");

    const char *path = argv[optind];
    mlz_reader *r;
    prof p;
    if (rep_load("export", path, &at, &r, &p)) return 1;
    uint64_t start = mlz_reader_header(r)->start_us;
    uint64_t until = rep_at_until(&at, start);
    /* The moment described: --at, else the last event replayed. */
    uint64_t moment = at.s ? until : p.last_us;

    rep_out o;
    if (rep_out_open("export", out, &o)) {
        rep_unload(r, &p);
        return 1;
    }
    char err[256] = "";
    int rc;
    switch (fmt) {
    case FMT_PPROF: rc = pprof_write(o.f, &p, start, moment, err, sizeof err); break;
    case FMT_SPEEDSCOPE: {
        const char *base = strrchr(path, '/');
        rc = speedscope_write(o.f, &p, base ? base + 1 : path, err, sizeof err);
        break;
    }
    case FMT_FOLDED: rc = folded_write(o.f, &p, m, err, sizeof err); break;
    default: rc = export_json_write(o.f, &p, path, start, moment, err, sizeof err); break;
    }
    if (rc) cli_error("export", "%s", err);
    int crc = rep_out_close("export", &o, rc == 0);
    rep_unload(r, &p);
    return rc || crc ? 1 : 0;
}

const mlz_command cmd_export = {
    "export", run, "write a profile for pprof, speedscope or flame-graph tools",
    "usage: memlyze export --format pprof|speedscope|folded|json [-o OUT] [--at TIME] [--metric M] FILE\n"
    "\n"
    "Writes the heap profile of FILE (a trace or a snapshot) in another format.\n"
    "Values are estimates already scaled by the sampling rate.\n"
    "  -f, --format F   pprof: gzip'd profile.proto in Go's heap convention\n"
    "                     (alloc_objects, alloc_space, inuse_objects, inuse_space;\n"
    "                     period = the rate), for pprof, Pyroscope and Parca;\n"
    "                   speedscope: speedscope's JSON file format, one profile per\n"
    "                     metric (live bytes, allocated bytes, live objects, allocations);\n"
    "                   folded: 'root;...;leaf VALUE' lines (flamegraph.pl, inferno);\n"
    "                   json: every site with all estimates, 95% intervals and frames.\n"
    "                   Without it, implied by OUT's name: .pb.gz .pprof .speedscope.json\n"
    "                   .folded .json\n"
    "  -o, --output OUT the file to write (default: standard output)\n"
    "  --at TIME        the heap at that moment of a trace: seconds since its start\n"
    "                   (2.5) or an absolute timestamp in µs since the epoch\n"
    "  --metric M       folded values: live (default), allocated (bytes) or count\n"
    "                   (allocations)\n",
};
