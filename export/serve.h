/*
 * serve.h - memlyze serve: what the HTTP side (cmd_serve.c) and the page
 * writers (serve_pages.c) share. Every page is written whole into a
 * memory stream and then sent; every name that comes from a trace goes
 * through sv_html (HTML) or jansson (JSON), never raw.
 */
#ifndef MLZ_SERVE_H
#define MLZ_SERVE_H

#include "profile.h"

#include <stdio.h>
#include <sys/types.h>

/* One profile: a FILE given on the command line, or a snapshot taken on
 * request (--pid). Loaded whole while it is among the last few shown;
 * moments (t=) load again. */
typedef struct sv_source {
    char *path;
    char *name;               /* as shown */
    mlz_reader *r;            /* r and p while loaded (cmd_serve.c: load_source) */
    prof p;
    int loaded;
    uint64_t used, req;       /* last shown (state's clock), and in which request */
    int trace;                /* kind "trace": it has a timeline */
    /* For the index, kept when it goes back to its file: */
    char kind[16];
    est live_bytes;
    uint64_t live_samples, rate;
} sv_source;

typedef struct sv_state {
    sv_source *src;
    size_t n, cap;
    size_t loaded;            /* sources loaded now */
    uint64_t clock, req;      /* a tick per source shown; the request being answered */
    pid_t pid;                /* --pid, else 0 */
    char dir[64];             /* where --pid snapshots go (removed at exit) */
    int nsnap;
} sv_state;

/* A profile a page shows: source f, whole or at moment t (seconds since
 * its start; NULL: the end). */
typedef struct sv_view {
    int f;
    const char *t;
    prof *p;                  /* the source's, or tmp */
    mlz_reader *r;            /* non-NULL when tmp was loaded for t */
    prof tmp;
} sv_view;

/* Escaped for HTML text and attribute values (svg_text). */
void sv_html(FILE *f, const char *s);
/* Percent-encoded for a URL query value or fragment. */
void sv_url(FILE *f, const char *s);

/* The pages: each writes a whole HTML document and returns the HTTP status. */
void sv_page_begin(FILE *f, const sv_state *s, const char *title, int f_ix);
void sv_page_end(FILE *f);
int  sv_index(FILE *f, const sv_state *s);
int  sv_top(FILE *f, const sv_state *s, const sv_view *v);
int  sv_tree(FILE *f, const sv_state *s, const sv_view *v);
int  sv_flame(FILE *f, const sv_state *s, const sv_view *v, const sv_view *base);
int  sv_diff(FILE *f, const sv_state *s, const sv_view *a, const sv_view *b);
int  sv_timeline(FILE *f, const sv_state *s, int f_ix);
/* An error page with the message (escaped). */
int  sv_error(FILE *f, const sv_state *s, int status, const char *msg);

#endif
