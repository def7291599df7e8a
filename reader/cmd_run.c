/*
 * cmd_run.c - memlyze run [options] -- CMD ARGS: run a program with the
 * profiler preloaded, then finalize its spool into a .mlyze trace.
 */
#include "cli.h"
#include "finalize.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The preload library next to this binary: build/lib or PREFIX/lib/memlyze. */
static int find_payload(const char *name, char *out, size_t len)
{
    const char *env = getenv("MEMLYZE_LIBDIR");
    if (env) {
        snprintf(out, len, "%s/%s", env, name);
        return access(out, R_OK);
    }
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    static const char *rel[] = { "../lib/", "../lib/memlyze/" };
    for (size_t i = 0; i < 2; i++) {
        if ((size_t)snprintf(out, len, "%s/%s%s", exe, rel[i], name) >= len) return -1;
        char *r = realpath(out, NULL);
        if (r) {
            snprintf(out, len, "%s", r);
            free(r);
            return 0;
        }
    }
    return -1;
}

static void print_coverage(const char *trace)
{
    mlz_error e;
    mlz_reader *r = mlz_reader_open(trace, 0, &e);
    if (!r) return;
    json_t *c = json_object_get(mlz_reader_meta(r)->root, "coverage");
    fprintf(stderr, "%s", json_is_string(c) ? json_string_value(c) : "memlyze run: no coverage report recorded\n");
    mlz_reader_close(r);
}

static int run(int argc, char **argv)
{
    const char *out = NULL, *rate = NULL, *unwind = NULL, *seed = NULL;
    int encoding = MLZ_ENC_SPLIT, compress = 0, follow = 0, got = 0, coverage = 0, c;
    static const struct option opts[] = {
        { "rate", required_argument, 0, 'r' }, { "output", required_argument, 0, 'o' },
        { "unwind", required_argument, 0, 'u' }, { "seed", required_argument, 0, 's' },
        { "compress", no_argument, 0, 'z' }, { "follow-fork", no_argument, 0, 'F' },
        { "got", no_argument, 0, 'G' }, { "coverage", no_argument, 0, 'C' },
        { "format", required_argument, 0, 'E' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "+r:o:z", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            if (cli_parse_size(optarg) <= 0) return cli_usage_error(&cmd_run, "--rate needs a size in bytes");
            rate = optarg;
            break;
        case 'o': out = optarg; break;
        case 'u':
            if (strcmp(optarg, "fp") && strcmp(optarg, "dwarf")) return cli_usage_error(&cmd_run, "--unwind takes fp or dwarf");
            unwind = optarg;
            break;
        case 's': seed = optarg; break;
        case 'z': compress = 1; break;
        case 'E':
            if ((encoding = mlz_encoding_parse(optarg)) < 0)
                return cli_usage_error(&cmd_run, "--format takes split, v1 or lz4");
            break;
        case 'F': follow = 1; break;
        case 'G': got = 1; break;
        case 'C': coverage = got = 1; break;
        default: return cli_usage_error(&cmd_run, "bad option");
        }
    }
    if (optind >= argc) return cli_usage_error(&cmd_run, "no command to run");
    if (compress) encoding = MLZ_ENC_LZ4;
    char lib[PATH_MAX];
    const char *libname = got ? "libmemlyze.so" : "libmemlyze-preload.so";
    if (find_payload(libname, lib, sizeof lib))
        return cli_error("run", "cannot find %s (set MEMLYZE_LIBDIR)", libname);
    char dir[] = "/tmp/memlyze-run.XXXXXX";
    if (!mkdtemp(dir)) return cli_error("run", "cannot create a temporary directory: %s", strerror(errno));
    char spool[PATH_MAX];
    snprintf(spool, sizeof spool, "%s/spool", dir);

    pid_t pid = fork();
    if (pid < 0) return cli_error("run", "fork: %s", strerror(errno));
    if (pid == 0) {
        const char *old = getenv("LD_PRELOAD");
        char pre[2 * PATH_MAX];
        snprintf(pre, sizeof pre, "%s%s%s", lib, old && *old ? ":" : "", old ? old : "");
        setenv("LD_PRELOAD", pre, 1);
        setenv("MEMLYZE_SPOOL", spool, 1);
        if (rate) setenv("MEMLYZE_RATE", rate, 1);
        if (unwind) setenv("MEMLYZE_UNWIND", unwind, 1);
        if (seed) setenv("MEMLYZE_SEED", seed, 1);
        if (follow) setenv("MEMLYZE_FOLLOW_FORK", "1", 1);
        if (got) setenv("MEMLYZE_MODE", "got", 1);
        if (coverage) setenv("MEMLYZE_COVERAGE", "1", 1);
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "memlyze run: cannot run %s: %s\n", argv[optind], strerror(errno));
        _exit(127);
    }
    /* The program gets the terminal's signals; we wait for it. */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (WIFEXITED(st) && code == 127 && access(spool, F_OK) != 0) {
        rmdir(dir);
        return 127;
    }

    char def[64], err[512];
    if (!out) { snprintf(def, sizeof def, "memlyze.%d.mlyze", (int)pid); out = def; }
    /* A program killed before exit leaves its spool unsealed (*.tmp). */
    char path[PATH_MAX + 32];
    int rc = 0, found = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (strncmp(de->d_name, "spool", 5)) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        /* spool -> OUT; spool.CHILD (follow-fork) -> OUT.CHILD.mlyze */
        char target[PATH_MAX + 64], name[256];
        snprintf(name, sizeof name, "%s", de->d_name);
        /* "spool[.CHILD].WRITER.tmp": the writer never sealed it (the
         * program died); its events up to the cut are still good. */
        size_t nl = strlen(name);
        if (nl > 4 && !strcmp(name + nl - 4, ".tmp")) {
            name[nl - 4] = 0;
            char *dot = strrchr(name, '.');
            if (dot) *dot = 0;
            fprintf(stderr, "memlyze run: the program ended before its profile was sealed; keeping what it wrote\n");
        }
        const char *rest = name + 5;
        long child = rest[0] == '.' ? strtol(rest + 1, NULL, 10) : 0;
        if (child > 0) snprintf(target, sizeof target, "%s.%ld.mlyze", out, child);
        else snprintf(target, sizeof target, "%s", out);
        if (mlz_finalize(path, target, "trace", encoding, 0, err, sizeof err)) {
            cli_error("run", "%s", err);
            rc = 1;
        } else {
            found++;
            if (coverage) print_coverage(target);
            fprintf(stderr, "memlyze run: wrote %s\n", target);
        }
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
    if (!found && !rc) return cli_error("run", "the program wrote no profile (statically linked, or it exec'd something else?)");
    return rc ? rc : code;
}

const mlz_command cmd_run = {
    "run", run, "run a program under the profiler and write its trace",
    "usage: memlyze run [-r BYTES] [-o FILE] [--unwind fp|dwarf] [--format split|v1|lz4] [-z] [--follow-fork] [--got] [--coverage] -- CMD [ARGS]\n"
    "\n"
    "Runs CMD with the memlyze sampler preloaded (LD_PRELOAD) and, when it\n"
    "exits, writes its symbolized trace. Exits with CMD's status.\n"
    "  -r, --rate BYTES    mean bytes between samples (default 512k; 1 = every allocation)\n"
    "  -o, --output FILE   the trace (default memlyze.PID.mlyze)\n"
    "  --unwind fp|dwarf   stack unwinder (default dwarf: also walks code built without\n"
    "                      frame pointers; fp is cheaper per sample)\n"
    "  --seed N            fixed sampling seed (reproducible runs)\n"
    "  --format ENC        split (default: split-stream zstd blocks, indexed), v1\n"
    "                      (the plain v1 format) or lz4 (v1 in LZ4 blocks, indexed)\n"
    "  -z, --compress      v1 in LZ4 blocks (same as --format lz4)\n"
    "  --follow-fork       profile forked children too (FILE.PID.mlyze each)\n"
    "  --got               patch GOT slots instead of interposing (the attach path)\n"
    "  --coverage          with --got: print what GOT patching cannot see (blind spots)\n",
};
