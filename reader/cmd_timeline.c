/*
 * cmd_timeline.c - memlyze timeline: the estimated live heap of a trace over
 * time as one self-contained SVG: a step line (with its 95% band when
 * sampled), axes with units, the peak, and a labelled vertical line for
 * every MARKER event (start, stop, snapshots, attach/detach).
 */
#include "cli.h"
#include "heapseries.h"
#include "report.h"
#include "svg.h"
#include "timeline.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TL_ML 84        /* left margin: y labels */
#define TL_MR 24
#define TL_MT 88        /* title, subtitle and three rows of marker labels */
#define TL_MB 46        /* x labels and axis title */
#define TL_ROWS 3
#define TL_CHAR_PX 6.2  /* average width of an 11 px character */

typedef struct tl_geom {
    uint64_t start, span;     /* µs */
    double pw, ph, ymax;
} tl_geom;

static double X(const tl_geom *g, uint64_t t)
{
    double f = t > g->start ? (double)(t - g->start) / (double)g->span : 0;
    return TL_ML + (f > 1 ? 1 : f) * g->pw;
}

static double Y(const tl_geom *g, double v)
{
    if (v < 0) v = 0;
    return TL_MT + g->ph - v / g->ymax * g->ph;
}

/* Seconds, shown in the unit that suits the whole span. */
static void time_unit(double span_s, const char **unit, double *mul)
{
    if (span_s < 0.002) { *unit = "\xc2\xb5s"; *mul = 1e6; }
    else if (span_s < 2) { *unit = "ms"; *mul = 1e3; }
    else { *unit = "s"; *mul = 1; }
}

static void axes(FILE *f, const tl_geom *g)
{
    const char *yu, *xu;
    double div, mul;
    double ystep = svg_bytes_step(g->ymax, 5, &yu, &div);
    fprintf(f, "<g class=\"axis\">\n");
    for (double v = 0; v <= g->ymax * (1 + 1e-9); v += ystep) {
        double y = Y(g, v);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", TL_ML, y, TL_ML + g->pw, y);
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n", TL_ML - 6, y + 4, v / div, yu);
    }
    double span_s = (double)g->span / 1e6;
    time_unit(span_s, &xu, &mul);
    double xstep = svg_nice_step(span_s * mul, 8);
    for (double t = 0; t <= span_s * mul * (1 + 1e-9); t += xstep) {
        double x = TL_ML + t / (span_s * mul) * g->pw;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>", x, TL_MT, x, TL_MT + g->ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, TL_MT + g->ph + 16, t);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n", TL_ML, TL_MT, g->pw, g->ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">time since the start of the recording (%s)</text>\n",
            TL_ML + g->pw / 2, TL_MT + g->ph + 36, xu);
    fprintf(f, "<text transform=\"translate(16,%.1f) rotate(-90)\" text-anchor=\"middle\">estimated live heap (%s)</text>\n",
            TL_MT + g->ph / 2, yu);
    fprintf(f, "</g>\n");
}

/* The x of the bucket after used bucket i, or the end of the trace. */
static double next_x(const heapseries *h, const tl_geom *g, size_t i)
{
    for (size_t j = i + 1; j < HS_BUCKETS; j++)
        if (h->b[j].used) return X(g, h->start_us + j * h->width_us);
    return X(g, h->end_us);
}

static void curve(FILE *f, const heapseries *h, const tl_geom *g, int band)
{
    /* The step line: at each bucket, a vertical stroke over everything the
     * bucket saw (min..max), then flat at its last value. */
    char *d = NULL;
    size_t dn = 0;
    FILE *m = open_memstream(&d, &dn);
    if (!m) return;
    fprintf(m, "M%.2f %.2f", X(g, h->start_us), Y(g, 0));
    for (size_t i = 0; i < HS_BUCKETS; i++) {
        const hs_bucket *b = &h->b[i];
        if (!b->used) continue;
        fprintf(m, " H%.2f V%.2f V%.2f V%.2f", X(g, h->start_us + i * h->width_us), Y(g, b->max), Y(g, b->min),
                Y(g, b->last));
    }
    fprintf(m, " H%.2f", X(g, h->end_us));
    fclose(m);
    fprintf(f, "<path class=\"area\" d=\"%s V%.2f H%.2f Z\"/>\n", d, Y(g, 0), X(g, h->start_us));
    if (band) {   /* the 95% interval around the value after each bucket */
        int first = 1;
        for (size_t i = 0; i < HS_BUCKETS; i++) {
            if (!h->b[i].used) continue;
            double up = h->b[i].last + 1.96 * sqrt(h->b[i].last_var), x = X(g, h->start_us + i * h->width_us);
            if (first) fprintf(f, "<path class=\"band\" d=\"M%.2f %.2f", x, Y(g, up));
            fprintf(f, " V%.2f H%.2f", Y(g, up), next_x(h, g, i));
            first = 0;
        }
        for (size_t i = HS_BUCKETS; !first && i-- > 0;) {
            if (!h->b[i].used) continue;
            double lo = h->b[i].last - 1.96 * sqrt(h->b[i].last_var);
            fprintf(f, " V%.2f H%.2f", Y(g, lo), X(g, h->start_us + i * h->width_us));
        }
        if (!first) fprintf(f, " Z\"/>\n");
    }
    fprintf(f, "<path class=\"line\" d=\"%s\"/>\n", d);
    free(d);
}

static void markers(FILE *f, const heapseries *h, const tl_geom *g)
{
    double row_end[TL_ROWS];
    for (int r = 0; r < TL_ROWS; r++) row_end[r] = -1e9;
    fprintf(f, "<g class=\"markers\">\n");
    for (size_t i = 0; i < h->nmarkers; i++) {
        const hs_marker *mk = &h->markers[i];
        double x = X(g, mk->t_us), w = (double)strlen(mk->name) * TL_CHAR_PX;
        fprintf(f, "<g class=\"marker\"><title>");
        svg_text(f, mk->name);
        fprintf(f, " at +%.6f s</title>", (double)(mk->t_us - h->start_us) / 1e6);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.1f\"/>", x, TL_MT, x, TL_MT + g->ph);
        /* Labels go in the first row where they do not overlap the last
         * one; when all rows are taken the line stays unlabelled. */
        double lx = x + w > TL_ML + g->pw ? x - w : x;
        for (int r = 0; r < TL_ROWS; r++) {
            if (lx < row_end[r] + 6) continue;
            fprintf(f, "<text x=\"%.2f\" y=\"%d\">", lx + 2, TL_MT - 6 - 14 * r);
            svg_text(f, mk->name);
            fprintf(f, "</text>");
            row_end[r] = lx + w;
            break;
        }
        fprintf(f, "</g>\n");
    }
    fprintf(f, "</g>\n");
}

static const char tl_style[] =
    "text { font-family: Verdana, 'DejaVu Sans', sans-serif; font-size: 11px; fill: #222; }\n"
    ".title { font-size: 16px; } .sub { font-size: 12px; fill: #444; }\n"
    ".grid { stroke: #e2e2e2; stroke-width: 1; } .frame { fill: none; stroke: #888; }\n"
    ".area { fill: #cfe3f7; stroke: none; } .line { fill: none; stroke: #1f5fa8; stroke-width: 1.4; }\n"
    ".band { fill: #f0a830; fill-opacity: 0.3; stroke: none; }\n"
    ".marker line { stroke: #c0392b; stroke-width: 1; stroke-dasharray: 4 3; } .marker text { fill: #c0392b; }\n"
    ".peak { fill: #1f5fa8; }\n";

/* timeline.h: the SVG of h, also served by memlyze serve (which finds
 * the plot's geometry in the data- attributes of the <svg>). */
void tl_write_svg(FILE *f, const heapseries *h, const char *path, const char *title, long width, long height)
{
    tl_geom g = { h->start_us, h->end_us > h->start_us ? h->end_us - h->start_us : 1,
                  (double)width - TL_ML - TL_MR, (double)height - TL_MT - TL_MB, 0 };
    int band = h->rate > 1;
    double top = 0;
    for (size_t i = 0; i < HS_BUCKETS; i++)
        if (h->b[i].used) {
            double v = band ? h->b[i].last + 1.96 * sqrt(h->b[i].last_var) : h->b[i].max;
            if (v > top) top = v;
            if (h->b[i].max > top) top = h->b[i].max;
        }
    if (top <= 0) top = 1024;
    const char *yu;
    double div, step = svg_bytes_step(top, 5, &yu, &div);
    g.ymax = ceil(top * 1.02 / step) * step;

    char ttl[512], sub[512], b1[32], b2[32], b3[32];
    const char *base = strrchr(path, '/');
    if (!title) {
        snprintf(ttl, sizeof ttl, "%s: estimated live heap over time", base ? base + 1 : path);
        title = ttl;
    }
    if (band)
        snprintf(sub, sizeof sub, "peak %s at +%.3f s, %s at the end; sampled every %s on average (band: 95%% interval)",
                 cli_bytes(h->peak, b1, sizeof b1), (double)(h->peak_us - h->start_us) / 1e6,
                 cli_bytes(h->end_value, b2, sizeof b2), cli_bytes((double)h->rate, b3, sizeof b3));
    else
        snprintf(sub, sizeof sub, "peak %s at +%.3f s, %s at the end; exact (every allocation); %llu events",
                 cli_bytes(h->peak, b1, sizeof b1), (double)(h->peak_us - h->start_us) / 1e6,
                 cli_bytes(h->end_value, b2, sizeof b2), (unsigned long long)h->events);

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%ld\" height=\"%ld\" viewBox=\"0 0 %ld %ld\">\n",
            width, height, width, height);
    fprintf(f, "<g id=\"mlztl\" data-start-us=\"%llu\" data-span-us=\"%llu\" data-left=\"%d\" data-plot-width=\"%.1f\"/>\n",
            (unsigned long long)g.start, (unsigned long long)g.span, TL_ML, g.pw);
    fprintf(f, "<style type=\"text/css\"><![CDATA[\n%s]]></style>\n", tl_style);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%ld\" height=\"%ld\" fill=\"#ffffff\"/>\n", width, height);
    fprintf(f, "<text class=\"title\" x=\"%ld\" y=\"22\" text-anchor=\"middle\">", width / 2);
    svg_text(f, title);
    fprintf(f, "</text>\n<text class=\"sub\" x=\"%ld\" y=\"40\" text-anchor=\"middle\">", width / 2);
    svg_text(f, sub);
    fprintf(f, "</text>\n");
    axes(f, &g);
    curve(f, h, &g, band);
    if (h->peak > 0) {
        double px = X(&g, h->peak_us), py = Y(&g, h->peak);
        fprintf(f, "<g class=\"peak\"><title>peak %s at +%.6f s</title><circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\"/></g>\n",
                cli_bytes(h->peak, b1, sizeof b1), (double)(h->peak_us - h->start_us) / 1e6, px, py);
    }
    markers(f, h, &g);
    fprintf(f, "</svg>\n");
}

static int run(int argc, char **argv)
{
    const char *out = NULL, *title = NULL;
    long width = 1000, height = 420;
    int c;
    static const struct option opts[] = {
        { "output", required_argument, 0, 'o' }, { "title", required_argument, 0, 't' },
        { "width", required_argument, 0, 'w' }, { "height", required_argument, 0, 'H' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'o': out = optarg; break;
        case 't': title = optarg; break;
        case 'w':
            width = strtol(optarg, &end, 10);
            if (*end || width < 300 || width > 20000) return cli_usage_error(&cmd_timeline, "--width takes 300 to 20000 pixels");
            break;
        case 'H':
            height = strtol(optarg, &end, 10);
            if (*end || height < 200 || height > 20000) return cli_usage_error(&cmd_timeline, "--height takes 200 to 20000 pixels");
            break;
        default:
            return cli_usage_error(&cmd_timeline, "bad option");
        }
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_timeline, "need exactly one FILE");
    if (!out) return cli_usage_error(&cmd_timeline, "need -o OUT.svg");
    const char *path = argv[optind];
    mlz_reader *r = cli_open("timeline", path, 0);
    if (!r) return 1;
    heapseries *h = malloc(sizeof *h);
    mlz_error e = { 0 };
    if (!h) {
        mlz_reader_close(r);
        return cli_error("timeline", "out of memory");
    }
    if (hs_build(h, r, &e)) {
        cli_print_format_error("timeline", path, &e);
        free(h);
        mlz_reader_close(r);
        return 1;
    }

    cli_out o;
    int rc = 1;
    if (cli_out_open("timeline", out, &o)) goto done;
    tl_write_svg(o.f, h, path, title, width, height);
    rc = cli_out_close("timeline", &o, 1);
done:
    hs_free(h);
    free(h);
    mlz_reader_close(r);
    return rc;
}

const mlz_command cmd_timeline = {
    "timeline", run, "draw the estimated live heap of a trace over time (SVG)",
    "usage: memlyze timeline FILE -o OUT.svg [--title TEXT] [--width PX] [--height PX]\n"
    "\n"
    "Replays the trace FILE and draws its estimated live heap over time as one\n"
    "self-contained SVG: a step line (every spike kept when downsampled to about\n"
    "a thousand steps), its 95% band when sampled, the peak, and a labelled\n"
    "vertical line for each marker (memlyze:start, memlyze:stop, snapshots,\n"
    "attach and detach).\n"
    "  -o, --output OUT  the .svg file to write ('-': standard output)\n"
    "  --title TEXT      the chart's title\n"
    "  --width PX        width in pixels (default 1000)\n"
    "  --height PX       height in pixels (default 420)\n",
};
