/*
 * cli.c - what memlyze-attach and memlyze-detach share on the command line:
 * the options both take, the PID argument, usage errors.
 */
#include "injector.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

int mlz__cli_usage(const char *prog, const char *usage, const char *msg)
{
    fprintf(stderr, "%s: %s\n%s", prog, msg, usage);
    return 2;
}

int mlz__cli_option(int c, const char *arg, mlz_cli *o, const char **bad)
{
    switch (c) {
    case 'o': o->output = arg; return 1;
    case MLZ_OPT_TIMEOUT:
        o->timeout_ms = atoi(arg);
        if (o->timeout_ms <= 0) { *bad = "bad --timeout"; return -1; }
        return 1;
    case MLZ_OPT_HOLD:
        o->hold_ms = atoi(arg);
        if (o->hold_ms < 0) { *bad = "bad --hold"; return -1; }
        return 1;
    case MLZ_OPT_THREAD: o->thread = atoi(arg); return 1;
    case 'v': mlz__verbose++; return 1;
    case 'q': o->quiet = 1; return 1;
    }
    return 0;
}

pid_t mlz__cli_pid_arg(int argc, char **argv, int optind, const char **bad)
{
    if (argc - optind != 1) { *bad = "need exactly one PID"; return -1; }
    pid_t pid = mlz__cli_pid(argv[optind]);
    if (pid <= 0) *bad = "PID must be a process id";
    return pid;
}

pid_t mlz__cli_pid(const char *arg)
{
    char *end;
    long lp = strtol(arg, &end, 10);
    if (*end || lp <= 0 || lp > INT_MAX) return -1;
    /* A busy target's threads compete with us for the CPU, before the
     * window too (best effort: needs CAP_SYS_NICE). */
    if (setpriority(PRIO_PROCESS, 0, -20)) {}
    return (pid_t)lp;
}
