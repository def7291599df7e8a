/*
 * cmd_flamegraph.c - memlyze flamegraph: one self-contained SVG or HTML
 * flame graph of a profile, optionally colored by growth since another.
 */
#include "cli.h"
#include "flamegraph.h"
#include "report.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcasecmp(s + a - b, suffix);
}

/* Appends to buf, never past its end. */
static void addf(char *buf, size_t len, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void addf(char *buf, size_t len, size_t *n, const char *fmt, ...)
{
    if (*n >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, len - *n, fmt, ap);
    va_end(ap);
    if (k > 0) *n += (size_t)k;
}

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

static int run(int argc, char **argv)
{
    const char *out = NULL, *diff = NULL, *title = NULL;
    enum rep_metric m = REP_LIVE;
    rep_at at = { 0 };
    long width = 1200;
    int c;
    static const struct option opts[] = {
        { "output", required_argument, 0, 'o' }, { "metric", required_argument, 0, 'm' },
        { "diff", required_argument, 0, 'd' }, { "at", required_argument, 0, 'a' },
        { "title", required_argument, 0, 't' }, { "width", required_argument, 0, 'w' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'o': out = optarg; break;
        case 'd': diff = optarg; break;
        case 't': title = optarg; break;
        case 'm':
            if (rep_parse_metric(optarg, &m))
                return cli_usage_error(&cmd_flamegraph, "--metric takes live, allocated or count");
            break;
        case 'a':
            if (rep_parse_at(optarg, &at))
                return cli_usage_error(&cmd_flamegraph, "--at takes seconds since the start (2.5) or a timestamp in µs");
            break;
        case 'w':
            width = strtol(optarg, &end, 10);
            if (*end || width < 200 || width > 20000)
                return cli_usage_error(&cmd_flamegraph, "--width takes 200 to 20000 pixels");
            break;
        default:
            return cli_usage_error(&cmd_flamegraph, "bad option");
        }
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_flamegraph, "need exactly one FILE");
    if (!out) return cli_usage_error(&cmd_flamegraph, "need -o OUT.svg or -o OUT.html");
    int html = ends_with(out, ".html") || ends_with(out, ".htm");
    if (!html && !ends_with(out, ".svg"))
        return cli_usage_error(&cmd_flamegraph, "-o names an .svg or .html file");
    const char *path = argv[optind];

    mlz_reader *r, *rb = NULL;
    prof p, pb;
    st_frames frames;
    st_tree t = { 0 }, tb = { 0 };
    int rc = 1, have_base = 0;
    if (cli_load("flamegraph", path, &at, &r, &p)) return 1;
    if (diff) {
        /* The base is read whole: it is the earlier snapshot or trace. */
        if (cli_load("flamegraph", diff, NULL, &rb, &pb)) {
            cli_unload(r, &p);
            return 1;
        }
        have_base = 1;
    }
    if (st_frames_init(&frames)) {
        cli_error("flamegraph", "out of memory");
        goto out_profiles;
    }
    if (st_tree_init(&t, &frames) || st_tree_from_prof(&t, &p, m) || st_tree_sort(&t) ||
        (have_base && (st_tree_init(&tb, &frames) || st_tree_from_prof(&tb, &pb, m)))) {
        cli_error("flamegraph", "out of memory");
        goto out_trees;
    }

    char ttl[512], sub[512], v[48], ci[48], rate[32];
    const est *tot = &t.n[0].total;
    if (!title) {
        if (have_base) snprintf(ttl, sizeof ttl, "%s: growth of %s since %s", base_name(path), rep_metric_name(m), base_name(diff));
        else snprintf(ttl, sizeof ttl, "%s: %s", base_name(path), rep_metric_name(m));
        title = ttl;
    }
    int sampled = p.rate > 1 || (have_base && pb.rate > 1);
    size_t n = 0;
    addf(sub, sizeof sub, &n, "total %s%s", rep_fmt_value(m, tot->value, v, sizeof v), m == REP_COUNT ? " allocations" : "");
    if (p.rate > 1)
        addf(sub, sizeof sub, &n, " \xc2\xb1 %s (95%%); sampled every %s on average",
             rep_fmt_value(m, est_ci95(tot), ci, sizeof ci), cli_bytes((double)p.rate, rate, sizeof rate));
    else
        addf(sub, sizeof sub, &n, "; exact (every allocation)");
    if (at.s) {
        uint64_t start = mlz_reader_header(r)->start_us;
        addf(sub, sizeof sub, &n, "; at +%.3f s", (double)(rep_at_until(&at, start) - start) / 1e6);
    }
    if (have_base)
        addf(sub, sizeof sub, &n, "; red grew, blue shrank since %s; widths are %s", base_name(diff), base_name(path));

    fg_opts o = { title, sub, m, html, (int)width, sampled, have_base ? &tb : NULL, have_base ? base_name(diff) : NULL };
    cli_out ro;
    if (cli_out_open("flamegraph", out, &ro)) goto out_trees;
    int wrc = fg_write(ro.f, &t, &o);
    if (wrc) cli_error("flamegraph", "out of memory");
    rc = cli_out_close("flamegraph", &ro, wrc == 0) || wrc ? 1 : 0;
out_trees:
    st_tree_free(&t);
    if (have_base) st_tree_free(&tb);
    st_frames_free(&frames);
out_profiles:
    cli_unload(r, &p);
    if (have_base) cli_unload(rb, &pb);
    return rc;
}

const mlz_command cmd_flamegraph = {
    "flamegraph", run, "draw a profile as a self-contained flame graph (SVG or HTML)",
    "usage: memlyze flamegraph FILE -o OUT.svg|OUT.html [--metric live|allocated|count] [--diff BASE] [--at TIME]\n"
    "\n"
    "Draws the call stacks of FILE as a flame graph, each frame as wide as its\n"
    "estimated bytes, in one file that needs no network: click a frame to zoom,\n"
    "Search (or Ctrl-F) highlights frames by regular expression, hovering shows\n"
    "the estimate with its 95% interval.\n"
    "  -o, --output OUT  the .svg or .html file to write\n"
    "  --metric M        live bytes (default), allocated bytes, or count (allocations)\n"
    "  --diff BASE       color each frame by its growth from BASE to FILE (red grew,\n"
    "                    blue shrank), frames matched by function, file and line\n"
    "  --at TIME         FILE's heap at that moment: seconds since its start or an\n"
    "                    absolute timestamp in µs\n"
    "  --title TEXT      the graph's title\n"
    "  --width PX        width in pixels (default 1200)\n",
};
