/*
 * bench_reports_gen.c - writes a synthetic trace for bench/bench_reports.sh:
 * the report commands (top, export, flamegraph, timeline) are timed on it.
 *
 * Shaped like a sampled server trace: 2000 sites whose stacks (6..14 frames)
 * share callers the way real call trees do (_start > main > 8 workers > 40
 * handlers > 200 helpers > leaves), a pool of live objects with mostly short
 * lifetimes and a slow leak, µs deltas, 8 threads, a snapshot marker every
 * million events. Sampling rate 512 KiB, so readers compute real weights.
 *
 *   build/bench/bench_reports_gen OUT.mlyze [EVENTS] [-z]
 */
#include "mlz_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SITES 2000
#define POOL  (1 << 18)

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void)
{
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return rng;
}

/* Functions: 0 memlyze:start, 1 memlyze:stop, 2 memlyze:snapshot, 3 _start,
 * 4 main, 5.. workers, handlers, helpers, leaves. */
enum { F_START = 0, F_STOP = 1, F_SNAP = 2, F_ENTRY = 3, F_MAIN = 4, F_WORKER = 5,
       F_HANDLER = F_WORKER + 8, F_HELPER = F_HANDLER + 40, F_LEAF = F_HELPER + 200,
       F_COUNT = F_LEAF + SITES };

static char *make_meta(size_t *len)
{
    size_t cap = 4 << 20, n = 0;
    char *m = malloc(cap);
    if (!m) exit(1);
#define PUT(...) (n += (size_t)snprintf(m + n, cap - n, __VA_ARGS__))
    PUT("{\"kind\":\"trace\",\"rate\":524288,\"pid\":4242,\"exe\":\"/usr/bin/server\","
        "\"modules\":[{\"path\":\"/usr/bin/server\",\"build_id\":\"00112233445566778899aabbccddeeff00112233\","
        "\"base\":93824992231424,\"size\":8388608,\"bias\":93824992231424}],\"stack_traces\":{");
    for (int i = 0; i < SITES; i++) {
        int helper = i % 200, handler = helper % 40, worker = handler % 8;
        int extra = i % 9;   /* 0..8 more frames of recursion in the helper */
        PUT("%s\"%d\":[{\"file_id\":%d,\"line\":%d,\"func_id\":%d,\"module\":0,\"addr\":%d}", i ? "," : "",
            i, 1 + i % 50, 10 + i % 300, F_LEAF + i, 4096 + i * 64);
        for (int k = 0; k < extra; k++)
            PUT(",{\"file_id\":%d,\"line\":%d,\"func_id\":%d,\"module\":0,\"addr\":%d}", 51, 100 + k,
                F_HELPER + helper, 300000 + helper * 64 + k);
        PUT(",{\"file_id\":51,\"line\":%d,\"func_id\":%d,\"module\":0,\"addr\":%d}", 20 + helper, F_HELPER + helper, 400000 + helper * 16);
        PUT(",{\"file_id\":52,\"line\":%d,\"func_id\":%d,\"module\":0,\"addr\":%d}", 30 + handler, F_HANDLER + handler, 500000 + handler * 16);
        PUT(",{\"file_id\":53,\"line\":%d,\"func_id\":%d,\"module\":0,\"addr\":%d}", 40 + worker, F_WORKER + worker, 600000 + worker * 16);
        PUT(",{\"file_id\":53,\"line\":12,\"func_id\":%d,\"module\":0,\"addr\":700000}", F_MAIN);
        PUT(",{\"file_id\":0,\"line\":0,\"func_id\":%d,\"module\":0,\"addr\":700100}]", F_ENTRY);
    }
    PUT("},\"files\":{\"0\":\"\"");
    for (int i = 1; i <= 50; i++) PUT(",\"%d\":\"src/leaf%02d.c\"", i, i);
    PUT(",\"51\":\"src/helpers.c\",\"52\":\"src/handlers.c\",\"53\":\"src/main.c\"},\"functions\":{");
    for (int f = 0; f < F_COUNT; f++) {
        PUT("%s\"%d\":", f ? "," : "", f);
        if (f == F_START) PUT("\"memlyze:start\"");
        else if (f == F_STOP) PUT("\"memlyze:stop\"");
        else if (f == F_SNAP) PUT("\"memlyze:snapshot\"");
        else if (f == F_ENTRY) PUT("\"_start\"");
        else if (f == F_MAIN) PUT("\"main\"");
        else if (f < F_HANDLER) PUT("\"worker_%d\"", f - F_WORKER);
        else if (f < F_HELPER) PUT("\"handle_request_%d\"", f - F_HANDLER);
        else if (f < F_LEAF) PUT("\"helper_%d\"", f - F_HELPER);
        else PUT("\"alloc_site_%d\"", f - F_LEAF);
    }
    PUT("}}");
#undef PUT
    *len = n;
    return m;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_reports_gen OUT.mlyze [EVENTS] [-z]\n");
        return 2;
    }
    uint64_t events = argc > 2 && argv[2][0] != '-' ? strtoull(argv[2], NULL, 10) : 10000000;
    int lz = argc > 2 && !strcmp(argv[argc - 1], "-z");
    static uint8_t buf[MLZ_BLOCK_SIZE], zbuf[MLZ_LZ4_BOUND];
    static uint64_t live[POOL];
    static uint32_t site_size[SITES];
    static mlz_writer w;
    size_t ml;
    char *meta = make_meta(&ml);
    for (int i = 0; i < SITES; i++) site_size[i] = (uint32_t)(16u << (next() % 12));
    mlz_writer_opts o = { .start_us = 1700000000000000ull, .meta = meta, .meta_len = ml, .flags = lz ? MLZ_FLAG_LZ4 : 0,
                          .replace = 1, .buf = buf, .buf_size = sizeof buf, .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    if (mlz_writer_open(&w, argv[1], &o)) { perror(argv[1]); return 1; }
    uint64_t t = o.start_us, brk = 0x7f0000000000ull;
    mlz_writer_marker(&w, t, F_START);
    uint64_t written = 1;
    while (written + 1 < events) {
        uint64_t r = next();
        t += 1 + r % 3;
        if (written % 1000000 == 0) { mlz_writer_marker(&w, t, F_SNAP); written++; continue; }
        unsigned slot = (unsigned)(r >> 8) % POOL;
        /* One slot in 64 is never freed once full: the slow leak. */
        if (live[slot] && slot % 64) {
            mlz_writer_free(&w, t, live[slot]);
            live[slot] = 0;
        } else {
            unsigned site = (unsigned)((r >> 24) % SITES);
            if (r & 0x10000000000ull) site %= 50;   /* a few hot sites */
            uint64_t size = site_size[site] + (r >> 48) % 64;
            brk += (size + 31) & ~15ull;
            if (!live[slot]) live[slot] = brk;
            mlz_writer_alloc(&w, t, brk, size, site, (uint16_t)((r >> 40) % 8 + 1000));
        }
        written++;
    }
    mlz_writer_marker(&w, t + 1, F_STOP);
    if (mlz_writer_close(&w)) { perror("close"); return 1; }
    free(meta);
    printf("%s: %llu events\n", argv[1], (unsigned long long)(written + 1));
    return 0;
}
