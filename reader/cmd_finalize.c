/*
 * cmd_finalize.c - memlyze finalize SPOOL -o FILE: symbolize a payload's
 * spool into a .mlyze trace.
 */
#include "cli.h"
#include "loss.h"
#include "finalize.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <unistd.h>

static int run(int argc, char **argv)
{
    const char *out = NULL;
    int encoding = MLZ_ENC_SPLIT, compress = 0, force = 0, c;
    pid_t pid = 0;
    static const struct option opts[] = {
        { "output", required_argument, 0, 'o' }, { "compress", no_argument, 0, 'z' },
        { "force", no_argument, 0, 'f' }, { "format", required_argument, 0, 'F' },
        { "pid", required_argument, 0, 'p' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "o:zf", opts, NULL)) != -1) {
        if (c == 'o') out = optarg;
        else if (c == 'z') compress = 1;
        else if (c == 'F') {
            if ((encoding = mlz_encoding_parse(optarg)) < 0)
                return cli_usage_error(&cmd_finalize, "--format takes v1, lz4 or split");
        }
        else if (c == 'f') force = 1;
        else if (c == 'p') {
            if (!(pid = cli_parse_pid(optarg))) return cli_usage_error(&cmd_finalize, "'%s' is not a process id", optarg);
        }
        else return cli_usage_error(&cmd_finalize, "bad option");
    }
    if (argc - optind < 1) return cli_usage_error(&cmd_finalize, "need a SPOOL");
    if (!out) return cli_usage_error(&cmd_finalize, "missing -o FILE");
    /* Said now, not after minutes of symbolizing (the write checks again). */
    if (!force && access(out, F_OK) == 0)
        return cli_error("finalize", "%s: %s (-f replaces it)", out, strerror(EEXIST));
    char err[512];
    if (compress) encoding = MLZ_ENC_LZ4;
    if (mlz_finalize_segments((const char *const *)argv + optind, (size_t)(argc - optind), out, "trace",
                              encoding, force, pid, NULL, err, sizeof err))
        return cli_error("finalize", "%s", err);
    char loss[640];
    if (mlz_loss_of_file(out, loss, sizeof loss)) fprintf(stderr, "memlyze: %s: %s\n", out, loss);
    return 0;
}

const mlz_command cmd_finalize = {
    "finalize", run, "symbolize a payload spool into a .mlyze trace",
    "usage: memlyze finalize [--format split|v1|lz4] [-z] [-f] [--pid PID] -o FILE SPOOL [SPOOL.exec1 ...]\n"
    "\n"
    "Reads the raw spool the profiler wrote inside a process (stacks as program\n"
    "counters, the module map) and writes FILE: a .mlyze trace whose stacks are\n"
    "resolved with libdw to functions (C++ demangled), files and lines, inlined\n"
    "calls expanded; frames without symbols read module+0xoffset. A spool cut\n"
    "short by a crash is used up to its last whole event. Several SPOOLs are the\n"
    "images of one process that exec'd (PATH, PATH.exec1, ...), stitched in order.\n"
    "  -o, --output FILE   the trace to write (never replaced unless -f)\n"
    "  --format ENC        split (default): split-stream zstd blocks (a .mlyze\n"
    "                      extension) and a .mlyze.idx index; v1: the plain v1\n"
    "                      format; lz4: v1 in LZ4 blocks with an index\n"
    "  -z, --compress      v1 in LZ4 blocks (same as --format lz4)\n"
    "  -f, --force         replace FILE if it exists\n"
    "  --pid PID           the spool's process, numbered as here (memlyze-detach\n"
    "                      passes it; default: the spool's own pid). While it\n"
    "                      runs, module paths are looked up in its file system\n"
    "                      (/proc/PID/root: a container's files) first\n",
};
