/*
 * attach_main.c - memlyze-attach [options] PID: start profiling a running
 * process, no restart, no debugger.
 */
#include "injector.h"
#include "inline_sites.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define EALREADY_CODE (-114)           /* memlyze_attach: already attached */

static const char usage[] =
    "usage: memlyze-attach [-r BYTES] [-o FILE] [--unwind fp|dwarf] [-v|-q] PID\n"
    "\n"
    "Loads the memlyze profiler into the running process PID (ptrace, no gdb)\n"
    "and starts sampling its allocations; `memlyze-detach PID` stops it and\n"
    "writes the trace. The process is paused only while it is being set up.\n"
    "  -r, --rate BYTES      mean bytes between samples (default 512k; 1 = every allocation)\n"
    "  -o, --output FILE     the trace detach writes (default memlyze.PID.mlyze here)\n"
    "      --seed N          draw the samples from seed N (reproducible runs, tests)\n"
    "      --unwind fp|dwarf stack unwinder in the target (default dwarf: also walks code\n"
    "                        built without frame pointers)\n"
    "      --timeout MS      give up waiting for a safe point after MS (default 5000)\n"
    "      --payload FILE    the library to load (default: next to this program)\n"
    "      --allow-seccomp   try even if the target runs under a seccomp filter\n"
    "      --hold MS         keep the other threads stopped at most MS while loading (default 15)\n"
    "      --thread TID      borrow this thread only (tests, debugging)\n"
    "  -v, --verbose         say what is done; -q: print nothing on success\n"
    "  -h, --help            this text\n";

static int die_usage(const char *msg) { return mlz__cli_usage("memlyze-attach", usage, msg); }

static int parse_bytes(const char *s, unsigned long long *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    if (*end == 'k' || *end == 'K') { x <<= 10; end++; }
    else if (*end == 'm' || *end == 'M') { x <<= 20; end++; }
    if (*end || x == 0) return -1;
    *v = x;
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long long rate = 512 * 1024;
    const char *unwind = "dwarf", *bad;
    char payload[PATH_MAX] = "";
    mlz_cli o = { NULL, 5000, 15, 0, 0 };
    int flags = 0, c;
    unsigned long long seed = 0;
    enum { O_UNWIND = MLZ_OPT_FIRST_OWN, O_PAYLOAD, O_SECCOMP, O_SEED };
    static const struct option opts[] = {
        { "rate", required_argument, 0, 'r' }, { "unwind", required_argument, 0, O_UNWIND },
        { "payload", required_argument, 0, O_PAYLOAD }, { "allow-seccomp", no_argument, 0, O_SECCOMP },
        { "seed", required_argument, 0, O_SEED }, MLZ_CLI_OPTIONS };
    while ((c = getopt_long(argc, argv, "r:o:vqh", opts, NULL)) != -1) {
        int k = mlz__cli_option(c, optarg, &o, &bad);
        if (k < 0) return die_usage(bad);
        if (k) continue;
        switch (c) {
        case 'r': if (parse_bytes(optarg, &rate)) return die_usage("bad --rate"); break;
        case O_UNWIND:
            if (strcmp(optarg, "fp") && strcmp(optarg, "dwarf")) return die_usage("--unwind is fp or dwarf");
            unwind = optarg;
            break;
        case O_PAYLOAD: snprintf(payload, sizeof payload, "%s", optarg); break;
        case O_SECCOMP: flags |= MLZ_PRE_ALLOW_SECCOMP; break;
        case O_SEED: if (parse_bytes(optarg, &seed)) return die_usage("bad --seed"); break;
        case 'h': fputs(usage, stdout); return 0;
        default: return die_usage("bad option");
        }
    }
    pid_t pid = mlz__cli_pid_arg(argc, argv, optind, &bad);
    if (pid <= 0) return die_usage(bad);
    const char *output = o.output;
    int quiet = o.quiet, timeout_ms = o.timeout_ms, hold_ms = o.hold_ms;
    pid_t want_tid = o.thread;

    mlz_target t;
    mlz_state st;
    mlz_session s;
    mlz_loaded l;
    int rc, ret = 0, in_session = 0;
    memset(&st, 0, sizeof st);
    memset(&l, 0, sizeof l);

    mlz__note("start");
    if ((rc = mlz__preflight(pid, flags, &t))) goto fail;
    if (!payload[0] && mlz__default_payload(payload, sizeof payload)) {
        mlz__err("cannot locate libmemlyze.so: use --payload");
        rc = MLZ_INJ_EIO;
        goto fail;
    }
    if (!t.payload_mapped && (rc = mlz__check_payload_file(payload))) goto fail;
    if (t.payload_active == 1) {
        /* Known from outside: nothing is stopped to say so. */
        mlz__err("process %d (%s) is already attached: run memlyze-detach %d first", (int)pid, t.comm, (int)pid);
        rc = MLZ_INJ_ESTATE;
        goto fail;
    }

    /* The output is named relative to where we were run, not the target. */
    char dflt[64];
    snprintf(dflt, sizeof dflt, "memlyze.%d.mlyze", (int)pid);
    if ((rc = mlz__abspath(output ? output : dflt, st.output, sizeof st.output))) goto fail;
    if (access(st.output, F_OK) == 0) {
        mlz__err("%s exists: detach would not replace it (choose another -o)", st.output);
        rc = MLZ_INJ_EREFUSE;
        goto fail;
    }
    if ((rc = mlz__state_prepare(pid, t.uid, &st))) goto fail;
    st.rate = rate;

    uint64_t t0 = mlz__now_us();
    if ((rc = mlz__session_begin(&s, pid, want_tid, timeout_ms, hold_ms))) { in_session = 1; goto fail; }
    in_session = 1;
    mlz__note("borrowing thread %d", (int)s.r.tid);

    if ((rc = mlz__remote_prepare(&s.r))) goto fail;
    mlz__note("scratch mapped at 0x%llx", (unsigned long long)s.r.scratch);
    if ((rc = mlz__load_payload(&s.r, payload, &l))) goto fail;
    mlz__note("payload %s (%s)", l.reused ? "already mapped: reused" : "loaded from a memfd", l.name[0] ? l.name : "-");

    /* Written before the start: a detach after we die must find the spool. */
    if ((rc = mlz__state_write(pid, &st))) goto fail;
    char config[8400];
    /* inline=remote: allocators the GOT never sees get trampolines; we
     * write their jumps below, every thread stopped (inline.c) */
    int cl = snprintf(config, sizeof config, "rate=%llu;spool=%s;unwind=%s;inline=remote", rate, st.spool, unwind);
    if (seed && cl > 0 && (size_t)cl < sizeof config) snprintf(config + cl, sizeof config - (size_t)cl, ";seed=%llu", seed);
    rc = mlz__call_entry(&s.r, l.fn_attach, config, &ret, timeout_ms * 4);
    if (rc) goto fail;
    if (ret < 0) {
        char msg[256];
        mlz__payload_strerror(&s.r, &l, ret, msg, sizeof msg);
        if (ret == EALREADY_CODE) mlz__err("process %d (%s) is already attached: run memlyze-detach %d first",
                                           (int)pid, t.comm, (int)pid);
        else mlz__err("the payload could not start in %d: %s", (int)pid, msg);
        rc = MLZ_INJ_ESTATE;
        goto fail;
    }
    mlz__note("memlyze_attach returned %d", ret);
    int modules, slots;
    mlz__payload_stats(&s.r, &l, &modules, &slots);
    struct memlyze_inline_site sites[MEMLYZE_INLINE_SITES_MAX];
    char site_names[MEMLYZE_INLINE_SITES_MAX][32];
    int nsites = mlz__inline_fetch(&s.r, &l, sites, MEMLYZE_INLINE_SITES_MAX, site_names);
    mlz__note("inline hooks prepared by the payload: %d%s", nsites < 0 ? 0 : nsites,
              nsites < 0 ? " (could not be read)" : "");
    if (nsites < 0) nsites = 0;
    if ((rc = mlz__state_commit(&st))) goto fail;
    rc = mlz__session_end(&s);
    in_session = 0;
    if (rc) {
        mlz__err("attached, but a thread of %d could not be restored", (int)pid);
        goto fail2;
    }
    int ninline = mlz__inline_write(pid, sites, nsites, timeout_ms, (const char (*)[32])site_names);
    if (ninline < nsites)
        fprintf(stderr, "memlyze-attach: warning: %d of %d inline hooks written (%s); those allocators' direct calls are not seen\n",
                ninline, nsites, mlz__errmsg()[0] ? mlz__errmsg() : "their code changed");
    else if (nsites && !quiet)
        printf("memlyze: %d inline hooks on allocators the GOT never sees\n", ninline);
    uint64_t total = mlz__now_us() - t0;
    if (!quiet)
        printf("memlyze: attached to %d (%s): %d modules, %d slots patched (payload %s), rate %llu B%s, "
               "output %s, target paused %.2f ms (thread %d lent %.2f ms, total %.2f ms)\n",
               (int)pid, t.comm, modules, slots, l.reused ? "reused" : "loaded", rate, rate == 1 ? " (exact)" : "", st.output,
               s.pause_all_us / 1000.0, (int)s.r.tid, s.lend_us / 1000.0, total / 1000.0);
    return 0;

fail:
    if (in_session) mlz__session_end(&s);
    if (st.dir_ours[0]) mlz__state_abort(&st);
fail2:
    fprintf(stderr, "memlyze-attach: %s\n", mlz__errmsg()[0] ? mlz__errmsg() : "failed");
    return 1;
}
