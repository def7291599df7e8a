/*
 * cmd_lifetimes.c - reports about how long allocations live, from a trace:
 *   memlyze leaks FILE      live at the end and older than --age: suspects
 *   memlyze temporary FILE  freed within --within of birth: churn to pool
 * Both group by site and show estimates with 95% intervals.
 */
#include "cli.h"
#include "profile.h"
#include "sitejson.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int g_temp;   /* which report: sort key */

static const est *metric(const prof_site *s)
{
    return g_temp ? &s->temp_bytes : &s->old_bytes;
}

static double count_of(const prof_site *s)
{
    return g_temp ? s->temp_count.value : s->old_count.value;
}

/* By bytes, then by objects (blocks of 0 B are objects too). */
static int cmp(const void *a, const void *b)
{
    const prof_site *l = *(prof_site *const *)a, *r = *(prof_site *const *)b;
    double x = metric(l)->value, y = metric(r)->value;
    if (x == y) x = count_of(l), y = count_of(r);
    return x < y ? 1 : x > y ? -1 : 0;
}

static int report(const mlz_command *cmd, int temp, int argc, char **argv)
{
    long n = 10;
    double secs = temp ? 0.001 : 10;
    int c, as_json = 0;
    static const struct option opts[] = {
        { "age", required_argument, 0, 'a' }, { "within", required_argument, 0, 'w' },
        { "json", no_argument, 0, 'j' }, { 0, 0, 0, 0 } };
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        char *end;
        if (c == 'n') {
            n = strtol(optarg, &end, 10);
            if (*end || n <= 0) return cli_usage_error(cmd, "-n needs a positive number");
        } else if ((c == 'a' && !temp) || (c == 'w' && temp)) {
            /* Up to 10^12 s: its microseconds still fit. */
            if (cli_parse_number(optarg, 1e12, &secs))
                return cli_usage_error(cmd, "%s takes seconds (0 to 1e12)", temp ? "--within" : "--age");
        } else if (c == 'j') {
            as_json = 1;
        } else {
            return cli_usage_error(cmd, "bad option");
        }
    }
    if (argc - optind != 1) return cli_usage_error(cmd, "need exactly one FILE");
    const char *path = argv[optind];
    mlz_reader *r = cli_open(cmd->name, path, 0);
    if (!r) return 1;
    const mlz_meta *m = mlz_reader_meta(r);
    if (m->kind && !strcmp(m->kind, "snapshot")) {
        mlz_reader_close(r);
        return cli_error(cmd->name, "%s: a snapshot has no history; %s needs a trace (memlyze run, memlyze-detach)",
                         path, cmd->name);
    }
    uint64_t us = (uint64_t)(secs * 1e6);
    prof_opts o = { 0, UINT64_MAX, temp ? us : 0, temp ? UINT64_MAX : us };
    prof p;
    mlz_error e = { 0 };
    if (prof_replay_opts(&p, r, &o, &e)) {
        cli_print_format_error(cmd->name, path, &e);
        prof_free(&p);
        mlz_reader_close(r);
        return 1;
    }
    g_temp = temp;
    prof_site **order = malloc((p.nsites ? p.nsites : 1) * sizeof *order);
    size_t k = 0;
    double total = 0, var = 0, count = 0;
    for (size_t i = 0; i < p.nsites; i++)
        if (p.site_of[i] == i && (metric(&p.sites[i])->value > 0 || count_of(&p.sites[i]) > 0)) {
            order[k++] = &p.sites[i];
            total += metric(&p.sites[i])->value;
            var += metric(&p.sites[i])->var;
            count += count_of(&p.sites[i]);
        }
    qsort(order, k, sizeof *order, cmp);
    char b1[32], b2[32], fr[512];
    if (as_json) {
        json_t *root = json_object(), *arr = json_array();
        json_object_set_new(root, temp ? "within_seconds" : "age_seconds", json_real(secs));
        json_object_set_new(root, "bytes", json_real(total));
        json_object_set_new(root, "bytes_ci95", json_real(1.96 * sqrt(var)));
        for (size_t i = 0; i < k && i < (size_t)n; i++) {
            const prof_site *s = order[i];
            json_t *o2 = json_object();
            sitejson_est(o2, "bytes", metric(s));
            json_object_set_new(o2, "count", json_real(count_of(s)));
            json_object_set_new(o2, "frames", sitejson_frame_names(p.meta, s->stack, 4));
            json_array_append_new(arr, o2);
        }
        sitejson_dump(root, arr, stdout);
    } else {
        if (temp)
            printf("%s: %s in ~%.0f allocations freed within %g s of their birth\n", path,
                   cli_bytes(total, b1, sizeof b1), count, secs);
        else
            printf("%s: %s \xc2\xb1 %s in ~%.0f allocations live at the end and older than %g s\n", path,
                   cli_bytes(total, b1, sizeof b1), cli_bytes(1.96 * sqrt(var), b2, sizeof b2), count, secs);
        printf("%4s  %-26s %9s  %s\n", "rank", "bytes (95% interval)", "count", "site");
        for (size_t i = 0; i < k && i < (size_t)n; i++) {
            const prof_site *s = order[i];
            char cell[64];
            snprintf(cell, sizeof cell, "%s \xc2\xb1 %s", cli_bytes(metric(s)->value, b1, sizeof b1),
                     cli_bytes(1.96 * sqrt(metric(s)->var), b2, sizeof b2));
            prof_frame_name(p.meta, &s->stack->frames[0], fr, sizeof fr);
            printf("%4zu  %-27s %9.0f  %s\n", i + 1, cell, count_of(s),
                   s->stack->depth ? cli_text(fr) : "(no frames)");
            for (uint32_t j = 1; j < s->stack->depth && j < 4; j++) {
                prof_frame_name(p.meta, &s->stack->frames[j], fr, sizeof fr);
                printf("%4s  %-26s %9s    <- %s\n", "", "", "", cli_text(fr));
            }
        }
        if (!k) printf("(none)\n");
    }
    free(order);
    prof_free(&p);
    mlz_reader_close(r);
    return 0;
}

static int run_leaks(int argc, char **argv) { return report(&cmd_leaks, 0, argc, argv); }
static int run_temporary(int argc, char **argv) { return report(&cmd_temporary, 1, argc, argv); }

const mlz_command cmd_leaks = {
    "leaks", run_leaks, "allocations still live at the end and older than --age",
    "usage: memlyze leaks [--age SECONDS] [-n N] [--json] TRACE\n"
    "\n"
    "From a trace (memlyze run, or the file memlyze-detach writes), the\n"
    "allocations alive at its end that were made more than SECONDS before it\n"
    "ended (default 10), grouped by site: the leak suspects.\n",
};

const mlz_command cmd_temporary = {
    "temporary", run_temporary, "allocations freed soon after they were made",
    "usage: memlyze temporary [--within SECONDS] [-n N] [--json] TRACE\n"
    "\n"
    "From a trace, the allocations freed within SECONDS of being made (default\n"
    "0.001), grouped by site: short-lived churn worth pooling or keeping on the\n"
    "stack.\n",
};
