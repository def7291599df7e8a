/*
 * cmd_stats.c - memlyze stats FILE: what a file holds, in numbers.
 */
#include "cli.h"
#include "profile.h"
#include "report.h"
#include "loss.h"

#include <jansson.h>
#include <string.h>

static void fmt_time(uint64_t us, char *buf, size_t len)
{
    snprintf(buf, len, "%.6f s", (double)us / 1e6);
}

static int run(int argc, char **argv)
{
    if (argc != 2) return cli_usage_error(&cmd_stats, argc < 2 ? "no file given" : "one file at a time");
    mlz_reader *r;
    prof p;
    if (cli_load("stats", argv[1], NULL, &r, &p)) return 1;
    const mlz_header *h = mlz_reader_header(r);
    const mlz_meta *m = p.meta;
    static const char *names[] = { "alloc", "free", "gc", "marker", "extension" };
    char b1[32], b2[32], b3[32];
    uint64_t raw = 0;
    for (int i = 0; i < 5; i++) raw += p.enc_bytes[i];

    printf("file:            %s\n", argv[1]);
    printf("kind:            %s\n", m->kind ? m->kind : "plain v1");
    if (m->pid >= 0) printf("pid:             %lld\n", (long long)m->pid);
    if (m->exe) printf("executable:      %s\n", m->exe);
    printf("sampling rate:   %s", p.rate <= 1 ? "every allocation (exact)" : cli_bytes((double)p.rate, b1, sizeof b1));
    /* Raised under overload: the rate MARKERs the trace holds. */
    uint64_t top_rate = p.rate;
    for (unsigned i = 1; i < p.rates.n; i++)
        if (p.rates.v[i] > top_rate) top_rate = p.rates.v[i];
    if (top_rate > p.rate) printf(", raised up to %s under load", cli_bytes((double)top_rate, b2, sizeof b2));
    printf("\n");
    printf("compression:     %s\n", (h->flags & MLZ_FLAG_LZ4) ? "lz4 blocks" : (h->flags & MLZ_FLAG_SPLIT) ? "split-stream blocks (zstd)" : "none");
    printf("events:          %llu\n", (unsigned long long)p.events);
    for (int i = 0; i < 5; i++)
        if (p.count[i])
            printf("  %-10s     %llu (%.2f bytes/record)\n", names[i], (unsigned long long)p.count[i],
                   (double)p.enc_bytes[i] / (double)p.count[i]);
    if (p.events) {
        printf("bytes/record:    %.2f raw", (double)raw / (double)p.events);
        if (h->flags & MLZ_FLAGS_BLOCKS) printf(", %.2f on disk", (double)h->stream_len / (double)p.events);
        printf("\n");
    }
    fmt_time(p.last_us - h->start_us, b1, sizeof b1);
    printf("time span:       %s\n", b1);
    printf("live at end:     %s in %.0f objects (%llu samples)\n", cli_bytes(p.live_bytes.value, b2, sizeof b2),
           p.live_count.value, (unsigned long long)p.live_samples);
    if (p.peak_bytes > 0) {
        fmt_time(p.peak_us - h->start_us, b1, sizeof b1);
        printf("peak live:       %s at +%s\n", cli_bytes(p.peak_bytes, b3, sizeof b3), b1);
    } else {
        printf("peak live:       0 B\n");
    }
    size_t used = 0;
    for (size_t i = 0; i < p.nsites; i++) used += p.sites[i].samples > 0;
    printf("stacks:          %zu distinct in use, %zu in metadata\n", used, m->nstacks);
    json_t *ctr = json_object_get(m->root, "counters");
    if (json_is_object(ctr)) {
        const char *k;
        json_t *v;
        printf("profiler counters:\n");
        json_object_foreach(ctr, k, v) printf("  %-26s %lld\n", k, (long long)json_integer_value(v));
    }
    char loss[640];
    if (mlz_loss_describe(ctr, p.rate, loss, sizeof loss)) printf("warning:         %s\n", loss);
    if (p.unmatched_frees) printf("unmatched frees: %llu (of allocations not recorded)\n", (unsigned long long)p.unmatched_frees);
    cli_unload(r, &p);
    return 0;
}

const mlz_command cmd_stats = {
    "stats", run, "counts, sizes and totals of a file",
    "usage: memlyze stats FILE\n"
    "\n"
    "Prints event counts per type with bytes per record, the time span, live\n"
    "objects and bytes at the end, the peak of live bytes and when it happened,\n"
    "and the number of distinct stacks. Byte figures are estimates scaled from\n"
    "the samples by the file's sampling rate.\n",
};
