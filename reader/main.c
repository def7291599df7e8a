/*
 * main.c - the memlyze command: a table of subcommands, git style.
 * Each subcommand lives in cmd_NAME.c and answers --help.
 */
#include "cli.h"
#include "tmp_guard.h"

#include <string.h>

static const mlz_command *const commands[] = {
    &cmd_attach, &cmd_detach, &cmd_run, &cmd_snapshot, &cmd_finalize, &cmd_top, &cmd_tree, &cmd_diff, &cmd_leaks, &cmd_temporary, &cmd_stats, &cmd_validate, &cmd_dump, &cmd_undump, &cmd_convert,
    &cmd_export, &cmd_flamegraph, &cmd_timeline,
    &cmd_watch, &cmd_serve,
    &cmd_import, &cmd_replay,
    &cmd_heapdump, &cmd_leakcheck, &cmd_retainers,
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: memlyze COMMAND [ARGS]\n\n"
                 "memlyze reads .mlyze heap profiles. Commands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(out, "\nmemlyze COMMAND --help shows a command's options.\n");
}

int main(int argc, char **argv)
{
    /* Installed as memlyze-snapshot too (a link): argv[0] names the command. */
    mlz_tmp_guard_signals();
    const char *self = strrchr(argv[0], '/');
    self = self ? self + 1 : argv[0];
    if (!strncmp(self, "memlyze-", 8))
        for (size_t i = 0; i < NCOMMANDS; i++)
            if (!strcmp(commands[i]->name, self + 8)) {
                if (cli_wants_help(commands[i], argc, argv)) return 0;
                return commands[i]->run(argc, argv);
            }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        if (argc > 2 && !strcmp(argv[2], "--commands")) {   /* hidden: the table, for tests */
            for (size_t i = 0; i < NCOMMANDS; i++) printf("%s\n", commands[i]->name);
            return 0;
        }
        if (argc > 2) {
            for (size_t i = 0; i < NCOMMANDS; i++)
                if (!strcmp(commands[i]->name, argv[2])) {
                    printf("%s", commands[i]->usage);
                    return 0;
                }
            return cli_error("help", "no such command '%s'", argv[2]) + 1;
        }
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(commands[i]->name, name)) {
            if (cli_wants_help(commands[i], argc - 1, argv + 1)) return 0;
            return commands[i]->run(argc - 1, argv + 1);
        }
    fprintf(stderr, "memlyze: '%s' is not a memlyze command (see memlyze --help)\n", name);
    return 2;
}
