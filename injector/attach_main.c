/*
 * attach_main.c - memlyze-attach [options] PID: start profiling a running
 * process, no restart, no debugger.
 */
#include "injector.h"
#include "info.h"
#include "inline_sites.h"
#include "size_text.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define EALREADY_CODE (-114)           /* memlyze_attach: already attached */

static const char usage[] =
    "usage: memlyze-attach [-r BYTES] [-o FILE] [--unwind fp|dwarf] [--hook SYMBOL=KIND] [-v|-q] PID\n"
    "\n"
    "Loads the memlyze profiler into the running process PID (ptrace, no gdb)\n"
    "and starts sampling its allocations; `memlyze-detach PID` stops it and\n"
    "writes the trace. The process is paused only while it is being set up.\n"
    "  -r, --rate BYTES      mean bytes between samples (default 512k; 1 = every allocation)\n"
    "  -o, --output FILE     the trace detach writes (default memlyze.PID.mlyze here)\n"
    "      --seed N          draw the samples from seed N (reproducible runs, tests)\n"
    "      --max-live N      room for N live samples (with -r 1: objects) in the heap map\n"
    "                        (default 2^20 slots, 600k small objects at -r 1; 64 bytes a slot, touched as used)\n"
    "      --unwind fp|dwarf stack unwinder in the target (default dwarf: also walks code\n"
    "                        built without frame pointers)\n"
    "      --timeout MS      give up waiting for a safe point after MS (default 5000)\n"
    "      --payload FILE    the library to load (default: next to this program)\n"
    "      --hook SYMBOL=KIND  also profile the function SYMBOL (any module, exported or\n"
    "                        not), an allocator of KIND: malloc, free, calloc, realloc,\n"
    "                        memalign, aligned_alloc or posix_memalign (same arguments);\n"
    "                        an inline hook on its entry; repeatable\n"
    "      --allow-seccomp   try even if the target runs under a seccomp filter\n"
    "      --hold MS         keep the other threads stopped at most MS while loading\n"
    "                        (default 15; until done where glibc's lock layout is unknown)\n"
    "      --thread TID      borrow this thread only (tests, debugging)\n"
    "  -v, --verbose         say what is done; -q: print nothing on success\n"
    "  -h, --help            this text\n";

static int die_usage(const char *msg) { return mlz__cli_usage("memlyze-attach", usage, msg); }

/* A positive size, read as memlyze run reads its --rate (512k, 1m, 1g). */
static int parse_bytes(const char *s, unsigned long long *v)
{
    int64_t x = mlz_size_parse(s);
    if (x <= 0) return -1;
    *v = (unsigned long long)x;
    return 0;
}

#define MAX_HOOKS MEMLYZE_NAMED_HOOKS_MAX

/* --hook SYMBOL=KIND, and where the symbol was found. */
typedef struct hook_arg {
    const char *symbol, *kind;
    uint64_t addr, size;
} hook_arg;

static const char *const hook_kinds[] = MEMLYZE_HOOK_KINDS;

static int parse_hook(char *arg, hook_arg *h)
{
    char *eq = strrchr(arg, '=');
    if (!eq || eq == arg) return -1;
    *eq = 0;
    h->symbol = arg;
    h->kind = eq + 1;
    for (size_t i = 0; i < sizeof hook_kinds / sizeof *hook_kinds; i++)
        if (!strcmp(h->kind, hook_kinds[i])) return strlen(h->symbol) < MEMLYZE_HOOK_NAME_MAX ? 0 : -2;
    return -1;
}

/* Finds each --hook symbol among the target's modules (not ours): exactly
 * one definition, or a one-line refusal. */
static int resolve_hooks(pid_t pid, hook_arg *h, int n)
{
    mlz_proc_module *mods;
    size_t nmods;
    if (n == 0) return 0;
    if (mlz_proc_modules(pid, &mods, &nmods)) {
        mlz__err("cannot read the modules of %d: %s", (int)pid, mlz_proc_error());
        return MLZ_INJ_EIO;
    }
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        const char *where = NULL;
        for (size_t i = 0; i < nmods && !rc; i++) {
            mlz_proc_sym s;
            if (mods[i].path[0] != '/' || mlz_proc_is_payload(mods[i].path)) continue;
            int e = mlz_proc_func(pid, &mods[i], h[k].symbol, &s);
            if (e == MLZ_PROC_EAMBIG || e == MLZ_PROC_EENTRY) {
                mlz__err("--hook %s: %s", h[k].symbol, mlz_proc_error());
                rc = MLZ_INJ_EREFUSE;
            } else if (e == 0 && where && s.addr != h[k].addr) {
                mlz__err("--hook %s: defined in both %s and %s", h[k].symbol, where, mods[i].path);
                rc = MLZ_INJ_EREFUSE;
            } else if (e == 0) {
                where = mods[i].path;
                h[k].addr = s.addr;
                h[k].size = s.size;
            }
        }
        if (!rc && !where) {
            mlz__err("--hook %s: no function of that name in process %d", h[k].symbol, (int)pid);
            rc = MLZ_INJ_EREFUSE;
        }
        if (!rc) mlz__note("--hook %s: %s at 0x%llx (%llu bytes) in %s", h[k].symbol, h[k].kind,
                           (unsigned long long)h[k].addr, (unsigned long long)h[k].size, where);
    }
    free(mods);
    return rc;
}

/* What the command line asked for. */
typedef struct attach_args {
    mlz_cli o;
    unsigned long long rate, seed;
    unsigned map_log2;               /* --max-live, or 0 */
    const char *unwind;
    char payload[PATH_MAX];
    int flags;                       /* MLZ_PRE_* for the preflight */
    pid_t pid;
    hook_arg hooks[MAX_HOOKS];
    int nhooks;
} attach_args;

/* What one attach found and did, for the summary line. */
typedef struct attach_run {
    mlz_target t;
    mlz_state st;
    mlz_session s;
    mlz_loaded l;
    int in_session, modules, slots, nsites, ninline;
    uint64_t inline_pause_us;        /* every thread held again to write the jumps */
    struct memlyze_inline_site sites[MEMLYZE_INLINE_SITES_MAX];
    char site_names[MEMLYZE_INLINE_SITES_MAX][32];
} attach_run;

/* 0 to go on, else the exit status (after --help or a usage error). */
static int parse_args(int argc, char **argv, attach_args *a, int *exit_code)
{
    const char *bad;
    int c;
    enum { O_UNWIND = MLZ_OPT_FIRST_OWN, O_PAYLOAD, O_SECCOMP, O_SEED, O_HOOK, O_MAX_LIVE };
    static const struct option opts[] = {
        { "rate", required_argument, 0, 'r' }, { "unwind", required_argument, 0, O_UNWIND },
        { "payload", required_argument, 0, O_PAYLOAD }, { "allow-seccomp", no_argument, 0, O_SECCOMP },
        { "seed", required_argument, 0, O_SEED }, { "hook", required_argument, 0, O_HOOK },
        { "max-live", required_argument, 0, O_MAX_LIVE }, MLZ_CLI_OPTIONS };
    *exit_code = 0;
    while ((c = getopt_long(argc, argv, "r:o:vqh", opts, NULL)) != -1) {
        int k = mlz__cli_option(c, optarg, &a->o, &bad);
        if (k < 0) return *exit_code = die_usage(bad), -1;
        if (k) continue;
        switch (c) {
        case 'r': if (parse_bytes(optarg, &a->rate)) return *exit_code = die_usage("bad --rate"), -1; break;
        case O_UNWIND:
            if (strcmp(optarg, "fp") && strcmp(optarg, "dwarf")) return *exit_code = die_usage("--unwind is fp or dwarf"), -1;
            a->unwind = optarg;
            break;
        case O_PAYLOAD: snprintf(a->payload, sizeof a->payload, "%s", optarg); break;
        case O_SECCOMP: a->flags |= MLZ_PRE_ALLOW_SECCOMP; break;
        case O_SEED: if (parse_bytes(optarg, &a->seed)) return *exit_code = die_usage("bad --seed"), -1; break;
        case O_MAX_LIVE: {
            unsigned long long n;
            if (parse_bytes(optarg, &n) || !(a->map_log2 = memlyze_map_log2_for(n)))
                return *exit_code = die_usage("--max-live takes 1 to 128m"), -1;
            break;
        }
        case O_HOOK:
            if (a->nhooks == MAX_HOOKS) return *exit_code = die_usage("at most 16 --hook"), -1;
            switch (parse_hook(optarg, &a->hooks[a->nhooks++])) {
            case 0: break;
            case -2: return *exit_code = die_usage("--hook: a SYMBOL of at most 255 characters"), -1;
            default: return *exit_code = die_usage("--hook takes SYMBOL=KIND, KIND one of " MEMLYZE_HOOK_KINDS_TEXT), -1;
            }
            break;
        case 'h': fputs(usage, stdout); return -1;
        default: return *exit_code = die_usage("bad option"), -1;
        }
    }
    a->pid = mlz__cli_pid_arg(argc, argv, optind, &bad);
    if (a->pid <= 0) return *exit_code = die_usage(bad), -1;
    return 0;
}

/* Everything that can be known without stopping the target: it exists and
 * can be traced, the payload file, not attached already, and an output
 * name that detach may create. Prepares the state directory. */
static int check_target(attach_args *a, attach_run *x)
{
    int rc;
    pid_t pid = a->pid;
    if ((rc = mlz__preflight(pid, a->flags, &x->t))) return rc;
    if (!a->payload[0] && mlz__default_payload(a->payload, sizeof a->payload)) {
        mlz__err("cannot locate libmemlyze.so: use --payload");
        return MLZ_INJ_EIO;
    }
    if (!x->t.payload_mapped && (rc = mlz__check_payload_file(a->payload))) return rc;
    if ((rc = resolve_hooks(pid, a->hooks, a->nhooks))) return rc;
    if (x->t.payload_active == 1) {
        /* Known from outside: nothing is stopped to say so. */
        mlz__err("process %d (%s) is already attached: run memlyze-detach %d first", (int)pid, x->t.comm, (int)pid);
        return MLZ_INJ_ESTATE;
    }
    if (mlz__state_stale(pid)) {
        mlz__err("the memlyze record for pid %d is of an earlier process that exited while attached: "
                 "memlyze-detach %d writes its trace first", (int)pid, (int)pid);
        return MLZ_INJ_ESTATE;
    }
    if (x->t.payload_active == 2) {
        mlz__err("process %d (%s) was forked by an attached process: it inherited the patched GOT slots but "
                 "records nothing; memlyze-detach %d puts them back, then memlyze-attach %d starts afresh",
                 (int)pid, x->t.comm, (int)pid, (int)pid);
        return MLZ_INJ_ESTATE;
    }
    /* The output is named relative to where we were run, not the target. */
    char dflt[64];
    snprintf(dflt, sizeof dflt, "memlyze.%d.mlyze", (int)pid);
    if ((rc = mlz__abspath(a->o.output ? a->o.output : dflt, x->st.output, sizeof x->st.output))) return rc;
    if (access(x->st.output, F_OK) == 0) {
        mlz__err("%s exists: detach would not replace it (choose another -o)", x->st.output);
        return MLZ_INJ_EREFUSE;
    }
    /* Checked now, not at detach: a trace that cannot be written then has
     * been recorded for nothing. */
    char dir[sizeof x->st.output];
    snprintf(dir, sizeof dir, "%s", x->st.output);
    char *slash = strrchr(dir, '/');
    if (slash) *(slash == dir ? slash + 1 : slash) = 0;
    struct stat dst;
    const char *why = stat(dir, &dst) ? strerror(errno) : !S_ISDIR(dst.st_mode) ? "not a directory"
                      : access(dir, W_OK | X_OK) ? strerror(errno) : NULL;
    if (why) {
        mlz__err("cannot write the trace into %s: %s", dir, why);
        return MLZ_INJ_EREFUSE;
    }
    if ((rc = mlz__state_prepare(pid, x->t.uid, &x->st))) return rc;
    x->st.rate = a->rate;
    return 0;
}

/* The payload's start inside the target, through a borrowed thread. */
static int start_payload(attach_args *a, attach_run *x)
{
    int rc, ret = 0;
    pid_t pid = a->pid;
    if ((rc = mlz__session_begin(&x->s, &x->t, a->o.thread, a->o.timeout_ms, a->o.hold_ms))) return x->in_session = 1, rc;
    x->in_session = 1;
    mlz__note("borrowing thread %d", (int)x->s.r.tid);
    if ((rc = mlz__load_payload(&x->s.r, a->payload, &x->l))) return rc;
    mlz__note("payload %s (%s)", x->l.reused ? "already mapped: reused" : "loaded from a memfd", x->l.name[0] ? x->l.name : "-");

    /* Written before the start: a detach after we die must find the spool. */
    if ((rc = mlz__state_write(pid, &x->st))) return rc;
    char config[8400];
    /* inline=remote: allocators the GOT never sees get trampolines; we
     * write their jumps afterwards, every thread stopped (inline.c) */
    int cl = snprintf(config, sizeof config, "rate=%llu;spool=%s;unwind=%s;inline=remote", a->rate, x->st.spool, a->unwind);
    /* The thread runs at nice -20 while lent: the drain thread the payload
     * creates takes its own nice back. */
    if (x->s.r.boosted && cl > 0 && (size_t)cl < sizeof config)
        cl += snprintf(config + cl, sizeof config - (size_t)cl, ";nice=%d", x->s.r.nice);
    if (a->seed && cl > 0 && (size_t)cl < sizeof config)
        cl += snprintf(config + cl, sizeof config - (size_t)cl, ";seed=%llu", a->seed);
    if (a->map_log2 && cl > 0 && (size_t)cl < sizeof config)
        cl += snprintf(config + cl, sizeof config - (size_t)cl, ";map_log2=%u", a->map_log2);
    for (int k = 0; k < a->nhooks && cl > 0 && (size_t)cl < sizeof config; k++)
        cl += snprintf(config + cl, sizeof config - (size_t)cl, ";hook=%s:%s:0x%llx:0x%llx", a->hooks[k].kind,
                       a->hooks[k].symbol, (unsigned long long)a->hooks[k].addr, (unsigned long long)a->hooks[k].size);
    if ((rc = mlz__call_entry(&x->s.r, x->l.fn_attach, config, &ret, a->o.timeout_ms * 4))) return rc;
    if (ret < 0) {
        char msg[256];
        mlz__payload_strerror(&x->s.r, &x->l, ret, msg, sizeof msg);
        if (ret == EALREADY_CODE) mlz__err("process %d (%s) is already attached: run memlyze-detach %d first",
                                           (int)pid, x->t.comm, (int)pid);
        else mlz__err("the payload could not start in %d: %s", (int)pid, msg);
        return MLZ_INJ_ESTATE;
    }
    mlz__note("memlyze_attach returned %d", ret);
    mlz__payload_stats(&x->s.r, &x->l, &x->modules, &x->slots);
    x->nsites = mlz__inline_fetch(&x->s.r, &x->l, x->sites, MEMLYZE_INLINE_SITES_MAX, x->site_names);
    mlz__note("inline hooks prepared by the payload: %d%s", x->nsites < 0 ? 0 : x->nsites,
              x->nsites < 0 ? " (could not be read)" : "");
    if (x->nsites < 0) x->nsites = 0;
    return mlz__state_commit(&x->st);
}

/* The jumps of the inline hooks the payload prepared, all threads stopped. */
static void write_inline_hooks(const attach_args *a, attach_run *x)
{
    int n = mlz__inline_write(a->pid, x->sites, x->nsites, a->o.timeout_ms, (const char (*)[32])x->site_names,
                              &x->inline_pause_us);
    x->ninline = n;
    if (n < x->nsites)
        fprintf(stderr, "memlyze-attach: warning: %d of %d inline hooks written (%s); those allocators' direct calls are not seen\n",
                n, x->nsites, mlz__errmsg()[0] ? mlz__errmsg() : "their code changed");
    else if (x->nsites && !a->o.quiet)
        printf("memlyze: %d inline hooks on allocators the GOT never sees\n", n);
}

int main(int argc, char **argv)
{
    static attach_args a = { .o = { NULL, 5000, 15, 0, 0 }, .rate = 512 * 1024, .unwind = "dwarf" };
    static attach_run x;
    int code, rc;
    if (parse_args(argc, argv, &a, &code)) return code;

    mlz__note("start");
    if ((rc = check_target(&a, &x))) goto fail;
    uint64_t t0 = mlz__now_us();
    if ((rc = start_payload(&a, &x))) goto fail;
    rc = mlz__session_end(&x.s);
    x.in_session = 0;
    if (rc) {
        mlz__err("attached, but a thread of %d could not be restored", (int)a.pid);
        goto report;
    }
    write_inline_hooks(&a, &x);
    uint64_t total = mlz__now_us() - t0;
    if (!a.o.quiet) {
        /* The pause counts both times every thread was held: loading, and
         * writing the inline hooks' jumps. */
        char inl[64] = "";
        if (x.ninline > 0) snprintf(inl, sizeof inl, ", inline hooks %.2f ms", x.inline_pause_us / 1000.0);
        printf("memlyze: attached to %d (%s): %d modules, %d slots patched (payload %s), rate %llu B%s, "
               "output %s, target paused %.2f ms (thread %d lent %.2f ms%s, total %.2f ms)\n",
               (int)a.pid, x.t.comm, x.modules, x.slots, x.l.reused ? "reused" : "loaded", a.rate,
               a.rate == 1 ? " (exact)" : "", x.st.output, (x.s.pause_all_us + x.inline_pause_us) / 1000.0,
               (int)x.s.r.tid, x.s.lend_us / 1000.0, inl, total / 1000.0);
    }
    return 0;

fail:
    if (x.in_session) mlz__session_end(&x.s);
    if (x.st.dir_ours[0]) mlz__state_abort(a.pid, &x.st);
report:
    fprintf(stderr, "memlyze-attach: %s\n", mlz__errmsg()[0] ? mlz__errmsg() : "failed");
    return 1;
}
