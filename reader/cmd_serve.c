/*
 * cmd_serve.c - memlyze serve FILE... | --pid PID: the reports as a local
 * web site, linked together (serve_pages.c writes the pages).
 *
 * HTTP is libmicrohttpd's: it parses requests (and answers malformed or
 * oversized ones itself); we only route GET/HEAD pages and one POST. It
 * runs one internal polling thread, so requests are handled one at a time
 * and the sources need no lock; the main thread only waits for a signal.
 * It binds 127.0.0.1 by default on a free port it prints.
 *
 * libmicrohttpd is loaded when serve starts, not linked: it brings gnutls
 * and eight more libraries, ~10 ms at the start of every memlyze command.
 */
#include "cli.h"
#include "export_json.h"
#include "report.h"
#include "serve.h"
#include "snapshot.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* Profiles kept loaded at once. A --pid session takes a snapshot per
 * click, each whole in memory with its file open (13 exact snapshots of
 * 300k objects held 269 MB): the least recently shown go back to their
 * files, and a page that needs one loads it again. */
#define SV_LOADED_MAX 4

static void unload_source(sv_state *s, sv_source *x)
{
    if (!x->loaded) return;
    cli_unload(x->r, &x->p);
    x->r = NULL;
    memset(&x->p, 0, sizeof x->p);
    x->loaded = 0;
    s->loaded--;
}

/* Room for one more: the least recently shown go, never one this request
 * shows (a diff needs both of its profiles). */
static void make_room(sv_state *s)
{
    while (s->loaded >= SV_LOADED_MAX) {
        sv_source *old = NULL;
        for (size_t i = 0; i < s->n; i++) {
            sv_source *y = &s->src[i];
            if (y->loaded && y->req != s->req && (!old || y->used < old->used)) old = y;
        }
        if (!old) return;
        unload_source(s, old);
    }
}

/* Source ix loaded, for this request: 0, or 1 after printing why. */
static int load_source(sv_state *s, int ix)
{
    sv_source *x = &s->src[ix];
    x->used = ++s->clock;
    x->req = s->req;
    if (x->loaded) return 0;
    make_room(s);
    if (cli_load("serve", x->path, NULL, &x->r, &x->p)) return 1;
    x->loaded = 1;
    s->loaded++;
    return 0;
}

/* Loads path as a new source named name; 0, or 1 after printing why. */
static int add_source(sv_state *s, const char *path, const char *name)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? 2 * s->cap : 8;
        sv_source *nv = realloc(s->src, nc * sizeof *nv);
        if (!nv) return cli_error("serve", "out of memory");
        s->src = nv;
        s->cap = nc;
    }
    sv_source *x = &s->src[s->n];
    memset(x, 0, sizeof *x);
    x->path = strdup(path);
    x->name = strdup(name);
    if (!x->path || !x->name || load_source(s, (int)s->n)) {
        free(x->path);
        free(x->name);
        return x->path && x->name ? 1 : cli_error("serve", "out of memory");
    }
    x->trace = x->p.meta->kind && !strcmp(x->p.meta->kind, "trace");
    snprintf(x->kind, sizeof x->kind, "%s", x->p.meta->kind ? x->p.meta->kind : "v1");
    x->live_bytes = x->p.live_bytes;
    x->live_samples = x->p.live_samples;
    x->rate = x->p.rate;
    s->n++;
    return 0;
}

/* --pid: a snapshot into the state's directory, loaded as a source.
 * 0, or an HTTP status with msg. */
static int take_snapshot(sv_state *s, char *msg, size_t len)
{
    mlz_live_heap h;
    char err[512], path[128], name[96];
    int rc = mlz_live_read(s->pid, &h, 1, err, sizeof err);
    if (rc) {
        snprintf(msg, len, "snapshot of process %d: %s", (int)s->pid, err);
        return rc == -2 ? 410 : 500;
    }
    snprintf(path, sizeof path, "%s/snapshot-%d.mlyze", s->dir, s->nsnap + 1);
    rc = mlz_live_write(&h, path, 0, err, sizeof err);
    mlz_live_free(&h);
    if (rc) { snprintf(msg, len, "%s", err); return 500; }
    s->nsnap++;
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char when[16];
    strftime(when, sizeof when, "%H:%M:%S", &tm);
    snprintf(name, sizeof name, "snapshot %d of pid %d (%s)", s->nsnap, (int)s->pid, when);
    if (add_source(s, path, name)) { snprintf(msg, len, "%s: cannot load it back", path); return 500; }
    return 0;
}

/* ---------------------------------------------------------------- routing */

/* The libmicrohttpd functions serve calls, from load_mhd. */
static struct {
    __typeof__(MHD_start_daemon) *start_daemon;
    __typeof__(MHD_stop_daemon) *stop_daemon;
    __typeof__(MHD_get_daemon_info) *get_daemon_info;
    __typeof__(MHD_lookup_connection_value) *lookup_connection_value;
    __typeof__(MHD_create_response_from_buffer_with_free_callback) *create_response_from_buffer_with_free_callback;
    __typeof__(MHD_add_response_header) *add_response_header;
    __typeof__(MHD_queue_response) *queue_response;
    __typeof__(MHD_destroy_response) *destroy_response;
} mhd;

static int load_mhd(void)
{
    static const char lib[] = "libmicrohttpd.so.12";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) return cli_error("serve", "cannot load the HTTP server library: %s (install libmicrohttpd12)", dlerror());
#define MHD_SYM(f) \
    if (!(*(void **)&mhd.f = dlsym(h, "MHD_" #f))) return cli_error("serve", "%s has no MHD_" #f, lib)
    MHD_SYM(start_daemon);
    MHD_SYM(stop_daemon);
    MHD_SYM(get_daemon_info);
    MHD_SYM(lookup_connection_value);
    MHD_SYM(create_response_from_buffer_with_free_callback);
    MHD_SYM(add_response_header);
    MHD_SYM(queue_response);
    MHD_SYM(destroy_response);
#undef MHD_SYM
    return 0;
}

static const char *arg(struct MHD_Connection *c, const char *key)
{
    return mhd.lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, key);
}

/* The source named by query key (a number below s->n); -1 when absent or bad. */
static int source_arg(struct MHD_Connection *c, const sv_state *s, const char *key)
{
    const char *v = arg(c, key);
    if (!v || !*v || strlen(v) > 9) return -1;
    char *end;
    long n = strtol(v, &end, 10);
    return *end || n < 0 || (size_t)n >= s->n ? -1 : (int)n;
}

/* Opens the view: source ix, whole or at moment t. 0, or an HTTP status with msg. */
static int open_view(sv_state *s, int ix, const char *t, sv_view *v, char *msg, size_t len)
{
    memset(v, 0, sizeof *v);
    v->f = ix;
    if (load_source(s, ix)) {
        snprintf(msg, len, "cannot read %s (see the server's output)", s->src[ix].name);
        return 500;
    }
    v->p = &s->src[ix].p;
    if (!t || !*t) return 0;
    rep_at at;
    if (strlen(t) > 40 || rep_parse_at(t, &at)) {
        snprintf(msg, len, "'%.40s' is not a time (seconds since the start, or microseconds)", t);
        return 400;
    }
    if (cli_load("serve", s->src[ix].path, &at, &v->r, &v->tmp)) {
        snprintf(msg, len, "cannot read %s at %s (see the server's output)", s->src[ix].name, t);
        return 400;
    }
    v->t = t;
    v->p = &v->tmp;
    return 0;
}

static void close_view(sv_view *v)
{
    if (v->r) cli_unload(v->r, &v->tmp);
    v->r = NULL;
}

/* Writes the page for url into f; returns the HTTP status. *type is set
 * for non-HTML answers; *location for redirects. */
static int route(sv_state *s, struct MHD_Connection *c, const char *url, int post, FILE *f, const char **type,
                 char *location, size_t loclen)
{
    char msg[1024];
    s->req++;
    if (post) {
        if (strcmp(url, "/snapshot")) return sv_error(f, s, 405, "only /snapshot takes POST");
        if (!s->pid) return sv_error(f, s, 404, "snapshots need memlyze serve --pid PID");
        int st = take_snapshot(s, msg, sizeof msg);
        if (st) return sv_error(f, s, st, msg);
        if (s->n > 1) snprintf(location, loclen, "/diff?a=%zu&b=%zu", s->n - 2, s->n - 1);
        else snprintf(location, loclen, "/top?f=%zu", s->n - 1);
        fputs("<!DOCTYPE html>\n<p>snapshot taken</p>\n", f);
        return 303;
    }
    if (!strcmp(url, "/")) return sv_index(f, s);
    int is_top = !strcmp(url, "/top"), is_tree = !strcmp(url, "/tree"), is_flame = !strcmp(url, "/flame");
    int is_json = !strcmp(url, "/json"), is_tl = !strcmp(url, "/timeline"), is_diff = !strcmp(url, "/diff");
    if (!(is_top || is_tree || is_flame || is_json || is_tl || is_diff)) {
        snprintf(msg, sizeof msg, "no page %.200s%s", url, strlen(url) > 200 ? "..." : "");
        return sv_error(f, s, 404, msg);
    }
    if (is_diff) {
        int a = source_arg(c, s, "a"), b = source_arg(c, s, "b");
        if (a < 0 || b < 0) return sv_error(f, s, 400, "diff needs a=N and b=N, two profiles of the index");
        sv_view va, vb;
        int st = open_view(s, a, arg(c, "ta"), &va, msg, sizeof msg);
        if (st) return sv_error(f, s, st, msg);
        st = open_view(s, b, arg(c, "tb"), &vb, msg, sizeof msg);
        if (st) { close_view(&va); return sv_error(f, s, st, msg); }
        st = sv_diff(f, s, &va, &vb);
        close_view(&va);
        close_view(&vb);
        return st;
    }
    int ix = source_arg(c, s, "f");
    if (ix < 0) return sv_error(f, s, 400, "needs f=N, a profile of the index");
    if (is_tl) {
        if (!s->src[ix].trace) return sv_error(f, s, 400, "a timeline needs a trace (this profile is a snapshot)");
        return sv_timeline(f, s, ix);
    }
    sv_view v, base;
    int st = open_view(s, ix, arg(c, "t"), &v, msg, sizeof msg);
    if (st) return sv_error(f, s, st, msg);
    if (is_top) st = sv_top(f, s, &v);
    else if (is_tree) st = sv_tree(f, s, &v);
    else if (is_json) {
        uint64_t start = mlz_reader_header(s->src[ix].r)->start_us;
        uint64_t at = v.t ? rep_at_until(&(rep_at){ v.t }, start) : v.p->last_us;
        st = export_json_write(f, v.p, s->src[ix].name, start, at, msg, sizeof msg) ? 500 : 200;
        if (st == 200) *type = "application/json";
        else { rewind(f); st = sv_error(f, s, 500, msg); }
    } else {
        int b = -1;
        if (arg(c, "base")) {
            b = source_arg(c, s, "base");
            if (b < 0) { close_view(&v); return sv_error(f, s, 400, "base=N names no profile of the index"); }
        }
        if (b >= 0) {
            st = open_view(s, b, arg(c, "bt"), &base, msg, sizeof msg);
            if (st) { close_view(&v); return sv_error(f, s, st, msg); }
        }
        st = sv_flame(f, s, &v, b >= 0 ? &base : NULL);
        if (b >= 0) close_view(&base);
    }
    close_view(&v);
    return st;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **req)
{
    static int marker;
    sv_state *s = cls;
    (void)version;
    (void)upload;
    if (!*req) { *req = &marker; return MHD_YES; }   /* headers only so far */
    if (*upload_size) { *upload_size = 0; return MHD_YES; }   /* a body we do not need */

    char *buf = NULL, location[128] = "";
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return MHD_NO;
    const char *type = "text/html; charset=utf-8";
    int get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
    int post = !strcmp(method, MHD_HTTP_METHOD_POST);
    int status = get || post ? route(s, c, url, post, f, &type, location, sizeof location)
                             : sv_error(f, s, 405, "only GET, HEAD and POST /snapshot");
    if (fclose(f)) { free(buf); return MHD_NO; }
    struct MHD_Response *r = mhd.create_response_from_buffer_with_free_callback(len, buf, free);
    if (!r) { free(buf); return MHD_NO; }
    mhd.add_response_header(r, "Content-Type", type);
    /* Everything a page needs is in it: nothing may be fetched. */
    mhd.add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "img-src data:; form-action 'self'; base-uri 'none'");
    mhd.add_response_header(r, "X-Content-Type-Options", "nosniff");
    mhd.add_response_header(r, "Cache-Control", "no-store");
    if (*location) mhd.add_response_header(r, "Location", location);
    enum MHD_Result ok = mhd.queue_response(c, (unsigned)status, r);
    mhd.destroy_response(r);
    return ok;
}

static void cleanup(sv_state *s)
{
    for (size_t i = 0; i < s->n; i++) {
        unload_source(s, &s->src[i]);
        if (s->pid && !strncmp(s->src[i].path, s->dir, strlen(s->dir))) unlink(s->src[i].path);
        free(s->src[i].path);
        free(s->src[i].name);
    }
    free(s->src);
    if (s->dir[0]) rmdir(s->dir);
}

static int run(int argc, char **argv)
{
    long port = 0, pid = 0;
    const char *bind_addr = "127.0.0.1";
    int c;
    static const struct option opts[] = {
        { "port", required_argument, 0, 'p' }, { "pid", required_argument, 0, 'P' },
        { "bind", required_argument, 0, 'b' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:", opts, NULL)) != -1) {
        char *end;
        if (c == 'p') {
            port = strtol(optarg, &end, 10);
            if (*end || port < 0 || port > 65535) return cli_usage_error(&cmd_serve, "--port takes 0 to 65535");
        } else if (c == 'P') {
            if (!(pid = cli_parse_pid(optarg))) return cli_usage_error(&cmd_serve, "'%s' is not a process id", optarg);
        } else if (c == 'b') bind_addr = optarg;
        else return cli_usage_error(&cmd_serve, "bad option");
    }
    if (optind == argc && !pid) return cli_usage_error(&cmd_serve, "need FILE... or --pid PID");
    struct sockaddr_in sin = { 0 };
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, bind_addr, &sin.sin_addr) != 1)
        return cli_usage_error(&cmd_serve, "--bind takes an IPv4 address, e.g. 127.0.0.1");

    if (load_mhd()) return 1;
    sv_state s = { 0 };
    s.pid = (pid_t)pid;
    int rc = 1;
    for (int i = optind; i < argc; i++)
        if (add_source(&s, argv[i], base_name(argv[i]))) goto out;
    if (pid) {
        snprintf(s.dir, sizeof s.dir, "/tmp/memlyze-serve.XXXXXX");
        if (!mkdtemp(s.dir)) {
            s.dir[0] = 0;
            cli_error("serve", "cannot make a directory for snapshots: %s", strerror(errno));
            goto out;
        }
        char msg[700];
        if (take_snapshot(&s, msg, sizeof msg)) { cli_error("serve", "%s", msg); goto out; }
    }

    /* Signals go to the main thread only: the server thread inherits the mask. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = mhd.start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL, answer, &s,
                                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sin,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
                                            MHD_OPTION_END);
    if (!d) {
        cli_error("serve", "cannot listen on %s:%ld: %s", bind_addr, port, strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *di = mhd.get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    printf("memlyze serve: http://%s:%u/ (%zu profile%s; Ctrl-C stops)\n", bind_addr, di ? di->port : (unsigned)port,
           s.n, s.n == 1 ? "" : "s");
    fflush(stdout);
    int sig;
    sigwait(&set, &sig);
    mhd.stop_daemon(d);
    rc = 0;
out:
    cleanup(&s);
    return rc;
}

const mlz_command cmd_serve = {
    "serve", run, "browse profiles in a local web page (flame graph, top, tree, diff, timeline)",
    "usage: memlyze serve [--port N] [--bind ADDR] FILE...\n"
    "       memlyze serve [--port N] [--bind ADDR] --pid PID [FILE...]\n"
    "\n"
    "Serves the profiles as a local web site that needs no network (no external\n"
    "assets): the top sites, the call tree, the flame graph, a diff between any\n"
    "two profiles or two moments of a trace, and a trace's heap timeline, linked\n"
    "together: a site in a table opens the flame graph zoomed to it, two clicks\n"
    "on the timeline open the diff between those moments. With --pid it takes a\n"
    "snapshot of the attached process at the start and whenever asked (a button\n"
    "on the index), and shows the growth since the previous one. It prints the\n"
    "address and runs until interrupted.\n"
    "  -p, --port N    the port (default 0: a free one)\n"
    "  --bind ADDR     the IPv4 address to listen on (default 127.0.0.1: this\n"
    "                  machine only)\n"
    "  --pid PID       a process memlyze is attached to\n",
};
