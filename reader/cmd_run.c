/*
 * cmd_run.c - memlyze run [options] -- CMD ARGS: run a program with the
 * profiler preloaded, then finalize its spool into a .mlyze trace.
 */
#include "cli.h"
#include "finalize.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
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

/* Does the program's executable define malloc itself (its own allocator,
 * or jemalloc & co linked in)? Then interposing from LD_PRELOAD sees none of
 * its allocations: the executable's malloc comes first in the lookup order.
 * The GOT path with inline hooks does. `prog` as execvp would find it. */
static int exe_defines_malloc(const char *prog)
{
    char path[PATH_MAX];
    if (strchr(prog, '/')) {
        snprintf(path, sizeof path, "%s", prog);
    } else {
        const char *p = getenv("PATH");
        int found = 0;
        while (p && *p && !found) {
            const char *e = strchr(p, ':');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            snprintf(path, sizeof path, "%.*s/%s", (int)n, p, prog);
            found = access(path, X_OK) == 0;
            p = e ? e + 1 : NULL;
        }
        if (!found) return 0;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC), yes = 0;
    if (fd < 0 || elf_version(EV_CURRENT) == EV_NONE) { if (fd >= 0) close(fd); return 0; }
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    Elf_Scn *scn = NULL;
    while (e && !yes && (scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize) continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        for (size_t i = 0; d && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym sym;
            if (!gelf_getsym(d, (int)i, &sym) || sym.st_shndx == SHN_UNDEF || GELF_ST_TYPE(sym.st_info) != STT_FUNC) continue;
            const char *name = elf_strptr(e, sh.sh_link, sym.st_name);
            if (name && !strcmp(name, "malloc")) { yes = 1; break; }
        }
    }
    if (e) elf_end(e);
    close(fd);
    return yes;
}

static int run(int argc, char **argv)
{
    const char *out = NULL, *rate = NULL, *unwind = NULL, *seed = NULL;
    int compress = 0, follow = 0, got = 0, coverage = 0, c;
    static const struct option opts[] = {
        { "rate", required_argument, 0, 'r' }, { "output", required_argument, 0, 'o' },
        { "unwind", required_argument, 0, 'u' }, { "seed", required_argument, 0, 's' },
        { "compress", no_argument, 0, 'z' }, { "follow-fork", no_argument, 0, 'F' },
        { "got", no_argument, 0, 'G' }, { "coverage", no_argument, 0, 'C' }, { 0, 0, 0, 0 } };
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
        case 'F': follow = 1; break;
        case 'G': got = 1; break;
        case 'C': coverage = got = 1; break;
        default: return cli_usage_error(&cmd_run, "bad option");
        }
    }
    if (optind >= argc) return cli_usage_error(&cmd_run, "no command to run");
    if (!got && exe_defines_malloc(argv[optind])) {
        fprintf(stderr, "memlyze run: %s defines malloc itself: using GOT patching with inline hooks (--got)\n", argv[optind]);
        got = 1;
    }
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
        if (mlz_finalize(path, target, "trace", compress, 0, err, sizeof err)) {
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
    "usage: memlyze run [-r BYTES] [-o FILE] [--unwind fp|dwarf] [-z] [--follow-fork] [--got] [--coverage] -- CMD [ARGS]\n"
    "\n"
    "Runs CMD with the memlyze sampler preloaded (LD_PRELOAD) and, when it\n"
    "exits, writes its symbolized trace. Exits with CMD's status.\n"
    "  -r, --rate BYTES    mean bytes between samples (default 512k; 1 = every allocation)\n"
    "  -o, --output FILE   the trace (default memlyze.PID.mlyze)\n"
    "  --unwind fp|dwarf   stack unwinder (default dwarf: also walks code built without\n"
    "                      frame pointers; fp is cheaper per sample)\n"
    "  --seed N            fixed sampling seed (reproducible runs)\n"
    "  -z, --compress      LZ4-compressed trace with an index\n"
    "  --follow-fork       profile forked children too (FILE.PID.mlyze each)\n"
    "  --got               patch GOT slots instead of interposing (the attach path), and\n"
    "                      inline-hook allocators defined in the executable or called\n"
    "                      directly (MEMLYZE_INLINE=0: no inline hooks). Chosen by itself\n"
    "                      when the executable defines malloc\n"
    "  --coverage          with --got: print what GOT patching cannot see (blind spots)\n"
    "                      and each inline hook, or why a function was refused\n",
};
