/*
 * cmd_replay.c - memlyze replay TRACE: the recorded allocation stream
 * replayed under other allocators, one fresh process each, and what
 * each made of it: time, peak RSS, RSS at the end, fragmentation, faults.
 *
 * The parent reads the trace once into a plan (replay_ops.c); each child is
 * this program again (replay --child), started with LD_PRELOAD naming the
 * allocator, which runs the plan (replay_child.c) and prints one line.
 */
#include "cli.h"
#include "replay_child.h"
#include "replay_ops.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The allocators known by name: X(name, library file to preload (NULL:
 * none), what the help calls it, Debian package). */
#define REPLAY_ALLOCATORS(X)                                                                   \
    X("glibc", NULL, "the C library's own malloc", "libc6")                                   \
    X("jemalloc", "libjemalloc.so.2", "libjemalloc.so.2", "libjemalloc2")                     \
    X("tcmalloc", "libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so.4", "libtcmalloc-minimal4") \
    X("mimalloc", "libmimalloc.so.2", "libmimalloc.so.2", "libmimalloc2.0")

typedef struct allocator {
    const char *name, *soname, *package;
} allocator;

#define ROW(n, so, text, pkg) { n, so, pkg },
static const allocator known[] = { REPLAY_ALLOCATORS(ROW) };
#undef ROW
#define NKNOWN (sizeof known / sizeof known[0])
#define NAME(n, so, text, pkg) ", " n
static const char known_names[] = REPLAY_ALLOCATORS(NAME);
#undef NAME
#define HELP(n, so, text, pkg) "                      " n ": " text " (Debian package " pkg ")\n"

static const char *const lib_dirs[] = { "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64",
                                        "/usr/lib", "/usr/local/lib" };

/* The file to preload for a known allocator; NULL when not installed. */
static char *find_library(const char *soname)
{
    for (size_t i = 0; i < sizeof lib_dirs / sizeof lib_dirs[0]; i++) {
        char *p;
        if (asprintf(&p, "%s/%s", lib_dirs[i], soname) < 0) return NULL;
        if (!access(p, R_OK)) return p;
        free(p);
    }
    return NULL;
}

typedef struct column {
    char *label;              /* the name as asked for */
    char *preload;            /* NULL: the C library's malloc */
    char error[256];          /* why there is no result */
    replay_result r;
} column;

/* Runs one child; 0 and c->r, or -1 with c->error. */
static int run_child(const replay_plan *plan, column *c, int timing)
{
    int out[2];
    if (pipe(out)) return snprintf(c->error, sizeof c->error, "pipe: %s", strerror(errno)), -1;
    char a[6][32];
    snprintf(a[0], sizeof a[0], "%d", plan->fd);
    snprintf(a[1], sizeof a[1], "%llu", (unsigned long long)plan->nops);
    snprintf(a[2], sizeof a[2], "%llu", (unsigned long long)plan->nslots);
    snprintf(a[3], sizeof a[3], "%u", plan->nworkers);
    snprintf(a[4], sizeof a[4], "%llu", (unsigned long long)plan->peak_op);
    snprintf(a[5], sizeof a[5], "%d", timing);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(out[0]);
        close(out[1]);
        return snprintf(c->error, sizeof c->error, "fork: %s", strerror(errno)), -1;
    }
    if (pid == 0) {
        dup2(out[1], STDOUT_FILENO);
        close(out[0]);
        close(out[1]);
        fcntl(plan->fd, F_SETFD, 0);   /* the plan stays open across exec */
        if (c->preload) setenv("LD_PRELOAD", c->preload, 1);
        else unsetenv("LD_PRELOAD");
        char *argv[] = { "memlyze", "replay", "--child", a[0], a[1], a[2], a[3], a[4], a[5], NULL };
        execv("/proc/self/exe", argv);
        fprintf(stderr, "memlyze replay: exec: %s\n", strerror(errno));
        _exit(127);
    }
    close(out[1]);
    FILE *f = fdopen(out[0], "r");
    char line[512];
    int got = 0;
    while (f && fgets(line, sizeof line, f))
        if (!got && !replay_result_parse(line, &c->r)) got = 1;
    if (f) fclose(f);
    else close(out[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (WIFSIGNALED(st))
        return snprintf(c->error, sizeof c->error, "the replay was killed by signal %d (%s)", WTERMSIG(st),
                        strsignal(WTERMSIG(st))), -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) || !got)
        return snprintf(c->error, sizeof c->error, "the replay failed (exit %d)", WIFEXITED(st) ? WEXITSTATUS(st) : -1), -1;
    return 0;
}

/* Resolves the --allocator list into columns; NULL list: every known
 * allocator that is installed. Returns the count, or -1 (usage error). */
static int resolve(const char *list, column *cols, int max)
{
    int n = 0;
    if (!list) {
        for (size_t i = 0; i < NKNOWN && n < max; i++) {
            char *lib = known[i].soname ? find_library(known[i].soname) : NULL;
            if (known[i].soname && !lib) continue;
            cols[n].label = strdup(known[i].name);
            cols[n++].preload = lib;
        }
        return n;
    }
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save)) {
        column *c = &cols[n++];
        c->label = strdup(tok);
        if (strchr(tok, '/')) {
            if (access(tok, R_OK)) snprintf(c->error, sizeof c->error, "%s: %s", tok, strerror(errno));
            else c->preload = realpath(tok, NULL);
            continue;
        }
        const allocator *a = NULL;
        for (size_t i = 0; i < NKNOWN; i++)
            if (!strcmp(known[i].name, tok)) a = &known[i];
        if (!a) {
            free(copy);
            return -1 - (n - 1);
        }
        if (a->soname && !(c->preload = find_library(a->soname)))
            snprintf(c->error, sizeof c->error, "%s not found (Debian package %s)", a->soname, a->package);
    }
    free(copy);
    return n;
}

static double kib_above(uint64_t v, uint64_t base)
{
    return v > base ? (double)(v - base) * 1024 : 0;
}

static void print_table(const char *path, const replay_plan *p, const column *cols, int n)
{
    char b1[32], b2[32];
    printf("%s: %llu ops (%llu allocations, %llu frees) on %u thread%s; live at the peak %s, at the end %s\n",
           path, (unsigned long long)p->nops, (unsigned long long)p->allocs, (unsigned long long)p->frees,
           p->nworkers, p->nworkers == 1 ? "" : "s",
           cli_bytes((double)p->peak_live, b1, sizeof b1), cli_bytes((double)p->live_at_end, b2, sizeof b2));
    if (p->weighted)
        printf("ESTIMATE: a sampled trace (rate %llu) replayed with each sample as 1/p blocks of its size\n",
               (unsigned long long)p->rate);
    if (p->unknown_frees)
        printf("note: %llu frees of blocks allocated before the recording started were skipped\n",
               (unsigned long long)p->unknown_frees);
    printf("%-10s %9s %11s %11s %14s %12s  %s\n", "allocator", "time", "peak RSS", "RSS at end", "fragmentation",
           "page faults", "library");
    for (int i = 0; i < n; i++) {
        const column *c = &cols[i];
        if (c->error[0]) {
            printf("%-10s %s\n", c->label, c->error);
            continue;
        }
        const replay_result *r = &c->r;
        char t[32], pk[32], end[32], fr[32];
        snprintf(t, sizeof t, "%.3f s", (double)r->time_ns / 1e9);
        if (p->peak_live) snprintf(fr, sizeof fr, "%.2f", kib_above(r->rss_peak_kib, r->baseline_kib) / (double)p->peak_live);
        else snprintf(fr, sizeof fr, "-");
        printf("%-10s %9s %11s %11s %14s %12llu  %s\n", c->label, t,
               cli_bytes(kib_above(r->hwm_kib, r->baseline_kib), pk, sizeof pk),
               cli_bytes(kib_above(r->rss_end_kib, r->baseline_kib), end, sizeof end), fr,
               (unsigned long long)(r->minflt + r->majflt), r->library);
    }
}

static void print_json(const char *path, const replay_plan *p, const column *cols, int n)
{
    json_t *root = json_object(), *arr = json_array();
    json_object_set_new(root, "file", json_string(path));
    json_object_set_new(root, "estimate", json_boolean(p->weighted));
    json_object_set_new(root, "rate", json_integer((json_int_t)p->rate));
    json_object_set_new(root, "ops", json_integer((json_int_t)p->nops));
    json_object_set_new(root, "allocations", json_integer((json_int_t)p->allocs));
    json_object_set_new(root, "frees", json_integer((json_int_t)p->frees));
    json_object_set_new(root, "skipped_frees", json_integer((json_int_t)p->unknown_frees));
    json_object_set_new(root, "threads", json_integer(p->nworkers));
    json_object_set_new(root, "peak_live_bytes", json_integer((json_int_t)p->peak_live));
    json_object_set_new(root, "live_at_end_bytes", json_integer((json_int_t)p->live_at_end));
    for (int i = 0; i < n; i++) {
        const column *c = &cols[i];
        json_t *o = json_object();
        json_object_set_new(o, "allocator", json_string(c->label));
        if (c->error[0]) {
            json_object_set_new(o, "error", json_string(c->error));
        } else {
            const replay_result *r = &c->r;
            double at_peak = kib_above(r->rss_peak_kib, r->baseline_kib);
            json_object_set_new(o, "library", json_string(r->library));
            json_object_set_new(o, "time_s", json_real((double)r->time_ns / 1e9));
            json_object_set_new(o, "peak_rss_bytes", json_integer((json_int_t)kib_above(r->hwm_kib, r->baseline_kib)));
            json_object_set_new(o, "end_rss_bytes", json_integer((json_int_t)kib_above(r->rss_end_kib, r->baseline_kib)));
            json_object_set_new(o, "rss_at_live_peak_bytes", json_integer((json_int_t)at_peak));
            json_object_set_new(o, "baseline_rss_bytes", json_integer((json_int_t)(r->baseline_kib * 1024)));
            json_object_set_new(o, "fragmentation", p->peak_live ? json_real(at_peak / (double)p->peak_live) : json_null());
            json_object_set_new(o, "minor_faults", json_integer((json_int_t)r->minflt));
            json_object_set_new(o, "major_faults", json_integer((json_int_t)r->majflt));
        }
        json_array_append_new(arr, o);
    }
    json_object_set_new(root, "allocators", arr);
    json_dumpf(root, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
    putchar('\n');
    json_decref(root);
}

#define MAX_ALLOCATORS 32

static int run(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "--child")) return replay_child_main(argc - 2, argv + 2);
    const char *list = NULL;
    int as_json = 0, timing = 0, force = 0, c;
    static const struct option opts[] = {
        { "allocator", required_argument, 0, 'a' }, { "json", no_argument, 0, 'j' },
        { "timing", no_argument, 0, 't' }, { "force", no_argument, 0, 'f' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "a:", opts, NULL)) != -1) {
        switch (c) {
        case 'a': list = optarg; break;
        case 'j': as_json = 1; break;
        case 't': timing = 1; break;
        case 'f': force = 1; break;
        default: return cli_usage_error(&cmd_replay, "bad option");
        }
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_replay, "need exactly one TRACE");
    const char *path = argv[optind];
    column cols[MAX_ALLOCATORS] = { 0 };
    int n = resolve(list, cols, MAX_ALLOCATORS);
    if (n < 0) {
        int bad = -1 - n;
        int rc = cli_usage_error(&cmd_replay, "--allocator: '%s' is none of %s, nor a path to a library", cols[bad].label,
                                 known_names + 2);
        for (int i = 0; i <= bad; i++) free(cols[i].label), free(cols[i].preload);
        return rc;
    }
    if (n == 0) return cli_usage_error(&cmd_replay, "--allocator lists nothing");

    replay_plan plan;
    char err[512];
    int rc = 0;
    if (replay_plan_build(path, force, &plan, err, sizeof err)) {
        rc = cli_error("replay", "%s: %s", path, err);
    } else {
        for (int i = 0; i < n; i++)
            if (!cols[i].error[0] && run_child(&plan, &cols[i], timing)) rc = 1;
        for (int i = 0; i < n; i++) rc |= cols[i].error[0] != 0;
        if (as_json) print_json(path, &plan, cols, n);
        else print_table(path, &plan, cols, n);
        replay_plan_free(&plan);
    }
    for (int i = 0; i < n; i++) free(cols[i].label), free(cols[i].preload);
    return rc;
}

const mlz_command cmd_replay = {
    "replay", run, "replay a trace's allocations under other allocators and compare",
    "usage: memlyze replay [--allocator LIST] [--json] [--timing] [--force] TRACE\n"
    "\n"
    "Replays the recorded allocations and frees of TRACE (sizes, order and\n"
    "threads) in a fresh process per allocator and prints one table:\n"
    "  time           the replay's wall-clock time\n"
    "  peak RSS       the highest resident memory, above the replayer's own\n"
    "                 (measured before the first call; the first use of the\n"
    "                 allocator's code adds up to a few hundred KiB)\n"
    "  RSS at end     resident memory after the last call (live blocks kept)\n"
    "  fragmentation  RSS when live bytes peak, over those live bytes (1.00 =\n"
    "                 no overhead)\n"
    "  page faults    minor + major faults during the replay\n"
    "Each new block gets one write per 4 KiB page, as a program would use it.\n"
    "Recorded threads are threads that take turns in the recorded order; a free\n"
    "runs on the thread of the last allocation before it (a trace does not say\n"
    "which thread freed). A trace records a realloc as the old block's free and\n"
    "the new block's allocation: the replay makes those two calls. Frees of\n"
    "blocks from before the recording are skipped (counted).\n"
    "  --allocator LIST  comma-separated names or paths of malloc libraries\n"
    "                    (LD_PRELOAD); default: every installed one of\n" REPLAY_ALLOCATORS(HELP)
    "  --json            the same as a JSON document\n"
    "  --timing          keep the recorded time between calls (sleeps)\n"
    "  --force           replay a sampled trace: each sample as 1/p blocks of\n"
    "                    its size (p its sampling probability), labelled an\n"
    "                    ESTIMATE; without it sampled traces are refused\n",
};
