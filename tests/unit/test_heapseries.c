/*
 * test_heapseries.c - the timeline's buckets against a model that divides
 * every event's time by the final bucket width: events
 * exactly on bucket edges, long runs in one bucket, jumps that merge the
 * buckets many times over, and a v1 file and its split conversion (block
 * replay) giving the same series.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"
#include "heapseries.h"

static const char META[] =
    "{\"stack_traces\":{\"0\":[{\"file_id\":0,\"line\":1,\"func_id\":0}]},"
    "\"files\":{\"0\":\"/src/a.c\"},\"functions\":{\"0\":\"main\"},\"kind\":\"trace\",\"rate\":1}";
static uint8_t wbuf[1 << 20], zbuf[MLZ_LZ4_BOUND];
#define START 1700000000000000ull

typedef struct ev { uint64_t t, addr, size; int alloc; } ev;

/* The model, by another road than the replay's merges: the final width is
 * the smallest power of two that puts the last event within HS_BUCKETS;
 * every event then goes straight into its bucket at that width (merging
 * pairs keeps the lowest, the highest and the later last, so the two must
 * agree). */
typedef struct model { uint64_t width; hs_bucket b[HS_BUCKETS]; double peak; } model;

static void model_run(model *m, const ev *e, size_t n)
{
    memset(m, 0, sizeof *m);
    m->width = 1;
    while (n && (e[n - 1].t - START) / m->width >= HS_BUCKETS) m->width *= 2;
    double v = 0;
    for (size_t i = 0; i < n; i++) {
        v += e[i].alloc ? (double)e[i].size : -(double)e[i].size;
        hs_bucket *b = &m->b[(e[i].t - START) / m->width];
        if (!b->used || v < b->min) b->min = v;
        if (!b->used || v > b->max) b->max = v;
        b->used = 1;
        b->last = v;
        if (v > m->peak) m->peak = v;
    }
}

static int write_trace(const char *path, unsigned flags, const ev *e, size_t n)
{
    mlz_writer w;
    mlz_writer_opts o = { .start_us = START, .meta = META, .meta_len = sizeof META - 1, .flags = flags,
                          .replace = 1, .buf = wbuf, .buf_size = 65536, .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    if (mlz_writer_open(&w, path, &o)) return -1;
    for (size_t i = 0; i < n; i++)
        if (e[i].alloc) mlz_writer_alloc(&w, e[i].t, e[i].addr, e[i].size, 0, 1);
        else mlz_writer_free(&w, e[i].t, e[i].addr);
    return mlz_writer_close(&w);
}

static int build(const char *path, heapseries *h)
{
    mlz_error err;
    mlz_reader *r = mlz_reader_open(path, MLZ_READ_NO_INDEX, &err);
    if (!r) return -1;
    int rc = hs_build(h, r, &err);
    mlz_reader_close(r);
    return rc;
}

static int same_buckets(const heapseries *h, const model *m)
{
    int bad = h->width_us != m->width || h->peak != m->peak;
    for (size_t i = 0; i < HS_BUCKETS; i++) {
        const hs_bucket *a = &h->b[i], *b = &m->b[i];
        if (a->used != b->used || (a->used && (a->min != b->min || a->max != b->max || a->last != b->last))) {
            if (!bad) fprintf(stderr, "  bucket %zu differs (width %llu)\n", i, (unsigned long long)m->width);
            bad = 1;
        }
    }
    return !bad;
}

static void test_buckets_match_the_model(void)
{
    enum { N = 60000 };
    ev *e = calloc(N, sizeof *e);
    REQUIRE(e);
    uint64_t s = 5, t = START, live[32] = { 0 }, size[32] = { 0 }, next = 0x10000;
    size_t n = 0;
    while (n < N) {
        uint64_t r = check_rng(&s);
        /* Mostly small steps; now and then a jump onto a bucket's edge at
         * the width of the moment, or far enough to merge many times. */
        uint64_t step = r % 7;
        if (r % 101 == 0) step = (1ull << ((r >> 8) % 20)) - (t - START) % ((1ull << ((r >> 8) % 20)));
        if (r % 2003 == 0) step = 1ull << (20 + (r >> 16) % 12);
        t += step;
        unsigned k = (r >> 32) & 31;
        if (live[k]) {
            e[n++] = (ev){ t, live[k], size[k], 0 };
            live[k] = 0;
        } else {
            live[k] = next += 64;
            size[k] = 16 + ((r >> 40) & 1023);
            e[n++] = (ev){ t, live[k], size[k], 1 };
        }
    }
    char dir[] = "/tmp/mlz-hs.XXXXXX", v1[64], sp[64];
    REQUIRE(mkdtemp(dir));
    snprintf(v1, sizeof v1, "%s/a.v1", dir);
    snprintf(sp, sizeof sp, "%s/a.split", dir);
    REQUIRE(write_trace(v1, 0, e, n) == 0);
    REQUIRE(write_trace(sp, MLZ_FLAG_SPLIT, e, n) == 0);
    model m;
    model_run(&m, e, n);
    CHECK(m.width >= (1u << 20));   /* the jumps did merge many times */
    static heapseries h1, h2;
    REQUIRE(build(v1, &h1) == 0);
    REQUIRE(build(sp, &h2) == 0);
    CHECK(same_buckets(&h1, &m));
    CHECK(same_buckets(&h2, &m));
    CHECK_EQ_U64(h1.events, n);
    CHECK_EQ_U64(h2.events, n);
    hs_free(&h1);
    hs_free(&h2);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    free(e);
}

int main(void)
{
    RUN(test_buckets_match_the_model);
    CHECK_EXIT();
}
