/*
 * cli.h - what the memlyze subcommands share: the command table entry,
 * one-line errors, opening a file for reading, number formatting.
 */
#ifndef MLZ_CLI_H
#define MLZ_CLI_H

#include "report.h"

#include "mlz_format.h"

#include <stdio.h>
#include <sys/types.h>

typedef struct mlz_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    const char *usage;        /* printed by --help and after a usage error */
} mlz_command;

/* One line on stderr: "memlyze CMD: message". Returns exit status 1. */
int  cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Usage error: the message, then the command's usage line; returns 2. */
int  cli_usage_error(const mlz_command *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* True (after printing usage to stdout) when argv asks for help. */
int  cli_wants_help(const mlz_command *c, int argc, char **argv);
/* Opens FILE for reading; on failure prints "memlyze CMD: FILE: reason". */
mlz_reader *cli_open(const char *cmd, const char *path, unsigned flags);
/* Prints an error from the reader as one line naming file, rule and offset. */
void cli_print_format_error(const char *cmd, const char *path, const mlz_error *e);
/* A name from a trace made fit for a terminal: s with every control
 * character (a newline, an escape sequence's ESC) replaced by '?', in
 * place. JSON and HTML outputs escape names instead and keep them exact. */
char *cli_text(char *s);
/* Human-readable bytes: "1.5 MiB". */
const char *cli_bytes(double bytes, char *buf, size_t len);
/* A point in a recording: seconds since its start ("12.5") or an absolute
 * time in microseconds since the epoch (large numbers). 0 or -1. */
/* A process id written in decimal (1..2^31-1), or 0 for anything else. */
pid_t cli_parse_pid(const char *s);
/* A number in [0, max] (NaN and infinities refused): 0, or -1. */
int  cli_parse_number(const char *s, double max, double *out);
int  cli_parse_time(const char *s, uint64_t start_us, uint64_t *out);

extern const mlz_command cmd_validate, cmd_dump, cmd_undump, cmd_stats, cmd_top, cmd_finalize, cmd_run, cmd_snapshot, cmd_diff, cmd_tree, cmd_leaks, cmd_temporary, cmd_attach, cmd_detach;
extern const mlz_command cmd_export, cmd_flamegraph, cmd_timeline;
extern const mlz_command cmd_watch, cmd_serve;
extern const mlz_command cmd_import, cmd_replay;
extern const mlz_command cmd_heapdump, cmd_leakcheck, cmd_retainers;
/* memlyze top --retained (cmd_top_retained.c). */
int top_retained_run(int argc, char **argv);
extern const mlz_command cmd_convert;

/* ---- cli_io.c */
/* Opens path and replays it up to `at` into *p; on failure prints one line
 * (naming cmd and path) and returns 1 with nothing left open. */
int  cli_load(const char *cmd, const char *path, const rep_at *at, mlz_reader **r, prof *p);
void cli_unload(mlz_reader *r, prof *p);

/* Output to a file that appears under its name only when complete ("-" or
 * NULL: stdout). cli_out_close renames into place when ok, else removes. */
typedef struct cli_out {
    FILE *f;
    char *path, *tmp;
} cli_out;
int  cli_out_open(const char *cmd, const char *path, cli_out *o);
int  cli_out_close(const char *cmd, cli_out *o, int ok);   /* 0, or 1 after printing why */

#endif
