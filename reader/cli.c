/*
 * cli.c - helpers shared by the memlyze subcommands.
 */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "memlyze %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

pid_t cli_parse_pid(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *end || end == s || v <= 0 || v > 0x7fffffff ? 0 : (pid_t)v;
}

int cli_usage_error(const mlz_command *c, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "memlyze %s: ", c->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    /* Only the first usage line, so the error stays short. */
    const char *nl = strchr(c->usage, '\n');
    fprintf(stderr, "%.*s\n", nl ? (int)(nl - c->usage) : (int)strlen(c->usage), c->usage);
    return 2;
}

int cli_wants_help(const mlz_command *c, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s", c->usage);
            return 1;
        }
    }
    return 0;
}

void cli_print_format_error(const char *cmd, const char *path, const mlz_error *e)
{
    if (e->rule == MLZ_RULE_IO)
        fprintf(stderr, "memlyze %s: %s: %s\n", cmd, path, e->msg);
    else
        fprintf(stderr, "memlyze %s: %s: invalid: %s at byte %llu: %s\n", cmd, path,
                mlz_rule_name(e->rule), (unsigned long long)e->offset, e->msg);
}

mlz_reader *cli_open(const char *cmd, const char *path, unsigned flags)
{
    mlz_error e = { 0 };
    mlz_reader *r = mlz_reader_open(path, flags, &e);
    if (!r) cli_print_format_error(cmd, path, &e);
    return r;
}

const char *cli_bytes(double b, char *buf, size_t len)
{
    static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    double a = b < 0 ? -b : b;
    while (a >= 1024 && u < 4) { a /= 1024; b /= 1024; u++; }
    if (u == 0) snprintf(buf, len, "%.0f B", b);
    else snprintf(buf, len, "%.*f %s", a < 10 ? 2 : a < 100 ? 1 : 0, b, units[u]);
    return buf;
}

char *cli_text(char *s)
{
    for (unsigned char *p = (unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f) *p = '?';
    return s;
}

int cli_parse_number(const char *s, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0 && v <= max)) return -1;   /* NaN fails both */
    *out = v;
    return 0;
}

int cli_parse_time(const char *s, uint64_t start_us, uint64_t *out)
{
    double v;
    if (cli_parse_number(s, 9e18, &v)) return -1;
    /* Anything past 10^12 reads as microseconds since the epoch (1970 + 11 days). */
    if (v >= 1e12) *out = (uint64_t)v;
    else *out = start_us + (uint64_t)(v * 1e6 + 0.5);
    return 0;
}
