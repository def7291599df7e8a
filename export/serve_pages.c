/*
 * serve_pages.c - the pages of memlyze serve, each one self-contained HTML
 * (inline style and script, nothing fetched from elsewhere): the index,
 * the top table, the tree, the flame graph (flamegraph.c's page with the
 * navigation added), a diff of any two sources or moments, and a trace's
 * timeline (cmd_timeline.c's chart) on which two clicks pick a diff.
 *
 * Linking: a site in the top table or the diff opens the flame graph zoomed
 * to its innermost frame (#zoom=^label$, which the flame graph's script
 * understands); the diff's sites open the diff flame graph.
 */
#include "serve.h"
#include "cli.h"
#include "diff.h"
#include "flamegraph.h"
#include "heapseries.h"
#include "report.h"
#include "stacks.h"
#include "svg.h"
#include "timeline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SV_TOP_ROWS   200      /* sites in the top table and the diff */
#define SV_TREE_MIN   0.002    /* tree nodes below this share are summed up */

void sv_html(FILE *f, const char *s) { svg_text(f, s); }

void sv_url(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~')
            fputc(*p, f);
        else
            fprintf(f, "%%%02X", *p);
    }
}

/* #zoom=^label$ with the label's regular-expression characters escaped;
 * " [inlined]" (a diff's frame name) is not part of the graph's label. */
static void zoom_fragment(FILE *f, const char *label)
{
    size_t n = strlen(label), k = strlen(" [inlined]");
    if (n >= k && !strcmp(label + n - k, " [inlined]")) n -= k;
    char *re = malloc(2 * n + 3), *q = re;
    if (!re) return;
    *q++ = '^';
    for (size_t i = 0; i < n; i++) {
        if (strchr("\\^$.|?*+()[]{}/", label[i])) *q++ = '\\';
        *q++ = label[i];
    }
    *q++ = '$';
    *q = 0;
    fputs("#zoom=", f);
    sv_url(f, re);
    free(re);
}

/* &path=A/B/C: the site's frames from the outermost, each URL-encoded
 * ('/' too), so that the flame graph zooms into this site's own frame even
 * when other callers reach the same function (flamegraph_page.c). */
static void path_fragment(FILE *f, const mlz_meta *m, const mlz_stack *st)
{
    char label[1024];
    size_t k = strlen(" [inlined]");
    fputs("&amp;path=", f);
    for (uint32_t j = st->depth; j-- > 0;) {
        prof_frame_label(m, &st->frames[j], label, sizeof label);
        size_t n = strlen(label);
        if (n >= k && !strcmp(label + n - k, " [inlined]")) label[n - k] = 0;
        sv_url(f, label);
        if (j) fputc('/', f);
    }
}

/* "?f=N" or "?f=N&t=T" (the view's moment), for links. */
static void view_query(FILE *f, const char *key, int ix, const char *tkey, const char *t)
{
    fprintf(f, "%s=%d", key, ix);
    if (t) { fprintf(f, "&amp;%s=", tkey); sv_url(f, t); }
}

static const char sv_style[] =
    "body { font-family: 'DejaVu Sans', Verdana, sans-serif; font-size: 14px; margin: 0; color: #222; }\n"
    "nav { background: #1f3b63; padding: 8px 12px; }\n"
    "nav a { color: #fff; margin-right: 14px; text-decoration: none; }\n"
    "nav a:hover { text-decoration: underline; } nav span { color: #9fb6d8; margin-right: 14px; }\n"
    "main { padding: 10px 16px; }\n"
    "table { border-collapse: collapse; } td, th { padding: 3px 8px; border-bottom: 1px solid #e4e4e4; text-align: left; vertical-align: top; }\n"
    "td.n { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }\n"
    "th { background: #f0f2f5; } .grew { color: #b02020; } .shrank { color: #2040b0; }\n"
    ".callers { color: #777; font-size: 12px; } .site { word-break: break-all; }\n"
    "details { margin-left: 18px; } summary { cursor: pointer; white-space: nowrap; }\n"
    ".err { color: #b02020; font-size: 16px; } .hint { color: #666; }\n"
    "form { margin: 8px 0; } fieldset { display: inline-block; margin-right: 12px; }\n";

void sv_page_begin(FILE *f, const sv_state *s, const char *title, int ix)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", f);
    sv_html(f, title);
    fprintf(f, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<nav><a href=\"/\">memlyze serve</a>", sv_style);
    if (ix >= 0 && (size_t)ix < s->n) {
        fputs("<span>", f);
        sv_html(f, s->src[ix].name);
        fputs(":</span>", f);
        fprintf(f, "<a id=\"nav-top\" href=\"/top?f=%d\">top</a><a id=\"nav-tree\" href=\"/tree?f=%d\">tree</a>"
                   "<a id=\"nav-flame\" href=\"/flame?f=%d\">flame graph</a>", ix, ix, ix);
        if (s->src[ix].trace) fprintf(f, "<a id=\"nav-timeline\" href=\"/timeline?f=%d\">timeline</a>", ix);
        if (ix > 0) fprintf(f, "<a id=\"nav-diff\" href=\"/diff?a=%d&amp;b=%d\">diff with previous</a>", ix - 1, ix);
        fprintf(f, "<a href=\"/json?f=%d\">JSON</a>", ix);
    }
    fputs("</nav>\n<main>\n", f);
}

void sv_page_end(FILE *f) { fputs("</main>\n</body>\n</html>\n", f); }

int sv_error(FILE *f, const sv_state *s, int status, const char *msg)
{
    char t[64];
    snprintf(t, sizeof t, "memlyze serve: error %d", status);
    sv_page_begin(f, s, t, -1);
    fprintf(f, "<h1>Error %d</h1>\n<p class=\"err\" id=\"error\">", status);
    sv_html(f, msg);
    fputs("</p>\n<p><a href=\"/\">back to the index</a></p>\n", f);
    sv_page_end(f);
    return status;
}

static const char *est_text(const est *e, int sampled, char *buf, size_t len)
{
    char v[32], ci[32];
    cli_bytes(e->value, v, sizeof v);
    if (sampled) snprintf(buf, len, "%s \xc2\xb1 %s", v, cli_bytes(est_ci95(e), ci, sizeof ci));
    else snprintf(buf, len, "%s", v);
    return buf;
}

/* A diff form: any two sources, each whole or at a moment. */
static void diff_form(FILE *f, const sv_state *s, int a, int b)
{
    fputs("<form action=\"/diff\" method=\"get\" id=\"diffform\">\n", f);
    for (int side = 0; side < 2; side++) {
        fprintf(f, "<fieldset><legend>%s</legend><select name=\"%s\">", side ? "B (newer)" : "A (base)", side ? "b" : "a");
        for (size_t i = 0; i < s->n; i++) {
            fprintf(f, "<option value=\"%zu\"%s>", i, (int)i == (side ? b : a) ? " selected" : "");
            sv_html(f, s->src[i].name);
            fputs("</option>", f);
        }
        fprintf(f, "</select> at <input name=\"%s\" size=\"8\" placeholder=\"end\"> s</fieldset>\n", side ? "tb" : "ta");
    }
    fputs("<input type=\"submit\" value=\"Diff\"></form>\n", f);
}

int sv_index(FILE *f, const sv_state *s)
{
    sv_page_begin(f, s, "memlyze serve", -1);
    fputs("<h1>Profiles</h1>\n", f);
    if (s->pid) {
        fprintf(f, "<form action=\"/snapshot\" method=\"post\"><input type=\"submit\" id=\"snapshot\" "
                   "value=\"Take a snapshot of process %d now\"> <span class=\"hint\">then shows the growth since "
                   "the previous one</span></form>\n", (int)s->pid);
    }
    fputs("<table id=\"sources\">\n<tr><th>#</th><th>profile</th><th>kind</th><th>live heap (95%)</th><th>samples</th><th></th></tr>\n", f);
    for (size_t i = 0; i < s->n; i++) {
        const sv_source *x = &s->src[i];
        char v[80];
        fprintf(f, "<tr><td class=\"n\">%zu</td><td>", i);
        sv_html(f, x->name);
        fputs("</td><td>", f);
        sv_html(f, x->kind);
        fprintf(f, "</td><td class=\"n\">%s</td><td class=\"n\">%llu</td><td>", est_text(&x->live_bytes, x->rate > 1, v, sizeof v),
                (unsigned long long)x->live_samples);
        fprintf(f, "<a href=\"/top?f=%zu\">top</a> <a href=\"/tree?f=%zu\">tree</a> <a href=\"/flame?f=%zu\">flame graph</a>",
                i, i, i);
        if (x->trace) fprintf(f, " <a href=\"/timeline?f=%zu\">timeline</a>", i);
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n<h2>Diff</h2>\n", f);
    if (s->n) diff_form(f, s, s->n > 1 ? (int)s->n - 2 : 0, (int)s->n - 1);
    fputs("<p class=\"hint\">Times are seconds since the start of the recording; empty means its end.</p>\n", f);
    sv_page_end(f);
    return 200;
}

static const char *moment(const sv_view *v, char *buf, size_t len)
{
    if (v->t) snprintf(buf, len, " at +%s s", v->t);
    else buf[0] = 0;
    return buf;
}

static int cmp_live(const void *a, const void *b)
{
    const prof_site *x = *(const prof_site *const *)a, *y = *(const prof_site *const *)b;
    double kx = x->live_bytes.value, ky = y->live_bytes.value;
    if (kx != ky) return kx < ky ? 1 : -1;
    double ax = x->alloc_bytes.value, ay = y->alloc_bytes.value;
    return ax < ay ? 1 : ax > ay ? -1 : 0;
}

int sv_top(FILE *f, const sv_state *s, const sv_view *v)
{
    const prof *p = v->p;
    int sampled = p->rate > 1;
    const prof_site **rows = malloc((p->nsites ? p->nsites : 1) * sizeof *rows);
    if (!rows) return sv_error(f, s, 500, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < p->nsites; i++)
        if (p->site_of[i] == i && (p->sites[i].live_samples || p->sites[i].samples)) rows[n++] = &p->sites[i];
    qsort(rows, n, sizeof *rows, cmp_live);
    char title[1200], m[80], a[80], b[80], c[80];
    snprintf(title, sizeof title, "%s%s: top sites", s->src[v->f].name, moment(v, m, sizeof m));
    sv_page_begin(f, s, title, v->f);
    fputs("<h1>", f);
    sv_html(f, title);
    fprintf(f, "</h1>\n<p>live heap %s (95%% interval)", est_text(&p->live_bytes, sampled, a, sizeof a));
    if (sampled) fprintf(f, "; sampled every %s on average", cli_bytes((double)p->rate, b, sizeof b));
    else fputs("; exact (every allocation)", f);
    fputs(". Click a site for its flame graph.</p>\n", f);
    fputs("<table id=\"top\">\n<tr><th>#</th><th>live bytes (95%)</th><th>live objects</th><th>allocated (95%)</th>"
          "<th>site</th></tr>\n", f);
    for (size_t i = 0; i < n && i < SV_TOP_ROWS; i++) {
        const prof_site *x = rows[i];
        const mlz_stack *st = x->stack;
        char label[1024];
        fprintf(f, "<tr><td class=\"n\">%zu</td><td class=\"n\">%s</td><td class=\"n\">%.0f</td><td class=\"n\">%s</td><td class=\"site\">",
                i + 1, est_text(&x->live_bytes, sampled, a, sizeof a), x->live_count.value,
                est_text(&x->alloc_bytes, sampled, c, sizeof c));
        if (st->depth) {
            prof_frame_label(p->meta, &st->frames[0], label, sizeof label);
            fputs("<a class=\"sitelink\" href=\"/flame?", f);
            view_query(f, "f", v->f, "t", v->t);
            zoom_fragment(f, label);
            path_fragment(f, p->meta, st);
            fputs("\">", f);
            sv_html(f, label);
            fputs("</a>", f);
            for (uint32_t j = 1; j < st->depth && j < 4; j++) {
                prof_frame_label(p->meta, &st->frames[j], label, sizeof label);
                fputs("<div class=\"callers\">&larr; ", f);
                sv_html(f, label);
                fputs("</div>", f);
            }
        } else {
            fputs("(no stack)", f);
        }
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
    if (!n) fputs("<p>(no allocation sites)</p>\n", f);
    sv_page_end(f);
    free(rows);
    return 200;
}

/* One node and, when it is large enough, its children. */
static void tree_node(FILE *f, const st_tree *t, uint32_t id, double total, int sampled, const sv_view *v)
{
    const st_node *nd = &t->n[id];
    char label[1024], a[80];
    fg_frame_label(t, nd->frame, label, sizeof label);
    fprintf(f, "<details%s><summary>%s (%.1f%%) ", nd->depth < 4 ? " open" : "",
            est_text(&nd->total, sampled, a, sizeof a), total > 0 ? 100 * nd->total.value / total : 0.0);
    if (id) {
        fputs("<a href=\"/flame?", f);
        view_query(f, "f", v->f, "t", v->t);
        zoom_fragment(f, label);
        fputs("\">", f);
        sv_html(f, label);
        fputs("</a>", f);
    } else {
        fputs("all", f);
    }
    fputs("</summary>\n", f);
    double rest = 0;
    size_t nrest = 0;
    for (uint32_t c = nd->first_child; c != ST_NONE; c = t->n[c].next_sibling) {
        if (total > 0 && t->n[c].total.value / total < SV_TREE_MIN) { rest += t->n[c].total.value; nrest++; continue; }
        tree_node(f, t, c, total, sampled, v);
    }
    if (nrest) fprintf(f, "<div class=\"hint\">%zu smaller callees, %s</div>\n", nrest, cli_bytes(rest, a, sizeof a));
    fputs("</details>\n", f);
}

int sv_tree(FILE *f, const sv_state *s, const sv_view *v)
{
    st_frames frames;
    st_tree t = { 0 };
    if (st_frames_init(&frames)) return sv_error(f, s, 500, "out of memory");
    if (st_tree_init(&t, &frames) || st_tree_from_prof(&t, v->p, REP_LIVE) || st_tree_sort(&t)) {
        st_tree_free(&t);
        st_frames_free(&frames);
        return sv_error(f, s, 500, "out of memory");
    }
    char title[1200], m[80];
    snprintf(title, sizeof title, "%s%s: call tree of live bytes", s->src[v->f].name, moment(v, m, sizeof m));
    sv_page_begin(f, s, title, v->f);
    fputs("<h1>", f);
    sv_html(f, title);
    fputs("</h1>\n<p>Outermost callers first; each frame with its inclusive live bytes.</p>\n<div id=\"tree\">\n", f);
    tree_node(f, &t, 0, t.n[0].total.value, v->p->rate > 1, v);
    fputs("</div>\n", f);
    sv_page_end(f);
    st_tree_free(&t);
    st_frames_free(&frames);
    return 200;
}

int sv_flame(FILE *f, const sv_state *s, const sv_view *v, const sv_view *base)
{
    st_frames frames;
    st_tree t = { 0 }, tb = { 0 };
    int rc = 500;
    if (st_frames_init(&frames)) return sv_error(f, s, 500, "out of memory");
    if (st_tree_init(&t, &frames) || st_tree_from_prof(&t, v->p, REP_LIVE) || st_tree_sort(&t) ||
        (base && (st_tree_init(&tb, &frames) || st_tree_from_prof(&tb, base->p, REP_LIVE)))) {
        rc = sv_error(f, s, 500, "out of memory");
        goto out;
    }
    char title[1200], sub[600], m[80], mb[80], a[80], bname[1200];
    snprintf(title, sizeof title, "%s%s: live bytes", s->src[v->f].name, moment(v, m, sizeof m));
    if (base) snprintf(bname, sizeof bname, "%s%s", s->src[base->f].name, moment(base, mb, sizeof mb));
    int sampled = v->p->rate > 1 || (base && base->p->rate > 1);
    snprintf(sub, sizeof sub, "total %s%s%s", est_text(&t.n[0].total, sampled, a, sizeof a), sampled ? " (95%)" : "",
             base ? "; red grew, blue shrank since the base" : "");
    fg_opts o = { title, sub, REP_LIVE, 1, 1200, sampled, base ? &tb : NULL, base ? bname : NULL };
    /* flamegraph.c writes a whole page; the navigation goes in after <body>. */
    char *buf = NULL;
    size_t len = 0;
    FILE *m2 = open_memstream(&buf, &len);
    if (!m2) { rc = sv_error(f, s, 500, "out of memory"); goto out; }
    int wrc = fg_write(m2, &t, &o);
    fclose(m2);
    if (wrc || !buf) { free(buf); rc = sv_error(f, s, 500, "out of memory"); goto out; }
    char *body = strstr(buf, "<body>\n");
    if (!body) { free(buf); rc = sv_error(f, s, 500, "flame graph without a body"); goto out; }
    body += strlen("<body>\n");
    fwrite(buf, 1, (size_t)(body - buf), f);
    fprintf(f, "<style>\n%s</style>\n", sv_style);
    /* Only the navigation bar of the usual page. */
    char *nav = NULL;
    size_t nl = 0;
    FILE *n = open_memstream(&nav, &nl);
    if (n) {
        sv_page_begin(n, s, title, v->f);
        fclose(n);
        const char *st = nav ? strstr(nav, "<nav>") : NULL, *en = st ? strstr(st, "</nav>") : NULL;
        if (en) fwrite(st, 1, (size_t)(en + 6 - st), f);
        free(nav);
    }
    if (base) {
        fputs("\n<p style=\"margin:6px 12px\" id=\"flamebase\">Growth since ", f);
        sv_html(f, bname);
        fputs("</p>", f);
    }
    fputs("\n", f);
    fwrite(body, 1, len - (size_t)(body - buf), f);
    free(buf);
    rc = 200;
out:
    st_tree_free(&t);
    if (base) st_tree_free(&tb);
    st_frames_free(&frames);
    return rc;
}

/* "+4.00 MiB ± 1.20 MiB", or "+4.00 MiB (1.90 MiB .. 7.10 MiB)" when the
 * interval is not symmetric (a paired growth from few samples), as memlyze
 * diff prints it. */
static const char *growth_text(double g, double lo, double hi, char *buf, size_t len)
{
    char x[40], y[40], z[40];
    double h = (hi - lo) / 2;
    if (fabs(g - lo - h) <= 1e-6 * (h + 1))
        snprintf(buf, len, "%s%s \xc2\xb1 %s", g >= 0 ? "+" : "-", cli_bytes(fabs(g), x, sizeof x), cli_bytes(h, y, sizeof y));
    else
        snprintf(buf, len, "%s%s (%s .. %s)", g >= 0 ? "+" : "-", cli_bytes(fabs(g), x, sizeof x), cli_bytes(lo, y, sizeof y),
                 cli_bytes(hi, z, sizeof z));
    return buf;
}

int sv_diff(FILE *f, const sv_state *s, const sv_view *a, const sv_view *b)
{
    diff_result d;
    if (diff_profiles(a->p, b->p, a->f == b->f, &d)) return sv_error(f, s, 500, "out of memory");
    char title[2600], ma[80], mb[80], x[80], y[80], z[80];
    snprintf(title, sizeof title, "growth from %s%s to %s%s", s->src[a->f].name, moment(a, ma, sizeof ma),
             s->src[b->f].name, moment(b, mb, sizeof mb));
    sv_page_begin(f, s, title, b->f);
    fputs("<h1>", f);
    sv_html(f, title);
    char gt[160], how[96];
    if (d.paired)
        snprintf(how, sizeof how, "paired: %llu samples born, %llu died", (unsigned long long)d.born,
                 (unsigned long long)d.died);
    else snprintf(how, sizeof how, "independent estimates");
    fprintf(f, "</h1>\n<p id=\"difftotal\">live heap %s &rarr; %s; growth %s (95%%; %s)</p>\n",
            cli_bytes(d.a, x, sizeof x), cli_bytes(d.b, y, sizeof y), growth_text(d.growth, d.lo, d.hi, gt, sizeof gt),
            how);
    fputs("<p>Sites matched by function, file and line; the ones that grew most first. "
          "Click a site for the flame graph of the growth.</p>\n", f);
    diff_form(f, s, a->f, b->f);
    fputs("<table id=\"diff\">\n<tr><th>#</th><th>growth (95%)</th><th>A</th><th>B</th><th>site</th></tr>\n", f);
    for (size_t i = 0; i < d.n && i < SV_TOP_ROWS; i++) {
        const diff_row *r = &d.rows[i];
        char g[160];
        growth_text(r->growth, r->lo, r->hi, g, sizeof g);
        fprintf(f, "<tr><td class=\"n\">%zu</td><td class=\"n %s\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"site\">",
                i + 1, r->lo > 0 ? "grew" : r->hi < 0 ? "shrank" : "", g,
                cli_bytes(r->a, y, sizeof y), cli_bytes(r->b, z, sizeof z));
        if (r->nframes) {
            fputs("<a class=\"sitelink\" href=\"/flame?", f);
            view_query(f, "f", b->f, "t", b->t);
            fputs("&amp;", f);
            view_query(f, "base", a->f, "bt", a->t);
            zoom_fragment(f, r->frames[0]);
            fputs("\">", f);
            sv_html(f, r->frames[0]);
            fputs("</a>", f);
            for (unsigned j = 1; j < r->nframes; j++) {
                fputs("<div class=\"callers\">&larr; ", f);
                sv_html(f, r->frames[j]);
                fputs("</div>", f);
            }
        } else {
            fputs("(no frames)", f);
        }
        fputs("</td></tr>\n", f);
    }
    fputs("</table>\n", f);
    if (!d.n) fputs("<p>(no allocation sites)</p>\n", f);
    sv_page_end(f);
    diff_result_free(&d);
    return 200;
}

/* Two clicks on the chart pick A and B; the second opens their diff. */
static const char tl_pick_script[] =
    "(function () {\n"
    "  'use strict';\n"
    "  var box = document.getElementById('chart'), svg = box.querySelector('svg');\n"
    "  var g = document.getElementById('mlztl'), status = document.getElementById('pick');\n"
    "  var f = box.getAttribute('data-f'), span = +g.getAttribute('data-span-us');\n"
    "  var left = +g.getAttribute('data-left'), pw = +g.getAttribute('data-plot-width');\n"
    "  var vw = svg.viewBox.baseVal.width, first = null;\n"
    "  svg.style.cursor = 'crosshair';\n"
    "  svg.addEventListener('click', function (e) {\n"
    "    var r = svg.getBoundingClientRect();\n"
    "    var x = (e.clientX - r.left) * vw / r.width;\n"
    "    var frac = Math.min(Math.max((x - left) / pw, 0), 1);\n"
    "    var t = (frac * span / 1e6).toFixed(6);\n"
    "    var line = document.createElementNS('http://www.w3.org/2000/svg', 'line');\n"
    "    var px = left + frac * pw;\n"
    "    line.setAttribute('x1', px); line.setAttribute('x2', px);\n"
    "    line.setAttribute('y1', 0); line.setAttribute('y2', svg.viewBox.baseVal.height);\n"
    "    line.setAttribute('stroke', first === null ? '#2a9d3a' : '#b02020'); line.setAttribute('stroke-width', 2);\n"
    "    line.setAttribute('class', 'pickline');\n"
    "    svg.appendChild(line);\n"
    "    if (first === null) { first = t; status.textContent = 'A at +' + t + ' s; click a second moment for B'; return; }\n"
    "    var a = Math.min(+first, +t).toFixed(6), b = Math.max(+first, +t).toFixed(6);\n"
    "    status.textContent = 'diff +' + a + ' s \\u2192 +' + b + ' s';\n"
    "    window.location.href = '/diff?a=' + f + '&ta=' + a + '&b=' + f + '&tb=' + b;\n"
    "  });\n"
    "})();\n";

int sv_timeline(FILE *f, const sv_state *s, int ix)
{
    const sv_source *x = &s->src[ix];
    mlz_error e = { 0 };
    mlz_reader *r = mlz_reader_open(x->path, 0, &e);
    heapseries *h = r ? malloc(sizeof *h) : NULL;
    if (!r || !h || hs_build(h, r, &e)) {
        char msg[700];
        snprintf(msg, sizeof msg, "%s: %s", x->name, r && h ? e.msg : r ? "out of memory" : e.msg);
        if (h && r) hs_free(h);
        free(h);
        if (r) mlz_reader_close(r);
        return sv_error(f, s, 500, msg);
    }
    char title[1200];
    snprintf(title, sizeof title, "%s: estimated live heap over time", x->name);
    sv_page_begin(f, s, title, ix);
    fputs("<p>Click two moments on the chart to see what grew between them.</p>\n"
          "<p id=\"pick\" class=\"hint\">pick A</p>\n", f);
    char *svg = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&svg, &len);
    if (m) {
        tl_write_svg(m, h, x->name, title, 1100, 420);
        fclose(m);
    }
    /* Inline in the page: without the XML declaration. */
    const char *start = svg ? strstr(svg, "<svg") : NULL;
    fprintf(f, "<div id=\"chart\" data-f=\"%d\">\n", ix);
    if (start) fwrite(start, 1, len - (size_t)(start - svg), f);
    fprintf(f, "</div>\n<script>\n%s</script>\n", tl_pick_script);
    sv_page_end(f);
    free(svg);
    hs_free(h);
    free(h);
    mlz_reader_close(r);
    return 200;
}
