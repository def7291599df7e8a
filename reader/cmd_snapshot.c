/*
 * cmd_snapshot.c - memlyze snapshot [-o FILE] PID (also memlyze-snapshot):
 * write the live sampled heap of an attached process.
 */
#include "cli.h"
#include "snapshot.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int run(int argc, char **argv)
{
    const char *out = NULL;
    int compress = 0, quiet = 0, c;
    static const struct option opts[] = {
        { "output", required_argument, 0, 'o' }, { "compress", no_argument, 0, 'z' },
        { "quiet", no_argument, 0, 'q' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "o:zq", opts, NULL)) != -1) {
        if (c == 'o') out = optarg;
        else if (c == 'z') compress = 1;
        else if (c == 'q') quiet = 1;
        else return cli_usage_error(&cmd_snapshot, "bad option");
    }
    if (argc - optind != 1) return cli_usage_error(&cmd_snapshot, "need exactly one PID");
    long pid = cli_parse_pid(argv[optind]);
    if (!pid) return cli_usage_error(&cmd_snapshot, "'%s' is not a process id", argv[optind]);

    /* Never overwritten (the write refuses too): said before the process is
     * read, not after a second of work. */
    if (out && access(out, F_OK) == 0) return cli_error("snapshot", "%s: %s", out, strerror(EEXIST));

    char name[64], err[512];
    snapshot_stats st;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc;
    if (out) {
        rc = mlz_snapshot((pid_t)pid, out, compress, &st, err, sizeof err);
    } else {
        /* memlyze.PID.N.mlyze: the first N not taken; never overwrite. */
        mlz_live_heap h;
        rc = mlz_live_read((pid_t)pid, &h, 1, err, sizeof err) ? -1 : 0;
        if (!rc) {
            rc = mlz_live_write_new(&h, compress, name, sizeof name, err, sizeof err);
            st = h.st;
            mlz_live_free(&h);
        }
        out = name;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc) return cli_error("snapshot", "%s", err);
    if (!quiet)
        printf("%s: %zu live samples of process %ld in %.1f ms (%zu re-read while changing, %zu skipped)\n",
               out, st.live, pid, (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
               st.retried, st.skipped);
    return 0;
}

const mlz_command cmd_snapshot = {
    "snapshot", run, "write the live heap of an attached process",
    "usage: memlyze snapshot [-o FILE] [-z] [-q] PID\n"
    "\n"
    "Reads the sampled live heap of process PID, which memlyze is attached to,\n"
    "from outside (process_vm_readv): no code runs in the process and none of its\n"
    "threads is paused. Writes a symbolized .mlyze file of kind \"snapshot\".\n"
    "  -o, --output FILE   default memlyze.PID.N.mlyze, the first N not taken\n"
    "  -z, --compress      LZ4 blocks and an index\n"
    "  -q, --quiet         no summary line\n",
};
