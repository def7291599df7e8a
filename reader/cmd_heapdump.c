/*
 * cmd_heapdump.c - memlyze heapdump PID -o FILE.arc: every live object of a
 * process profiled in exact mode, with the roots, as a .arc object graph and
 * a .mlyze snapshot beside it (heapdump.c).
 */
#include "cli.h"
#include "heapdump.h"

#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int run(int argc, char **argv)
{
    const char *out = NULL;
    int quiet = 0, flags = 0, c;
    static const struct option opts[] = {
        { "output", required_argument, 0, 'o' }, { "quiet", no_argument, 0, 'q' },
        { "short-pause", no_argument, 0, 's' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:qs", opts, NULL)) != -1) {
        if (c == 'o') out = optarg;
        else if (c == 'q') quiet = 1;
        else if (c == 's') flags |= HD_SHORT_PAUSE;
        else return cli_usage_error(&cmd_heapdump, "bad option");
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_heapdump, "need exactly one PID");
    if (!out) return cli_usage_error(&cmd_heapdump, "need -o FILE.arc");
    size_t l = strlen(out);
    if (l < 5 || strcmp(out + l - 4, ".arc")) return cli_usage_error(&cmd_heapdump, "the output's name must end in .arc");
    long pid = cli_parse_pid(argv[optind]);
    if (!pid) return cli_usage_error(&cmd_heapdump, "'%s' is not a process id", argv[optind]);
    char side[PATH_MAX], err[1024];
    if (hd_mlyze_name(out, side, sizeof side)) return cli_error("heapdump", "%s: name too long", out);
    hd_stats st;
    if (hd_dump((pid_t)pid, out, side, flags, &st, err, sizeof err)) return cli_error("heapdump", "%s", err);
    if (!quiet) {
        char b[32];
        printf("%s: %zu objects (%s) and %zu roots of process %ld (%zu threads); snapshot %s; dump id %016llx\n",
               out, st.objects, cli_bytes((double)st.bytes, b, sizeof b), st.roots, pid, st.threads, side,
               (unsigned long long)st.id);
        printf("target paused %.1f ms", (double)st.pause_us / 1e3);
        if (st.skipped) printf("; %zu heap map entries caught mid-update were left out", st.skipped);
        if (st.unreadable) printf("; %zu objects could not be read (dumped as zeros)", st.unreadable);
        printf("\n");
    }
    return 0;
}

const mlz_command cmd_heapdump = {
    "heapdump", run, "dump every live object and the roots as a .arc graph",
    "usage: memlyze heapdump -o FILE.arc [--short-pause] [-q] PID\n"
    "\n"
    "For a process profiled in exact mode (memlyze-attach -r 1 PID, or memlyze\n"
    "run -r 1): writes every live object's bytes and the roots (each module's\n"
    "writable data and bss, cut at its symbols; every thread's stack from its\n"
    "stack pointer up, its registers, its static TLS and the TLS blocks of\n"
    "dlopen'd libraries) as a .arc object stream\n"
    "(docs/FORMAT.md), and beside it FILE.mlyze, the snapshot that gives each\n"
    "object's address, allocation site, thread and birth time. Both carry the\n"
    "same dump id. In sampled mode there is no list of every object: refused.\n"
    "\n"
    "Consistency: every thread of the process is stopped (ptrace) from just\n"
    "before its registers are read until the last object's bytes are copied,\n"
    "so the dump is one moment of the program; the pause is printed (it is the\n"
    "time to copy the heap: bench/bench_heapdump.sh). With --short-pause threads run\n"
    "again once registers, stacks and globals are read, and the heap is read\n"
    "while it changes: an object linked or unlinked meanwhile may be missed,\n"
    "kept or (if its only pointer moved) reported as leaked. Objects\n"
    "allocated before memlyze was attached are not in the heap map, so they are\n"
    "not in the dump (use memlyze run -r 1 for a complete graph).\n"
    "  -o, --output FILE.arc   the dump (never replaces an existing file)\n"
    "  -s, --short-pause       stop the threads only while the roots are read\n"
    "  -q, --quiet             no summary lines\n",
};
