/*
 * flamegraph.c - see flamegraph.h. The layout is done here, once: every
 * frame is written with its final rectangle, so the file is a correct
 * picture even where scripts do not run (image viewers, GitHub); the
 * embedded script (flamegraph_page.c) only re-lays it out for zoom.
 *
 * Frames narrower than FG_MIN_PX are left out with their subtrees, as
 * flamegraph.pl does: they are invisible and would only make a big trace's
 * graph slow to open. Their bytes still count in their callers' widths.
 */
#include "flamegraph.h"
#include "svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FG_FRAME_H  16      /* pixels per stack level */
#define FG_FONT     11
#define FG_PAD      10
#define FG_TOP      52      /* title, subtitle and buttons */
#define FG_BOTTOM   26      /* the details line */
#define FG_MIN_PX   0.1

static void label_of(const st_tree *t, uint32_t frame, char *buf, size_t len)
{
    if (frame == ST_NONE) { snprintf(buf, len, "all"); return; }
    const st_frame *fr = &t->frames->f[frame];
    const char *base = strrchr(fr->file, '/');
    base = base ? base + 1 : fr->file;
    if (*base && fr->line) snprintf(buf, len, "%s (%s:%u)", fr->func, base, fr->line);
    else snprintf(buf, len, "%s", fr->func);
}

void fg_frame_label(const st_tree *t, uint32_t frame, char *buf, size_t len) { label_of(t, frame, buf, len); }

/* The label cut to what fits in px, as the script's fit() does. */
static void fit(const char *label, double px, char *buf, size_t len)
{
    long max = (long)floor((px - 6) / (FG_FONT * 0.59));
    size_t n = strlen(label);
    if (max < 3) { buf[0] = 0; return; }
    if ((long)n <= max) { snprintf(buf, len, "%s", label); return; }
    size_t cut = (size_t)max - 2;
    while (cut > 0 && ((unsigned char)label[cut] & 0xc0) == 0x80) cut--;   /* whole UTF-8 characters */
    snprintf(buf, len, "%.*s..", (int)cut, label);
}

static const char *fmt(const fg_opts *o, double v, char *buf, size_t len)
{
    char b[48];
    rep_fmt_value(o->metric, v, b, sizeof b);
    if (o->metric == REP_COUNT) snprintf(buf, len, "%s allocations", b);
    else snprintf(buf, len, "%s", b);
    return buf;
}

/* Diff colors: red for growth, blue for shrinking, by t in [-1, 1]. */
static void diff_color(double t, char *buf, size_t len)
{
    if (t > 1) t = 1;
    if (t < -1) t = -1;
    int c = (int)lround(225 * (1 - fabs(t)));
    if (fabs(t) < 1e-9) snprintf(buf, len, "rgb(222,222,222)");   /* unchanged: neutral */
    else if (t > 0) snprintf(buf, len, "rgb(255,%d,%d)", c, c);
    else snprintf(buf, len, "rgb(%d,%d,255)", c, c);
}

static void tooltip(FILE *f, const st_tree *t, uint32_t id, const char *label, const fg_opts *o,
                    double total, uint32_t b)
{
    const st_node *n = &t->n[id];
    char v[64], ci[64], s[64];
    svg_text(f, label);
    if (n->frame != ST_NONE && t->frames->f[n->frame].inlined) fputs(" [inlined]", f);
    fprintf(f, "\n%s", fmt(o, n->total.value, v, sizeof v));
    if (o->sampled) fprintf(f, " \xc2\xb1 %s (95%%)", fmt(o, est_ci95(&n->total), ci, sizeof ci));
    fprintf(f, ", %.2f%% of %s", total > 0 ? 100 * n->total.value / total : 0.0, fmt(o, total, s, sizeof s));
    if (n->self.value > 0) fprintf(f, "; self %s", fmt(o, n->self.value, s, sizeof s));
    if (o->base) {
        double bv = b != ST_NONE ? o->base->n[b].total.value : 0;
        double bvar = b != ST_NONE ? o->base->n[b].total.var : 0;
        est d = { n->total.value - bv, n->total.var + bvar };
        fprintf(f, "\nchange since ");
        svg_text(f, o->base_name ? o->base_name : "base");
        fprintf(f, ": %s \xe2\x86\x92 %s, %s", fmt(o, bv, s, sizeof s), fmt(o, n->total.value, v, sizeof v),
                d.value >= 0 ? "+" : "-");
        fputs(fmt(o, fabs(d.value), s, sizeof s), f);
        if (o->sampled) {
            fprintf(f, " \xc2\xb1 %s", fmt(o, est_ci95(&d), ci, sizeof ci));
            if (fabs(d.value) <= est_ci95(&d)) fputs(" (within the 95% interval)", f);
        }
        if (b == ST_NONE) fputs(" (new)", f);
    }
}

int fg_write(FILE *f, const st_tree *t, const fg_opts *o)
{
    size_t n = t->count;
    double *x = calloc(n, sizeof *x);
    uint32_t *order = malloc(n * sizeof *order), *stack = malloc(n * sizeof *stack);
    uint32_t *mb = o->base ? malloc(n * sizeof *mb) : NULL;
    int rc = -1;
    if (!x || !order || !stack || (o->base && !mb)) goto out;

    double total = t->n[0].total.value, fw = o->width - 2 * FG_PAD;
    size_t k = 0, sp = 0;
    uint32_t maxdepth = 0;
    stack[sp++] = 0;
    if (mb) mb[0] = 0;
    while (sp) {
        uint32_t id = stack[--sp];
        double w = total > 0 ? t->n[id].total.value / total : 1;
        if (id && w * fw < FG_MIN_PX) continue;
        order[k++] = id;
        if (t->n[id].depth > maxdepth) maxdepth = t->n[id].depth;
        double cx = x[id];
        for (uint32_t c = t->n[id].first_child; c != ST_NONE; c = t->n[c].next_sibling) {
            x[c] = cx;
            cx += total > 0 ? t->n[c].total.value / total : 0;
            if (mb) mb[c] = mb[id] != ST_NONE ? st_tree_child(o->base, mb[id], t->n[c].frame) : ST_NONE;
            stack[sp++] = c;
        }
    }
    /* Diff colors scale with the largest change below the root, so one
     * growing site is bright red even when the total barely moved. */
    double maxabs = 0;
    for (size_t i = 0; mb && i < k; i++) {
        uint32_t id = order[i];
        if (!id) continue;
        double d = t->n[id].total.value - (mb[id] != ST_NONE ? o->base->n[mb[id]].total.value : 0);
        if (fabs(d) > maxabs) maxabs = fabs(d);
    }

    int W = o->width, H = FG_TOP + (int)(maxdepth + 1) * FG_FRAME_H + FG_BOTTOM;
    if (o->html) {
        fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
        svg_text(f, o->title);
        fprintf(f, "</title>\n<style>\nbody { margin: 0; background: #fff; }\n%s</style>\n</head>\n<body>\n", fg_style);
    } else {
        fputs("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n", f);
    }
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" id=\"mlzfg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" data-width=\"%d\" data-pad=\"%d\" data-fs=\"%d\">\n",
            W, H, W, H, W, FG_PAD, FG_FONT);
    if (!o->html) fprintf(f, "<style type=\"text/css\"><![CDATA[\n%s]]></style>\n", fg_style);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#f6f6f4\"/>\n", W, H);
    fprintf(f, "<text id=\"mlztitle\" x=\"%d\" y=\"22\" text-anchor=\"middle\">", W / 2);
    svg_text(f, o->title);
    fprintf(f, "</text>\n<text id=\"mlzsub\" x=\"%d\" y=\"40\" text-anchor=\"middle\">", W / 2);
    svg_text(f, o->subtitle ? o->subtitle : "");
    fprintf(f, "</text>\n<text id=\"mlzreset\" class=\"btn\" x=\"%d\" y=\"22\" style=\"opacity:0.4\">Reset zoom</text>\n", FG_PAD);
    fprintf(f, "<text id=\"mlzsearch\" class=\"btn\" x=\"%d\" y=\"22\" text-anchor=\"end\">Search</text>\n", W - FG_PAD);
    fprintf(f, "<text id=\"mlzdetails\" x=\"%d\" y=\"%d\"> </text>\n", FG_PAD, H - 9);
    fprintf(f, "<text id=\"mlzmatched\" x=\"%d\" y=\"%d\" text-anchor=\"end\"> </text>\n", W - FG_PAD, H - 9);
    fprintf(f, "<g id=\"mlzframes\" font-size=\"%d\">\n", FG_FONT);

    char label[1024], shown[1024], color[32];
    for (size_t i = 0; i < k; i++) {
        uint32_t id = order[i];
        const st_node *nd = &t->n[id];
        double w = total > 0 ? nd->total.value / total : 1;
        double px = FG_PAD + x[id] * fw, pw = w * fw;
        int y = H - FG_BOTTOM - (int)(nd->depth + 1) * FG_FRAME_H;
        label_of(t, nd->frame, label, sizeof label);
        if (mb) {
            double d = nd->total.value - (mb[id] != ST_NONE ? o->base->n[mb[id]].total.value : 0);
            double tcol = maxabs > 0 ? d / maxabs : 0;
            if (o->sampled) {   /* changes within the noise stay pale */
                double bvar = mb[id] != ST_NONE ? o->base->n[mb[id]].total.var : 0;
                est de = { d, nd->total.var + bvar };
                if (fabs(d) <= est_ci95(&de)) tcol *= 0.25;
            }
            diff_color(tcol, color, sizeof color);
        } else if (!id) {
            snprintf(color, sizeof color, "rgb(190,190,200)");
        } else {
            svg_name_color(label, color, sizeof color);
        }
        fprintf(f, "<g class=\"f\" data-x=\"%.10g\" data-w=\"%.10g\" data-d=\"%u\" data-n=\"", x[id], w, nd->depth);
        svg_text(f, label);
        fputs("\"><title>", f);
        tooltip(f, t, id, label, o, total, mb ? mb[id] : ST_NONE);
        fprintf(f, "</title><rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" rx=\"2\" fill=\"%s\"/>",
                px, y, pw > 0.1 ? pw : 0.1, FG_FRAME_H - 1, color);
        fit(label, pw, shown, sizeof shown);
        fprintf(f, "<text x=\"%.2f\" y=\"%d\">", px + 3, y + FG_FRAME_H - 4);
        svg_text(f, shown);
        fputs("</text></g>\n", f);
    }
    fputs("</g>\n", f);
    if (o->html) {
        fprintf(f, "</svg>\n<script>\n%s</script>\n</body>\n</html>\n", fg_script);
    } else {
        fprintf(f, "<script type=\"text/ecmascript\"><![CDATA[\n%s]]></script>\n</svg>\n", fg_script);
    }
    rc = 0;
out:
    free(x);
    free(order);
    free(stack);
    free(mb);
    return rc;
}
