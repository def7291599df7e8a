/*
 * cmd_run.c - memlyze run [options] -- CMD ARGS: run a program with the
 * profiler preloaded, then finalize its spool into a .mlyze trace.
 */
#include "cli.h"
#include "finalize.h"
#include "loss.h"
#include "proc.h"
#include "gotpatch.h"
#include "info.h"
#include "size_text.h"
#include "tmp_guard.h"

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
#include <sys/resource.h>
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

/* One spool file in the run's directory: "spool[.CHILD][.execN]", sealed,
 * or with ".WRITER.tmp" behind it when its writer never sealed it (exec, or
 * the program died). */
typedef struct seg_file {
    char *path;
    long child;               /* 0: the process memlyze run started */
    unsigned long seq;        /* exec number: 0 for the first image */
    int keep;                 /* its trace could not be written: left in place */
    unsigned long long ticks; /* process start time: tells a reused pid apart */
    int sealed;
} seg_file;

static int parse_seg(const char *dir, const char *name, seg_file *sf)
{
    if (strncmp(name, "spool", 5)) return -1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", name + 5);
    size_t nl = strlen(buf);
    sf->sealed = !(nl > 4 && !strcmp(buf + nl - 4, ".tmp"));
    if (!sf->sealed) {
        buf[nl - 4] = 0;
        char *dot = strrchr(buf, '.');
        if (!dot) return -1;
        *dot = 0;
    }
    char *p = buf, *end;
    sf->child = 0;
    sf->seq = 0;
    if (p[0] == '.' && p[1] >= '0' && p[1] <= '9') { sf->child = strtol(p + 1, &end, 10); p = end; }
    if (!strncmp(p, ".exec", 5)) { sf->seq = strtoul(p + 5, &end, 10); p = end; }
    if (*p) return -1;
    if (asprintf(&sf->path, "%s/%s", dir, name) < 0) return -1;
    sf->ticks = 0;
    sf->keep = 0;
    mlz_error e;
    mlz_reader *r = mlz_reader_open(sf->path, MLZ_READ_TRUNCATED_OK, &e);
    if (r) {
        json_t *t = json_object_get(mlz_reader_meta(r)->root, "start_ticks");
        if (json_is_integer(t)) sf->ticks = (unsigned long long)json_integer_value(t);
        mlz_reader_close(r);
    }
    return 0;
}

static int seg_cmp(const void *a, const void *b)
{
    const seg_file *x = a, *y = b;
    if (x->child != y->child) return x->child < y->child ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The program's name from a spool's metadata (its exe's base name), and its pid. */
static void prog_of(const char *spool, char *out, size_t len, long *pid)
{
    mlz_error e;
    snprintf(out, len, "child");
    if (pid) *pid = 0;
    mlz_reader *r = mlz_reader_open(spool, MLZ_READ_TRUNCATED_OK, &e);
    if (!r) return;
    const char *exe = json_string_value(json_object_get(mlz_reader_meta(r)->root, "exe"));
    if (exe && *exe) {
        const char *b = strrchr(exe, '/');
        snprintf(out, len, "%s", b ? b + 1 : exe);
    }
    json_t *p = json_object_get(mlz_reader_meta(r)->root, "pid");
    if (pid && json_is_integer(p)) *pid = (long)json_integer_value(p);
    mlz_reader_close(r);
}

/* Finalizes one process's segments [0, n) into target and prints its line. */
static int write_one(seg_file *segs, size_t n, const char *target, int encoding, int coverage)
{
    const char *paths[n];
    for (size_t i = 0; i < n; i++) paths[i] = segs[i].path;
    char err[512], prog[256];
    mlz_fin_summary sum;
    long pid;
    prog_of(paths[n - 1], prog, sizeof prog, &pid);
    if (mlz_finalize_segments(paths, n, target, "trace", encoding, 0, 0, &sum, err, sizeof err)) {
        cli_error("run", "%s", err);
        return -1;
    }
    /* Unsealed and no exec away: the spool could not grow, or the program
     * died. */
    char why[PATH_MAX + 64];
    if (!segs[n - 1].sealed && !sum.unprofiled_exec) {
        if (mlz_proc_spool_cut(0, paths[n - 1], why, sizeof why))
            fprintf(stderr, "memlyze run: the profile stops early: %s; keeping what it wrote\n", why);
        else
            fprintf(stderr, "memlyze run: %s ended before its profile was sealed; keeping what it wrote\n",
                    segs[n - 1].child ? "a child" : "the program");
    }
    if (coverage) print_coverage(target);
    fprintf(stderr, "memlyze run: wrote %s: %s (pid %ld), %llu allocations recorded (%llu bytes), %llu live at the end (%llu bytes)",
            target, prog, pid, (unsigned long long)sum.allocs, (unsigned long long)sum.alloc_bytes,
            (unsigned long long)sum.live, (unsigned long long)sum.live_bytes);
    if (sum.images > 1) fprintf(stderr, ", %zu exec%s followed", sum.images - 1, sum.images > 2 ? "s" : "");
    if (sum.unprofiled_exec) fprintf(stderr, ", then exec'd an image it cannot profile");
    fputc('\n', stderr);
    char loss[640];
    if (mlz_loss_of_file(target, loss, sizeof loss)) fprintf(stderr, "memlyze run: %s: %s\n", target, loss);
    return 0;
}

/* Every process's trace from the spools in dir: the root's into out, a
 * followed child's into OUT.PROG.PID.mlyze (OUT without its .mlyze).
 * Returns the number written, or -1 when one failed. */
static int write_traces(const char *dir, const char *out, int encoding, int coverage)
{
    seg_file *segs = NULL;
    size_t n = 0, cap = 0;
    int written = 0, failed = 0;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        seg_file sf;
        if (parse_seg(dir, de->d_name, &sf)) continue;
        if (n == cap) {
            seg_file *ns = realloc(segs, (cap = cap ? 2 * cap : 16) * sizeof *ns);
            if (!ns) { free(sf.path); failed = 1; break; }
            segs = ns;
        }
        segs[n++] = sf;
    }
    if (d) closedir(d);
    qsort(segs, n, sizeof *segs, seg_cmp);
    char base[PATH_MAX];
    snprintf(base, sizeof base, "%s", out);
    size_t bl = strlen(base);
    if (bl > 6 && !strcmp(base + bl - 6, ".mlyze")) base[bl - 6] = 0;
    for (size_t i = 0, j; i < n; i = j) {
        /* One process: same pid, and the same start time (a pid reused by a
         * later process starts a trace of its own). */
        for (j = i + 1; j < n && segs[j].child == segs[i].child &&
             (!segs[j].ticks || !segs[i].ticks || segs[j].ticks == segs[i].ticks); j++) {}
        char target[PATH_MAX + 300], prog[256];
        if (segs[i].child == 0 && i == 0) {
            snprintf(target, sizeof target, "%s", out);
        } else {
            prog_of(segs[j - 1].path, prog, sizeof prog, NULL);
            snprintf(target, sizeof target, "%s.%s.%ld%s.mlyze", base, prog, segs[i].child,
                     i > 0 && segs[i - 1].child == segs[i].child ? ".2" : "");
        }
        if (write_one(segs + i, j - i, target, encoding, coverage)) {
            /* Kept, and named: the recording is not lost with the trace. */
            failed = 1;
            fprintf(stderr, "memlyze run: its spool is kept: memlyze finalize -o %s", target);
            for (size_t k = i; k < j; k++) fprintf(stderr, " %s", segs[k].path);
            fputc('\n', stderr);
            for (size_t k = i; k < j; k++) segs[k].keep = 1;
        } else {
            written++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!segs[i].keep) unlink(segs[i].path);
        free(segs[i].path);
    }
    free(segs);
    return failed ? -1 : written;
}

/* Does the program's executable define malloc itself (its own allocator,
 * or jemalloc & co linked in)? Then interposing from LD_PRELOAD sees none of
 * its allocations: the executable's malloc comes first in the lookup order.
 * The GOT path with inline hooks does. `prog` as execvp would find it. */
/* The file execvp would run for prog; 0, or -1 when PATH has none. */
static int prog_path(const char *prog, char *path, size_t cap)
{
    if (strchr(prog, '/')) {
        snprintf(path, cap, "%s", prog);
        return 0;
    }
    for (const char *p = getenv("PATH"); p && *p;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(path, cap, "%.*s/%s", (int)n, p, prog);
        if (access(path, X_OK) == 0) return 0;
        p = e ? e + 1 : NULL;
    }
    return -1;
}

/* What an ELF file's .dynsym says: bit 0 it defines malloc, bit 1 it
 * calls a prefixed family's entry point (mi_malloc...). Its DT_NEEDED
 * names and run paths, if asked, into needed/runpath (NUL-separated). */
enum { DEFINES_MALLOC = 1, CALLS_FAMILY = 2 };
static int elf_allocs(const char *path, char *family, size_t fcap, char *needed, size_t ncap, char *runpath,
                      size_t rcap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC), found = 0;
    if (fd < 0 || elf_version(EV_CURRENT) == EV_NONE) { if (fd >= 0) close(fd); return 0; }
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    Elf_Scn *scn = NULL;
    size_t nl = 0;
    while (e && (scn = elf_nextscn(e, scn))) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || !sh.sh_entsize) continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        for (size_t i = 0; d && sh.sh_type == SHT_DYNAMIC && needed && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Dyn dyn;
            if (!gelf_getdyn(d, (int)i, &dyn)) continue;
            const char *v = dyn.d_tag == DT_NEEDED || dyn.d_tag == DT_RUNPATH || dyn.d_tag == DT_RPATH
                            ? elf_strptr(e, sh.sh_link, dyn.d_un.d_val) : NULL;
            char *to = dyn.d_tag == DT_NEEDED ? needed : runpath;
            size_t cap = dyn.d_tag == DT_NEEDED ? ncap : rcap, at = strlen(to);
            if (v && dyn.d_tag == DT_NEEDED) { at = nl; nl += strlen(v) + 1; }
            if (v && at + strlen(v) + 2 < cap) snprintf(to + at, cap - at, dyn.d_tag == DT_NEEDED ? "%s" : "%s:", v);
        }
        for (size_t i = 0; d && sh.sh_type == SHT_DYNSYM && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym sym;
            if (!gelf_getsym(d, (int)i, &sym)) continue;
            const char *name = elf_strptr(e, sh.sh_link, sym.st_name);
            if (!name) continue;
            if (sym.st_shndx != SHN_UNDEF && GELF_ST_TYPE(sym.st_info) == STT_FUNC && !strcmp(name, "malloc"))
                found |= DEFINES_MALLOC;
            for (const mlz_got_family_fn *f = mlz_got_family_fns; family && f->name && !(found & CALLS_FAMILY); f++)
                if (!strcmp(name, f->name)) {
                    snprintf(family, fcap, "%s", name);
                    found |= CALLS_FAMILY;
                }
        }
    }
    if (needed && nl < ncap) needed[nl] = 0;
    if (e) elf_end(e);
    close(fd);
    return found;
}

/* A library name about as the loader would find it: LD_LIBRARY_PATH, the
 * run paths ($ORIGIN the executable's directory), then the usual places
 * (not ld.so.cache: an allocator there is in one of them). */
static int find_lib(const char *name, const char *runpath, const char *exe, char *out, size_t cap)
{
    if (strchr(name, '/')) return snprintf(out, cap, "%s", name), access(out, R_OK);
    char origin[PATH_MAX], dirs[3 * PATH_MAX];
    snprintf(origin, sizeof origin, "%s", exe);
    char *slash = strrchr(origin, '/');
    if (slash) *slash = 0;
    else snprintf(origin, sizeof origin, ".");
    const char *llp = getenv("LD_LIBRARY_PATH");
    snprintf(dirs, sizeof dirs, "%s%s%s:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib64:/usr/lib64:/lib:/usr/lib:"
             "/usr/local/lib", llp ? llp : "", llp && *llp ? ":" : "", runpath ? runpath : "");
    for (const char *p = dirs; *p;) {
        const char *e = strchr(p, ':');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int k = n >= 7 && !strncmp(p, "$ORIGIN", 7) ? snprintf(out, cap, "%s%.*s/%s", origin, (int)(n - 7), p + 7, name)
                                                    : snprintf(out, cap, "%.*s/%s", (int)n, p, name);
        if (n && k > 0 && (size_t)k < cap && access(out, R_OK) == 0) return 0;
        if (!e) break;
        p = e + 1;
    }
    return -1;
}

/* Why the program needs GOT mode, or NULL: the executable defines malloc
 * itself (direct calls no interposer sees), or calls another allocator's
 * prefixed entry points (mi_malloc...), or a library it is started with
 * (LD_PRELOAD, or one it names) replaces malloc: those replace C++'s
 * operator new and delete as well, whose calls never reach malloc, and
 * only GOT mode hooks them. */
static const char *exe_needs_got(const char *prog, char *why, size_t cap)
{
    char path[PATH_MAX], family[128], needed[8192] = "", runpath[4096] = "", lib[PATH_MAX];
    if (prog_path(prog, path, sizeof path)) return NULL;
    int f = elf_allocs(path, family, sizeof family, needed, sizeof needed, runpath, sizeof runpath);
    if (f & DEFINES_MALLOC) return snprintf(why, cap, "defines malloc itself"), why;
    if (f & CALLS_FAMILY) return snprintf(why, cap, "calls %.64s, another allocator's entry point", family), why;
    /* LD_PRELOAD's entries (separated by ':' or spaces), then DT_NEEDED's */
    const char *pre = getenv("LD_PRELOAD");
    char list[8192 + 4096];
    size_t n = 0;
    for (const char *p = pre ? pre : ""; *p && n + 1 < sizeof list; p++) list[n++] = *p == ':' || *p == ' ' ? 0 : *p;
    list[n++] = 0;
    for (size_t i = 0; needed[i] && n + 1 < sizeof list; i += strlen(needed + i) + 1) {
        size_t l = strlen(needed + i);
        if (n + l + 1 >= sizeof list) break;
        memcpy(list + n, needed + i, l + 1);
        n += l + 1;
    }
    for (size_t i = 0; i < n; i += strlen(list + i) + 1) {
        if (!list[i] || mlz_proc_is_libc(list + i) || mlz_proc_is_ldso(list + i) ||
            find_lib(list + i, runpath, path, lib, sizeof lib))
            continue;
        if (elf_allocs(lib, NULL, 0, NULL, 0, NULL, 0) & DEFINES_MALLOC) {
            const char *b = strrchr(lib, '/');
            return snprintf(why, cap, "takes malloc and C++'s new from %.64s", b ? b + 1 : lib), why;
        }
    }
    return NULL;
}

#define MAX_HOOKS MEMLYZE_NAMED_HOOKS_MAX
static const char *const hook_kinds[] = MEMLYZE_HOOK_KINDS;

/* --hook SYMBOL=KIND appended to *spec as the payload reads it
 * ($MEMLYZE_HOOKS): "KIND:SYMBOL:exe+VALUE:SIZE" when the executable
 * defines it (its .symtab: static functions too), else "KIND:SYMBOL" for
 * the payload to find among the exported functions. */
static int add_hook(const char *arg, const char *prog, char *spec, size_t cap)
{
    const char *eq = strrchr(arg, '=');
    size_t k = 0, nk = sizeof hook_kinds / sizeof *hook_kinds;
    while (eq && k < nk && strcmp(eq + 1, hook_kinds[k])) k++;
    if (!eq || eq == arg || k == nk || strpbrk(arg, ":,"))
        return cli_usage_error(&cmd_run, "--hook takes SYMBOL=KIND, KIND one of " MEMLYZE_HOOK_KINDS_TEXT);
    if (eq - arg >= MEMLYZE_HOOK_NAME_MAX) return cli_usage_error(&cmd_run, "--hook: a SYMBOL of at most 255 characters");
    char sym[MEMLYZE_HOOK_NAME_MAX], path[PATH_MAX];
    snprintf(sym, sizeof sym, "%.*s", (int)(eq - arg), arg);
    uint64_t value = 0, size = 0;
    int fd = prog_path(prog, path, sizeof path) ? -1 : open(path, O_RDONLY | O_CLOEXEC), found = 0;
    if (fd >= 0) {
        int e = mlz_proc_elf_func(fd, sym, &value, &size);
        close(fd);
        if (e == MLZ_PROC_EAMBIG || e == MLZ_PROC_EENTRY)
            return cli_error("run", "--hook %s: %s in %s", sym, mlz_proc_error(), path);
        found = e == 0;
    }
    size_t n = strlen(spec);
    int w = found ? snprintf(spec + n, cap - n, "%s%s:%s:exe+%llx:%llx", n ? "," : "", eq + 1, sym,
                             (unsigned long long)value, (unsigned long long)size)
                  : snprintf(spec + n, cap - n, "%s%s:%s", n ? "," : "", eq + 1, sym);
    if (w < 0 || (size_t)w >= cap - n) return cli_usage_error(&cmd_run, "too many --hook");
    return 0;
}

/* SIGTERM and SIGHUP (timeout, a closing terminal, a service manager) are
 * the program's to handle: passed on, and we write what it recorded once it
 * has ended. SIGINT and SIGQUIT reach it from the terminal by themselves. */
static volatile sig_atomic_t child_pid;

static void pass_on(int sig)
{
    if (child_pid > 0) kill((pid_t)child_pid, sig);
}

/* Ends the way the program ended: its exit code, or its signal (no core of
 * ours), so that a shell or a supervisor sees the program's own status. */
static int end_like(int st)
{
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    int sig = WTERMSIG(st);
    struct rlimit none = { 0, 0 };
    setrlimit(RLIMIT_CORE, &none);
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
    raise(sig);
    return 128 + sig;            /* a signal that does not kill */
}

/* FILE must be new, in a directory we may write: checked before the program
 * runs, not after, when its whole recording would be lost. */
static int check_output(const char *out)
{
    if (access(out, F_OK) == 0)
        return cli_error("run", "%s exists: the trace would not replace it (choose another -o)", out);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", out);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else *(slash == dir ? slash + 1 : slash) = 0;
    struct stat st;
    const char *why = stat(dir, &st) ? strerror(errno) : !S_ISDIR(st.st_mode) ? "not a directory"
                      : access(dir, W_OK | X_OK) ? strerror(errno) : NULL;
    return why ? cli_error("run", "cannot write the trace into %s: %s", dir, why) : 0;
}

static int run(int argc, char **argv)
{
    const char *out = NULL, *unwind = NULL;
    char rate[24] = "", seed[24] = "", map_log2[8] = "";
    int encoding = MLZ_ENC_SPLIT, compress = 0, follow = 0, got = 0, coverage = 0, c, nhooks = 0;
    const char *hook_args[MAX_HOOKS];
    char hooks[MAX_HOOKS * 128] = "";
    static const struct option opts[] = {
        { "rate", required_argument, 0, 'r' }, { "output", required_argument, 0, 'o' },
        { "unwind", required_argument, 0, 'u' }, { "seed", required_argument, 0, 's' },
        { "compress", no_argument, 0, 'z' }, { "follow-fork", no_argument, 0, 'F' },
        { "got", no_argument, 0, 'G' }, { "coverage", no_argument, 0, 'C' },
        { "format", required_argument, 0, 'E' }, { "hook", required_argument, 0, 'H' },
        { "max-live", required_argument, 0, 'M' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "+r:o:z", opts, NULL)) != -1) {
        switch (c) {
        case 'r': {
            /* Passed on as bytes: the payload reads a plain number. */
            int64_t r = mlz_size_parse(optarg);
            if (r <= 0) return cli_usage_error(&cmd_run, "--rate needs a size in bytes");
            snprintf(rate, sizeof rate, "%lld", (long long)r);
            break;
        }
        case 'o': out = optarg; break;
        case 'u':
            if (strcmp(optarg, "fp") && strcmp(optarg, "dwarf")) return cli_usage_error(&cmd_run, "--unwind takes fp or dwarf");
            unwind = optarg;
            break;
        case 's': {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 10);
            /* 0 would mean "none" to the payload: a seed from entropy. */
            if (errno || end == optarg || *end || optarg[0] == '-' || v == 0)
                return cli_usage_error(&cmd_run, "--seed takes a positive integer");
            snprintf(seed, sizeof seed, "%llu", v);
            break;
        }
        case 'M': {
            int64_t n = mlz_size_parse(optarg);
            unsigned l = n > 0 ? memlyze_map_log2_for((unsigned long long)n) : 0;
            if (!l) return cli_usage_error(&cmd_run, "--max-live takes 1 to 128m");
            snprintf(map_log2, sizeof map_log2, "%u", l);
            break;
        }
        case 'z': compress = 1; break;
        case 'E':
            if ((encoding = mlz_encoding_parse(optarg)) < 0)
                return cli_usage_error(&cmd_run, "--format takes split, v1 or lz4");
            break;
        case 'F': follow = 1; break;
        case 'G': got = 1; break;
        case 'C': coverage = got = 1; break;
        case 'H':
            if (nhooks == MAX_HOOKS) return cli_usage_error(&cmd_run, "at most 16 --hook");
            hook_args[nhooks++] = optarg;
            got = 1;   /* named hooks are the GOT-mode payload's */
            break;
        default: return cli_usage_error(&cmd_run, "bad option");
        }
    }
    if (optind >= argc) return cli_usage_error(&cmd_run, "no command to run");
    if (out && check_output(out)) return 1;
    if (compress) encoding = MLZ_ENC_LZ4;
    for (int k = 0; k < nhooks; k++) {
        int e = add_hook(hook_args[k], argv[optind], hooks, sizeof hooks);
        if (e) return e;
    }
    char why[160];
    if (!got && exe_needs_got(argv[optind], why, sizeof why)) {
        fprintf(stderr, "memlyze run: %s %s: using GOT patching with inline hooks (--got)\n", argv[optind], why);
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
        /* This process, whatever it execs, writes OUT; its descendants are
         * followed (--follow-fork) into files of their own or not at all. */
        char me[24];
        snprintf(me, sizeof me, "%d", (int)getpid());
        setenv("MEMLYZE_ROOT_PID", me, 1);
        if (rate[0]) setenv("MEMLYZE_RATE", rate, 1);
        if (unwind) setenv("MEMLYZE_UNWIND", unwind, 1);
        if (seed[0]) setenv("MEMLYZE_SEED", seed, 1);
        if (map_log2[0]) setenv("MEMLYZE_MAP_LOG2", map_log2, 1);
        if (follow) setenv("MEMLYZE_FOLLOW_FORK", "1", 1);
        if (got) setenv("MEMLYZE_MODE", "got", 1);
        if (coverage) setenv("MEMLYZE_COVERAGE", "1", 1);
        if (hooks[0]) setenv("MEMLYZE_HOOKS", hooks, 1);
        execvp(argv[optind], argv + optind);
        fprintf(stderr, "memlyze run: cannot run %s: %s\n", argv[optind], strerror(errno));
        _exit(127);
    }
    /* The program gets the terminal's signals; we wait for it. */
    static const int sigs[] = { SIGINT, SIGQUIT, SIGTERM, SIGHUP };
    struct sigaction was[4];
    for (int i = 0; i < 4; i++) sigaction(sigs[i], NULL, &was[i]);
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    child_pid = pid;
    struct sigaction sa = { 0 };
    sa.sa_handler = pass_on;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    /* The program has ended: a signal now ends us (symbolizing a big trace
     * takes a while), leaving no half-written trace, and the recording in
     * dir for memlyze finalize. */
    char def[64];
    if (!out) { snprintf(def, sizeof def, "memlyze.%d.mlyze", (int)pid); out = def; }
    static char kept[2 * PATH_MAX + 200];
    snprintf(kept, sizeof kept, "memlyze run: interrupted while writing %s; the recording is kept in %s "
             "(memlyze finalize -o %s %s/spool, then its spool.execN, if any, in order)\n", out, dir, out, dir);
    mlz_tmp_guard_note(kept);
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &was[i], NULL);
    child_pid = 0;
    /* 127 and nothing written: the command could not be run at all. */
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127 && rmdir(dir) == 0) {
        mlz_tmp_guard_note(NULL);
        return 127;
    }
    int rc = write_traces(dir, out, encoding, coverage);
    mlz_tmp_guard_note(NULL);
    rmdir(dir);
    if (rc == 0)
        cli_error("run", "the program wrote no profile (statically linked, set-user-ID, or it could not load "
                  "the profiler)");
    if (rc < 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) return 1;   /* our failure, said above */
    return end_like(st);
}

const mlz_command cmd_run = {
    "run", run, "run a program under the profiler and write its trace",
    "usage: memlyze run [-r BYTES] [-o FILE] [--unwind fp|dwarf] [--format split|v1|lz4] [-z] [--max-live N] [--follow-fork] [--got] [--coverage] [--hook SYMBOL=KIND] -- CMD [ARGS]\n"
    "\n"
    "Runs CMD with the memlyze sampler preloaded (LD_PRELOAD) and, when it\n"
    "exits, writes its symbolized trace. Exits with CMD's status (or dies by its\n"
    "signal); SIGTERM and SIGHUP are passed on to CMD. An exec keeps\n"
    "the profile going (wrappers: sh -c 'exec ...', env, nice, timeout...): the\n"
    "trace marks it and ends what the old image held. Prints one line per file.\n"
    "  -r, --rate BYTES    mean bytes between samples (default 512k; 1 = every allocation)\n"
    "  -o, --output FILE   the trace, a new file (default memlyze.PID.mlyze)\n"
    "  --unwind fp|dwarf   stack unwinder (default dwarf: also walks code built without\n"
    "                      frame pointers; fp is cheaper per sample)\n"
    "  --seed N            fixed sampling seed (reproducible runs)\n"
    "  --max-live N        room for N live samples (with -r 1: objects) in the heap map\n"
    "                      (default 2^20 slots, 600k small objects at -r 1; 64 bytes a slot, touched as used)\n"
    "  --format ENC        split (default: split-stream zstd blocks, indexed), v1\n"
    "                      (the plain v1 format) or lz4 (v1 in LZ4 blocks, indexed)\n"
    "  -z, --compress      v1 in LZ4 blocks (same as --format lz4)\n"
    "  --follow-fork       profile children (fork, posix_spawn) too: FILE.PROG.PID.mlyze\n"
    "                      each, FILE without its .mlyze; without it they run unprofiled\n"
    "  --got               patch GOT slots instead of interposing (the attach path), and\n"
    "                      inline-hook allocators defined in the executable or called\n"
    "                      directly (MEMLYZE_INLINE=0: no inline hooks). Chosen by itself\n"
    "                      when the executable defines malloc\n"
    "  --coverage          with --got: print what GOT patching cannot see (blind spots)\n"
    "                      and each inline hook, or why a function was refused\n"
    "  --hook SYMBOL=KIND  also profile the function SYMBOL (a custom allocator, exported\n"
    "                      or not), of KIND malloc, free, calloc, realloc, memalign,\n"
    "                      aligned_alloc or posix_memalign (same arguments); implies\n"
    "                      --got; repeatable. What it takes from the allocator below\n"
    "                      it is not counted again\n",
};
