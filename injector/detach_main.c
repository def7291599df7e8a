/*
 * detach_main.c - memlyze-detach [-o FILE] PID: stop profiling, put every
 * patched pointer back, and write the trace (finalized outside the target).
 */
#include "injector.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage[] =
    "usage: memlyze-detach [-o FILE] [-v|-q] PID\n"
    "\n"
    "Stops the profiler memlyze-attach started in PID: no new samples, hooks in\n"
    "flight drained, every patched GOT slot restored, the profiler's memory freed\n"
    "(its code stays mapped as a pass-through for a later attach). Then the\n"
    "spool is symbolized into FILE with `memlyze finalize`, outside the target.\n"
    "For a PID that exited (or was killed) while attached, writes the trace it\n"
    "recorded up to its exit from the spool it left behind.\n"
    "  -o, --output FILE  the trace (default: what memlyze-attach -o named)\n"
    "      --timeout MS   give up waiting for a safe point after MS (default 5000)\n"
    "      --no-finalize  keep the raw spool, do not write FILE\n"
    "      --hold MS      keep the other threads stopped at most MS while loading\n"
    "                     (default 15; until done where glibc's lock layout is unknown)\n"
    "      --thread TID   borrow this thread only (tests, debugging)\n"
    "  -v, --verbose      say what is done; -q: print nothing on success\n"
    "  -h, --help         this text\n";

static int die_usage(const char *msg) { return mlz__cli_usage("memlyze-detach", usage, msg); }

/* The payload is gone (the process exec'd or exited) but its spool is
 * left: finalize it into the record's output (or -o), for uid, and drop
 * the record. result says where the trace went, or why there is none. */
static int keep_spool_left(pid_t pid, mlz_state *st, const char *output, int finalize, uid_t uid,
                           char *result, size_t cap)
{
    char left[4300];
    int rc;
    snprintf(result, cap, "the payload left no spool");
    if (output && (rc = mlz__abspath(output, st->output, sizeof st->output))) return rc;
    if (mlz__state_spool_left(pid, st, left, sizeof left) == 0) {
        snprintf(result, cap, "%s", left);
        if (finalize && access(st->output, F_OK) == 0) {
            mlz__err("%s exists: not replacing it (choose another -o)", st->output);
            return MLZ_INJ_EREFUSE;
        }
        if (finalize) {
            if ((rc = mlz__finalize(left, st->output, pid))) return rc;
            if (geteuid() == 0 && uid != 0 && lchown(st->output, uid, (gid_t)-1)) {}
            unlink(left);
            snprintf(result, cap, "%s", st->output);
        }
    }
    mlz__state_remove(pid, st, 1);
    return 0;
}

/* PID is gone. If it exited while attached, its spool outlived it: write
 * the trace it recorded up to its exit, so nothing is lost or left in /tmp. */
static int detach_exited(pid_t pid, const char *output, int finalize, int quiet, int reused)
{
    mlz_state st;
    uid_t owner;
    char result[4300];
    if (mlz__state_read_exited(pid, &st, &owner)) {
        mlz__err("no such process: %d", (int)pid);
        return 1;
    }
    int rc = keep_spool_left(pid, &st, output, finalize, owner, result, sizeof result);
    if (rc) return 1;
    if (!quiet)
        printf("memlyze: process %d%s exited while attached; trace up to its exit: %s\n", (int)pid,
               reused ? " (an earlier one: the pid is now another process's)" : "", result);
    return 0;
}

int main(int argc, char **argv)
{
    mlz_cli o = { NULL, 5000, 15, 0, 0 };
    int finalize = 1, c;
    const char *bad;
    enum { O_NOFIN = MLZ_OPT_FIRST_OWN };
    static const struct option opts[] = { { "no-finalize", no_argument, 0, O_NOFIN }, MLZ_CLI_OPTIONS };
    while ((c = getopt_long(argc, argv, "o:vqh", opts, NULL)) != -1) {
        int k = mlz__cli_option(c, optarg, &o, &bad);
        if (k < 0) return die_usage(bad);
        if (k) continue;
        switch (c) {
        case O_NOFIN: finalize = 0; break;
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
    int rc, ret = 0, have_state;
    memset(&l, 0, sizeof l);

    /* Gone, or a zombie not yet reaped: its record and spool are all there is. */
    if ((kill(pid, 0) && errno == ESRCH) || mlz_proc_live_tid(pid) == 0) {
        rc = detach_exited(pid, output, finalize, quiet, 0);
        if (rc) goto fail;
        return 0;
    }
    /* The record is of an earlier process with this pid, which exited
     * while attached: its trace first (it was deleted, or left in /tmp). */
    if (mlz__state_stale(pid)) {
        if ((rc = detach_exited(pid, output, finalize, quiet, 1))) goto fail;
        if (mlz_proc_payload_find(mlz_proc_live_tid(pid), &(mlz_proc_module){ 0 }) != 0) return 0;
        output = NULL;       /* -o named the earlier one's trace */
    }
    if ((rc = mlz__preflight(pid, MLZ_PRE_ALLOW_SECCOMP, &t))) {
        /* It was dying (killed as we came): detach what it left. */
        if (rc == MLZ_INJ_ESRCH && ((kill(pid, 0) && errno == ESRCH) || mlz_proc_live_tid(pid) == 0)) {
            mlz__err_clear();
            if ((rc = detach_exited(pid, output, finalize, quiet, 0))) goto fail;
            return 0;
        }
        goto fail;
    }
    if (!t.payload_mapped && mlz__state_read(pid, &st) == 0) {
        /* Attached, yet no payload: the process exec'd (a detached payload
         * stays mapped). Keep what the old image wrote, as a valid trace. */
        char result[4300];
        if ((rc = keep_spool_left(pid, &st, output, finalize, t.uid, result, sizeof result))) goto fail;
        fprintf(stderr, "memlyze-detach: process %d (now %s) has exec'd since memlyze-attach: the payload went "
                "with its old image, nothing is left to detach; trace up to the exec: %s\n", (int)pid, t.comm, result);
        return 0;
    }
    if (!t.payload_mapped) {
        mlz__err("process %d (%s) is not attached: no memlyze payload is loaded in it", (int)pid, t.comm);
        rc = MLZ_INJ_ESTATE;
        goto fail;
    }
    if (t.payload_active == 0) {
        /* Detached already, or an attach was cut off (its injector killed)
         * before the payload started: nothing to undo; a record it left
         * goes (a spool, if any, stays). */
        mlz_state old;
        if (mlz__state_read(pid, &old) == 0) mlz__state_remove(pid, &old, 1);
        mlz__err_clear();
        mlz__err("process %d (%s) is not attached: its memlyze payload is loaded but inactive (detached, or an "
                 "attach that was interrupted before it started)", (int)pid, t.comm);
        rc = MLZ_INJ_ESTATE;
        goto fail;
    }
    if (t.stopped) {
        /* The payload's detach waits for its drain thread, which sits in the
         * group stop with the rest of the process. */
        mlz__err("process %d (%s) is stopped (SIGSTOP): continue it (kill -CONT %d) and detach again",
                 (int)pid, t.comm, (int)pid);
        rc = MLZ_INJ_EREFUSE;
        goto fail;
    }
    have_state = mlz__state_read(pid, &st) == 0;
    if (output && (rc = mlz__abspath(output, st.output, sizeof st.output))) goto fail;
    if (finalize && have_state && access(st.output, F_OK) == 0) {
        mlz__err("%s exists: not replacing it (choose another -o)", st.output);
        rc = MLZ_INJ_EREFUSE;
        goto fail;
    }

    uint64_t t0 = mlz__now_us();
    if ((rc = mlz__session_begin(&s, &t, want_tid, timeout_ms, hold_ms))) { mlz__session_end(&s); goto fail; }
    if ((rc = mlz__find_loaded(&s.r, &l)) ||
        (rc = mlz__call_entry(&s.r, l.fn_detach, NULL, &ret, timeout_ms * 4))) {
        mlz__session_end(&s);
        goto fail;
    }
    char msg[256] = "";
    if (ret < 0) mlz__payload_strerror(&s.r, &l, ret, msg, sizeof msg);
    if ((rc = mlz__session_end(&s))) { mlz__err("detached, but a thread of %d could not be restored", (int)pid); goto fail; }
    /* -EPERM: the payload stopped and sealed its spool, but some GOT slots
     * still point at its hooks (which only forward now): the trace is
     * written all the same, and the command fails saying so. */
    int slots_left = ret == -EPERM;
    if (ret < 0 && !slots_left) {
        mlz__err("the payload in %d did not detach: %s", (int)pid, msg);
        rc = MLZ_INJ_ESTATE;
        goto fail;
    }
    uint64_t total = mlz__now_us() - t0;

    const char *result = "no spool recorded for this process (attached by its parent before a fork?)";
    char left[sizeof st.spool_ours + 32];
    int unsealed = 0;
    char short_why[PATH_MAX + 160] = "a write to it failed";
    if (have_state && finalize) {
        /* A spool the payload could not seal (a write failed: a full disk,
         * the process's file-size limit) is kept unsealed: readable up to
         * its last whole event. */
        int found = mlz__state_spool_left(pid, &st, left, sizeof left) == 0;
        unsealed = found && strcmp(left, st.spool_ours) != 0;
        if (!found) {
            result = "the payload wrote no spool";
            mlz__state_remove(pid, &st, 1);
        } else if ((rc = mlz__finalize(left, st.output, pid))) {
            goto fail;
        } else {
            if (unsealed) {
                mlz_proc_spool_cut(pid, left, short_why, sizeof short_why);   /* while it is there */
                unlink(left);
            }
            /* The trace belongs to the target's user, like the spool did. */
            if (geteuid() == 0 && t.uid != 0 && lchown(st.output, t.uid, (gid_t)-1)) {}
            result = st.output;
            mlz__state_remove(pid, &st, 0);
        }
    } else if (have_state) {
        result = st.spool_ours;
        mlz__state_remove(pid, &st, 1);
    }
    if (!quiet)
        printf("memlyze: detached from %d (%s): memlyze_detach returned %d, target paused %.2f ms "
               "(thread %d lent %.2f ms, total %.2f ms); trace: %s\n",
               (int)pid, t.comm, ret, s.pause_all_us / 1000.0, (int)s.r.tid, s.lend_us / 1000.0,
               total / 1000.0, result);
    if (unsealed) {
        fprintf(stderr, "memlyze-detach: the payload could not finish writing its spool (%s): the trace holds "
                "what it wrote until then\n", short_why);
        return 1;
    }
    if (slots_left) {
        fprintf(stderr, "memlyze-detach: process %d stopped sampling, but %s; trace: %s\n", (int)pid, msg, result);
        return 1;
    }
    return 0;

fail:
    fprintf(stderr, "memlyze-detach: %s\n", mlz__errmsg()[0] ? mlz__errmsg() : "failed");
    return 1;
}
