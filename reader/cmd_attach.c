/*
 * cmd_attach.c - `memlyze attach` and `memlyze detach`: the same programs
 * as memlyze-attach and memlyze-detach, which live next to this binary.
 */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

static int exec_sibling(const char *cmd, const char *prog, int argc, char **argv)
{
    char exe[PATH_MAX], path[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return cli_error(cmd, "cannot find my own binary: %s", strerror(errno));
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(path, sizeof path, "%s/%s", exe, prog);
    (void)argc;
    argv[0] = (char *)prog;
    execv(path, argv);
    return cli_error(cmd, "cannot run %s: %s", path, strerror(errno));
}

static int run_attach(int argc, char **argv) { return exec_sibling("attach", "memlyze-attach", argc, argv); }
static int run_detach(int argc, char **argv) { return exec_sibling("detach", "memlyze-detach", argc, argv); }

const mlz_command cmd_attach = {
    "attach", run_attach, "start profiling a running process (memlyze-attach)",
    "usage: memlyze attach [-r BYTES] [-o FILE] [--unwind fp|dwarf] [-v|-q] PID\n"
    "\n"
    "Same as memlyze-attach: see memlyze-attach --help.\n",
};

const mlz_command cmd_detach = {
    "detach", run_detach, "stop profiling and write the trace (memlyze-detach)",
    "usage: memlyze detach [-o FILE] PID\n"
    "\n"
    "Same as memlyze-detach: see memlyze-detach --help.\n",
};
