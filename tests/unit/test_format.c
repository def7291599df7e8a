/*
 * test_format.c - the .mlyze codec: varints, writer -> reader round trips in
 * raw and LZ4 modes, the index, and rejection of every kind of damage
 * (every truncation, bit flips, bad references) with a rule and an offset.
 */
#include "../check.h"
#include "mlz_format.h"
#include "varint.h"
#include "jsonw.h"

#include <jansson.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];
static uint8_t wbuf[MLZ_BLOCK_SIZE], zbuf[MLZ_LZ4_BOUND];

static const char META[] =
    "{\"stack_traces\":{\"0\":[{\"file_id\":0,\"line\":42,\"func_id\":0}],"
    "\"1\":[{\"file_id\":1,\"line\":7,\"func_id\":1},{\"file_id\":0,\"line\":42,\"func_id\":0}]},"
    "\"files\":{\"0\":\"/src/a.c\",\"1\":\"/src/b.c\"},"
    "\"functions\":{\"0\":\"main\",\"1\":\"work\",\"2\":\"phase-2\"},\"kind\":\"trace\",\"rate\":1}";

static char *path_of(const char *name)
{
    static char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}


/* Writes a file with every event type; returns the number of events. */
static uint64_t write_sample(const char *p, unsigned flags, uint64_t nalloc)
{
    static mlz_writer w;
    mlz_writer_opts o = { .start_us = 1700000000000000ull, .meta = META, .meta_len = sizeof META - 1,
                          .flags = flags, .replace = 1, .buf = wbuf, .buf_size = sizeof wbuf,
                          .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    if (mlz_writer_open(&w, p, &o)) return 0;
    uint64_t t = o.start_us, n = 0;
    for (uint64_t i = 0; i < nalloc; i++) {
        t += i % 7;
        mlz_writer_alloc(&w, t, 0x7f0000001000ull + 64 * i, 16 + i % 5000, i & 1, (uint16_t)(i % 9));
        n++;
        if (i % 3 == 0) { mlz_writer_free(&w, t + 1, 0x7f0000001000ull + 64 * i); n++; }
    }
    mlz_writer_gc(&w, t + 2, 12, 4096); n++;
    mlz_writer_marker(&w, t + 3, 2); n++;
    uint8_t ext[3] = { 1, 2, 3 };
    mlz_writer_ext(&w, 99, t + 4, ext, sizeof ext); n++;
    if (mlz_writer_close(&w)) return 0;
    return n;
}

static int read_all(const char *p, unsigned flags, uint64_t *n, mlz_error *e)
{
    mlz_reader *r = mlz_reader_open(p, flags, e);
    if (!r) return -1;
    mlz_event ev;
    int rc;
    *n = 0;
    while ((rc = mlz_reader_next(r, &ev, e)) == 1) (*n)++;
    mlz_reader_close(r);
    return rc;
}

static void test_varint_examples(void)
{
    uint8_t b[10];
    CHECK(mlz_varint_put(b, 0) == 1 && b[0] == 0x00);
    CHECK(mlz_varint_put(b, 127) == 1 && b[0] == 0x7f);
    CHECK(mlz_varint_put(b, 128) == 2 && b[0] == 0x80 && b[1] == 0x01);
    CHECK(mlz_varint_put(b, 16384) == 3 && b[0] == 0x80 && b[1] == 0x80 && b[2] == 0x01);
    CHECK(mlz_varint_put(b, UINT64_MAX) == 10 && b[9] == 0x01);
    uint64_t vals[] = { 0, 1, 127, 128, 255, 16383, 16384, (1ull << 32) - 1, 1ull << 63, UINT64_MAX };
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        size_t n = mlz_varint_put(b, vals[i]), used;
        uint64_t v;
        CHECK(n == mlz_varint_len(vals[i]));
        CHECK(mlz_varint_get(b, b + n, &v, &used) == MLZ_VARINT_OK && v == vals[i] && used == n);
        CHECK(mlz_varint_get(b, b + n - 1, &v, &used) == MLZ_VARINT_TRUNCATED);
    }
}

/* mlz_varint_len's closed form against the encoder at both ends of every
 * bit width (1..64 significant bits). */
static void test_varint_len_every_width(void)
{
    uint8_t b[10];
    CHECK(mlz_varint_len(0) == 1);
    for (unsigned bits = 1; bits <= 64; bits++) {
        uint64_t lo = 1ull << (bits - 1), hi = lo | (lo - 1);
        CHECK(mlz_varint_len(lo) == mlz_varint_put(b, lo));
        CHECK(mlz_varint_len(hi) == mlz_varint_put(b, hi));
        CHECK(mlz_varint_len(lo) == (bits + 6) / 7);
    }
}

static void test_varint_rejects(void)
{
    uint64_t v;
    size_t used;
    uint8_t overlong[] = { 0x80, 0x00 };
    CHECK(mlz_varint_get(overlong, overlong + 2, &v, &used) == MLZ_VARINT_OVERLONG);
    uint8_t eleven[11];
    memset(eleven, 0x80, 10);
    eleven[10] = 0;
    CHECK(mlz_varint_get(eleven, eleven + 11, &v, &used) == MLZ_VARINT_TOO_LONG);
    uint8_t overflow[10];
    memset(overflow, 0xff, 9);
    overflow[9] = 0x02;     /* bit 64 */
    CHECK(mlz_varint_get(overflow, overflow + 10, &v, &used) == MLZ_VARINT_TOO_LONG);
}

static void test_roundtrip_raw_and_lz4(void)
{
    for (int lz = 0; lz < 2; lz++) {
        const char *p = path_of(lz ? "rt.lz4.mlyze" : "rt.mlyze");
        uint64_t n = write_sample(p, lz ? MLZ_FLAG_LZ4 : 0, 50000), got = 0;
        REQUIRE(n > 0);
        mlz_error e = { 0 };
        CHECK(read_all(p, 0, &got, &e) == 0);
        CHECK_EQ_U64(got, n);
        /* Values come back exactly. */
        mlz_reader *r = mlz_reader_open(p, 0, &e);
        REQUIRE(r);
        const mlz_header *h = mlz_reader_header(r);
        CHECK(h->flags & MLZ_FLAG_SEALED);
        CHECK(!!(h->flags & MLZ_FLAG_LZ4) == lz);
        CHECK_EQ_U64(h->event_count, n);
        CHECK(lz ? mlz_reader_has_index(r) : 1);
        mlz_event ev;
        CHECK(mlz_reader_next(r, &ev, &e) == 1);
        CHECK(ev.type == MLZ_EV_ALLOC && ev.addr == 0x7f0000001000ull && ev.size == 16 && ev.stack_id == 0);
        CHECK(ev.time_us == 1700000000000000ull && ev.enc_len >= 12 && ev.enc_len <= 30);
        CHECK(mlz_reader_next(r, &ev, &e) == 1 && ev.type == MLZ_EV_FREE && ev.time_us == 1700000000000001ull);
        mlz_reader_close(r);
        /* No temporary files left behind. */
        char tmp[160];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", p, (int)getpid());
        CHECK(access(tmp, F_OK) != 0);
    }
}

static void test_lz4_smaller_and_seek(void)
{
    size_t a, b;
    void *raw = check_slurp(path_of("rt.mlyze"), &a), *lz = check_slurp(path_of("rt.lz4.mlyze"), &b);
    REQUIRE(raw && lz);
    CHECK(b < a * 3 / 4);   /* synthetic sizes vary a lot; real traces compress better (bench/) */
    free(raw);
    free(lz);
    mlz_error e = { 0 };
    mlz_reader *r = mlz_reader_open(path_of("rt.lz4.mlyze"), 0, &e);
    REQUIRE(r);
    /* Find the time of some late event by scanning, then seek to it. */
    mlz_event ev;
    uint64_t target = 0, idx = 0, target_idx = 0;
    while (mlz_reader_next(r, &ev, &e) == 1) {
        if (idx == 60000) { target = ev.time_us; target_idx = idx; }
        idx++;
    }
    CHECK(target > 0);
    CHECK(mlz_reader_seek_time(r, target, &e) == 0);
    CHECK(mlz_reader_next(r, &ev, &e) == 1);
    CHECK(ev.time_us == target);
    (void)target_idx;
    mlz_reader_close(r);
    /* Without the index there is nothing to seek with. */
    r = mlz_reader_open(path_of("rt.lz4.mlyze"), MLZ_READ_NO_INDEX, &e);
    REQUIRE(r);
    CHECK(mlz_reader_seek_time(r, target, &e) == -1);
    mlz_reader_close(r);
}

static void test_empty_tables_and_no_events(void)
{
    static mlz_writer w;
    const char meta[] = "{\"stack_traces\":{},\"files\":{},\"functions\":{}}";
    mlz_writer_opts o = { .start_us = 5, .meta = meta, .meta_len = sizeof meta - 1, .replace = 1,
                          .buf = wbuf, .buf_size = sizeof wbuf };
    REQUIRE(mlz_writer_open(&w, path_of("empty.mlyze"), &o) == 0);
    CHECK(mlz_writer_close(&w) == 0);
    uint64_t n = 99;
    mlz_error e = { 0 };
    CHECK(read_all(path_of("empty.mlyze"), 0, &n, &e) == 0 && n == 0);
    /* Missing tables are a rule-3 error. */
    const char bad[] = "{\"files\":{},\"functions\":{}}";
    o.meta = bad;
    o.meta_len = sizeof bad - 1;
    REQUIRE(mlz_writer_open(&w, path_of("nostacks.mlyze"), &o) == 0);
    CHECK(mlz_writer_close(&w) == 0);
    CHECK(read_all(path_of("nostacks.mlyze"), 0, &n, &e) == -1 && e.rule == MLZ_RULE_METADATA);
}

/* Stack look-up by id: dense from 0, dense from 1 (the payload counts
 * from 1) and sparse ids all find every stack and nothing else. */
static void test_stack_lookup(void)
{
    static const uint64_t sets[3][4] = { { 0, 1, 2, 3 }, { 1, 2, 3, 4 }, { 2, 7, 100, 1000 } };
    static const uint64_t absent[] = { 5, 6, 8, 99, 101, 999, 1001, UINT64_MAX };
    static mlz_writer w;
    for (int k = 0; k < 3; k++) {
        char meta[512];
        size_t n = (size_t)snprintf(meta, sizeof meta, "{\"stack_traces\":{");
        for (int i = 0; i < 4; i++)
            n += (size_t)snprintf(meta + n, sizeof meta - n, "%s\"%llu\":[{\"file_id\":0,\"line\":%d,\"func_id\":0}]",
                                  i ? "," : "", (unsigned long long)sets[k][i], i + 1);
        n += (size_t)snprintf(meta + n, sizeof meta - n, "},\"files\":{\"0\":\"a.c\"},\"functions\":{\"0\":\"f\"}}");
        mlz_writer_opts o = { .start_us = 5, .meta = meta, .meta_len = n, .replace = 1, .buf = wbuf, .buf_size = sizeof wbuf };
        REQUIRE(mlz_writer_open(&w, path_of("ids.mlyze"), &o) == 0);
        REQUIRE(mlz_writer_close(&w) == 0);
        mlz_error e;
        mlz_reader *r = mlz_reader_open(path_of("ids.mlyze"), 0, &e);
        REQUIRE(r);
        const mlz_meta *m = mlz_reader_meta(r);
        for (int i = 0; i < 4; i++) {
            const mlz_stack *st = mlz_meta_stack(m, sets[k][i]);
            CHECK(st && st->id == sets[k][i] && st->depth == 1 && st->frames[0].line == (uint64_t)i + 1);
        }
        for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
            if (absent[i] != sets[k][0] && absent[i] != sets[k][3]) CHECK(mlz_meta_stack(m, absent[i]) == NULL);
        if (k) CHECK(mlz_meta_stack(m, 0) == NULL);
        mlz_reader_close(r);
    }
}

static void test_never_overwrites_without_replace(void)
{
    static mlz_writer w;
    const char meta[] = "{\"stack_traces\":{},\"files\":{},\"functions\":{}}";
    mlz_writer_opts o = { .start_us = 5, .meta = meta, .meta_len = sizeof meta - 1,
                          .buf = wbuf, .buf_size = sizeof wbuf };
    REQUIRE(mlz_writer_open(&w, path_of("empty.mlyze"), &o) == 0);
    CHECK(mlz_writer_close(&w) == -EEXIST);
    /* A symlink planted at the temporary name is not followed. */
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path_of("sym.mlyze"), (int)getpid());
    CHECK(symlink("/tmp/should-not-be-written", tmp) == 0);
    CHECK(mlz_writer_open(&w, path_of("sym.mlyze"), &o) == -EEXIST);
    unlink(tmp);
}

/* Every byte-truncation of a valid file is rejected, never crashes. */
static void test_every_truncation(void)
{
    static mlz_writer w;
    const char *p = path_of("small.mlyze");
    mlz_writer_opts o = { .start_us = 1000, .meta = META, .meta_len = sizeof META - 1, .replace = 1,
                          .buf = wbuf, .buf_size = sizeof wbuf };
    REQUIRE(mlz_writer_open(&w, p, &o) == 0);
    mlz_writer_alloc(&w, 1001, 0x1000, 100000, 1, 3);
    mlz_writer_free(&w, 1500, 0x1000);
    mlz_writer_marker(&w, 1600, 2);
    REQUIRE(mlz_writer_close(&w) == 0);
    size_t n;
    uint8_t *b = check_slurp(p, &n);
    REQUIRE(b);
    int all_rejected = 1;
    for (size_t len = 0; len < n; len++) {
        mlz_error e = { 0 };
        mlz_reader *r = mlz_reader_open_mem(b, len, 0, &e);
        int rc = -1;
        if (r) {
            mlz_event ev;
            while ((rc = mlz_reader_next(r, &ev, &e)) == 1) {}
            mlz_reader_close(r);
        }
        if (rc != -1 || e.msg[0] == 0) { all_rejected = 0; fprintf(stderr, "  truncation to %zu accepted\n", len); }
    }
    CHECK(all_rejected);
    free(b);
}

/* A plain v1 file (unsealed header) still catches a cut inside an event. */
static void test_plain_v1_truncation(void)
{
    static mlz_writer w;
    const char *p = path_of("plain.mlyze");
    mlz_writer_opts o = { .start_us = 1000, .meta = META, .meta_len = sizeof META - 1, .replace = 1,
                          .plain = 1, .buf = wbuf, .buf_size = sizeof wbuf };
    REQUIRE(mlz_writer_open(&w, p, &o) == 0);
    mlz_writer_alloc(&w, 1001, 0x1000, 100, 1, 3);
    mlz_writer_free(&w, 1002, 0x1000);
    REQUIRE(mlz_writer_close(&w) == 0);
    size_t n;
    uint8_t *b = check_slurp(p, &n);
    REQUIRE(b);
    CHECK(mlz_get_u32(b + 20) == 0);
    mlz_error e = { 0 };
    mlz_reader *r = mlz_reader_open_mem(b, n, 0, &e);
    REQUIRE(r);
    mlz_event ev;
    int rc, k = 0;
    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) k++;
    CHECK(rc == 0 && k == 2);
    mlz_reader_close(r);
    r = mlz_reader_open_mem(b, n - 3, 0, &e);
    REQUIRE(r);
    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) {}
    CHECK(rc == -1 && e.rule == MLZ_RULE_SIZE);
    mlz_reader_close(r);
    /* With TRUNCATED_OK (spool recovery) the same cut ends cleanly. */
    r = mlz_reader_open_mem(b, n - 3, MLZ_READ_TRUNCATED_OK, &e);
    REQUIRE(r);
    k = 0;
    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) k++;
    CHECK(rc == 0 && k == 1 && mlz_reader_was_truncated(r));
    mlz_reader_close(r);
    free(b);
}

/* Flipping any bit must be caught or give a still-valid file; never crash. */
static void test_bit_flips(void)
{
    for (int lz = 0; lz < 2; lz++) {
        static mlz_writer w;
        const char *p = path_of("flip.mlyze");
        mlz_writer_opts o = { .start_us = 1000, .meta = META, .meta_len = sizeof META - 1, .replace = 1,
                              .flags = lz ? MLZ_FLAG_LZ4 : 0, .buf = wbuf, .buf_size = sizeof wbuf,
                              .zbuf = zbuf, .zbuf_size = sizeof zbuf };
        REQUIRE(mlz_writer_open(&w, p, &o) == 0);
        for (int i = 0; i < 20; i++) mlz_writer_alloc(&w, 1001 + i, 0x1000 + 16 * i, 100 + i, i & 1, 3);
        mlz_writer_marker(&w, 1600, 2);
        REQUIRE(mlz_writer_close(&w) == 0);
        size_t n;
        uint8_t *b = check_slurp(p, &n);
        REQUIRE(b);
        unsigned caught = 0, total = 0;
        for (size_t i = 0; i < n; i++)
            for (int bit = 0; bit < 8; bit++) {
                b[i] ^= (uint8_t)(1 << bit);
                mlz_error e = { 0 };
                mlz_reader *r = mlz_reader_open_mem(b, n, 0, &e);
                int rc = -1;
                if (r) {
                    mlz_event ev;
                    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) {}
                    mlz_reader_close(r);
                }
                caught += rc == -1;
                total++;
                b[i] ^= (uint8_t)(1 << bit);
            }
        /* Flips in header/metadata structure and event framing are caught;
         * flips inside values (an address, a size) cannot be without a checksum. */
        CHECK(caught > total / 4);
        free(b);
    }
}

static void write_bytes(const char *p, const void *b, size_t n)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, b, n) == (ssize_t)n);
    close(fd);
}

/* Hand-made files, each breaking one rule, report that rule. */
static void test_each_rule(void)
{
    struct { const char *meta; uint8_t ev[16]; size_t evlen; int rule; const char *what; } cases[] = {
        { "{\"stack_traces\":{},\"files\":{},\"functions\":{}", {0}, 0, MLZ_RULE_METADATA, "bad json" },
        { "{\"stack_traces\":{\"0\":[{\"file_id\":5,\"line\":1,\"func_id\":0}]},\"files\":{},\"functions\":{\"0\":\"f\"}}",
          {0}, 0, MLZ_RULE_REFERENCE, "frame names missing file" },
        { "{\"stack_traces\":{},\"files\":{},\"functions\":{}}",
          { 0, 0, 1,0,0,0,0,0,0,0, 5, 7, 0,0 }, 14, MLZ_RULE_REFERENCE, "alloc names missing stack" },
        { "{\"stack_traces\":{},\"files\":{},\"functions\":{}}",
          { 3, 0, 4 }, 3, MLZ_RULE_REFERENCE, "marker names missing function" },
        { "{\"stack_traces\":{},\"files\":{},\"functions\":{}}",
          { 200, 0 }, 2, MLZ_RULE_EVENT_TYPE, "event type 200" },
        { "{\"stack_traces\":{},\"files\":{},\"functions\":{}}",
          { 1, 0x80, 0x00, 1,0,0,0,0,0,0,0 }, 11, MLZ_RULE_VARINT, "overlong varint delta" },
        { "{\"stack_traces\":{},\"files\":{},\"functions\":{}}",
          { 1, 0, 1, 2, 3 }, 5, MLZ_RULE_SIZE, "free cut short" },
        { "{\"stack_traces\":{\"01\":[]},\"files\":{},\"functions\":{}}", {0}, 0, MLZ_RULE_METADATA, "id with leading zero" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint8_t f[1024] = { 0 };
        size_t ml = strlen(cases[i].meta);
        memcpy(f, "MTRC", 4);
        mlz_put_u32(f + 4, 1);
        mlz_put_u32(f + 16, (uint32_t)ml);
        memcpy(f + 256, cases[i].meta, ml);
        memcpy(f + 256 + ml, cases[i].ev, cases[i].evlen);
        write_bytes(path_of("rule.mlyze"), f, 256 + ml + cases[i].evlen);
        uint64_t n;
        mlz_error e = { 0 };
        int rc = read_all(path_of("rule.mlyze"), 0, &n, &e);
        if (rc != -1 || e.rule != cases[i].rule)
            fprintf(stderr, "  case '%s': rc %d rule %d (%s)\n", cases[i].what, rc, e.rule, e.msg);
        CHECK(rc == -1 && e.rule == cases[i].rule);
    }
    /* Rules 1 and 2 and a sealed size mismatch. */
    uint8_t f[300] = { 0 };
    memcpy(f, "MTRX", 4);
    write_bytes(path_of("rule.mlyze"), f, 300);
    uint64_t n;
    mlz_error e = { 0 };
    CHECK(read_all(path_of("rule.mlyze"), 0, &n, &e) == -1 && e.rule == MLZ_RULE_MAGIC && e.offset == 0);
    memcpy(f, "MTRC", 4);
    mlz_put_u32(f + 4, 2);
    write_bytes(path_of("rule.mlyze"), f, 300);
    CHECK(read_all(path_of("rule.mlyze"), 0, &n, &e) == -1 && e.rule == MLZ_RULE_VERSION && e.offset == 4);
}

/* Writes a v1 file of META and the given event bytes (sealed: no). */
static void write_events(const char *p, const uint8_t *ev, size_t n)
{
    static uint8_t f[4096];
    size_t ml = sizeof META - 1;
    memset(f, 0, 256);
    memcpy(f, "MTRC", 4);
    mlz_put_u32(f + 4, 1);
    mlz_put_u32(f + 16, (uint32_t)ml);
    memcpy(f + 256, META, ml);
    memcpy(f + 256 + ml, ev, n);
    write_bytes(p, f, 256 + ml + n);
}

/* The reader takes ALLOC and FREE by a shorter path when the buffer holds
 * the longest ALLOC (41 bytes): the same fields, the widest varints, and
 * the same rule and offset for a broken event there as at the end. */
static void test_common_events_mid_buffer(void)
{
    uint8_t ev[512];
    size_t n = 0;
    ev[n++] = MLZ_EV_ALLOC;
    n += mlz_varint_put(ev + n, UINT64_MAX);            /* delta: 10 bytes */
    mlz_put_u64(ev + n, 0x1122334455667788ull); n += 8;
    n += mlz_varint_put(ev + n, UINT64_MAX);            /* size */
    n += mlz_varint_put(ev + n, 1);                     /* stack */
    mlz_put_u16(ev + n, 0xBEEF); n += 2;
    ev[n++] = MLZ_EV_FREE;
    n += mlz_varint_put(ev + n, 300);
    mlz_put_u64(ev + n, 0x1122334455667788ull); n += 8;
    size_t good = n;
    uint64_t base = 256 + sizeof META - 1;              /* offsets count from the file's start */
    for (int i = 0; i < 8; i++) {                       /* padding: small FREEs */
        ev[n++] = MLZ_EV_FREE; ev[n++] = 0;
        mlz_put_u64(ev + n, 0x1000 + (uint64_t)i); n += 8;
    }
    write_events(path_of("common.mlyze"), ev, n);
    mlz_error e = { 0 };
    mlz_reader *r = mlz_reader_open(path_of("common.mlyze"), 0, &e);
    CHECK(r != NULL);
    mlz_event a, f;
    CHECK(r && mlz_reader_next(r, &a, &e) == 1 && mlz_reader_next(r, &f, &e) == 1);
    CHECK(a.type == MLZ_EV_ALLOC && a.delta_us == UINT64_MAX && a.addr == 0x1122334455667788ull &&
          a.size == UINT64_MAX && a.stack_id == 1 && a.thread == 0xBEEF && a.enc_len == 1 + 10 + 8 + 10 + 1 + 2 &&
          a.offset == base && a.objects == 0 && a.name_id == 0 && a.data == NULL);
    CHECK(f.type == MLZ_EV_FREE && f.delta_us == 300 && f.addr == 0x1122334455667788ull && f.size == 0 &&
          f.stack_id == 0 && f.thread == 0 && f.enc_len == 11 && f.offset == base + good - 11);
    if (r) mlz_reader_close(r);

    /* Broken events with plenty after them. */
    struct { uint8_t ev[24]; size_t len; int rule; uint64_t off; const char *what; } cases[] = {
        { { MLZ_EV_ALLOC, 0x80, 0x00 }, 3, MLZ_RULE_VARINT, 1, "overlong delta" },
        { { MLZ_EV_ALLOC, 0, 1,2,3,4,5,6,7,8, 0x85, 0x00 }, 12, MLZ_RULE_VARINT, 10, "overlong size" },
        { { MLZ_EV_ALLOC, 0, 1,2,3,4,5,6,7,8, 16, 0xff,0xff,0xff,0xff,0xff,0xff,0xff,0xff,0xff,0x7f }, 21,
          MLZ_RULE_VARINT, 11, "stack varint over 64 bits" },
        { { MLZ_EV_ALLOC, 0, 1,2,3,4,5,6,7,8, 16, 9, 0,0 }, 14, MLZ_RULE_REFERENCE, 0, "unknown stack" },
        { { MLZ_EV_FREE, 0x80, 0x80, 0x00 }, 4, MLZ_RULE_VARINT, 1, "free's overlong delta" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        n = 0;
        memcpy(ev, cases[i].ev, cases[i].len);
        n = cases[i].len;
        memset(ev + n, 0, 64);                          /* more than the longest ALLOC */
        n += 64;
        write_events(path_of("common.mlyze"), ev, n);
        uint64_t k;
        int rc = read_all(path_of("common.mlyze"), 0, &k, &e);
        if (rc != -1 || e.rule != cases[i].rule || e.offset != base + cases[i].off)
            fprintf(stderr, "  case '%s': rc %d rule %d offset %llu (%s)\n", cases[i].what, rc, e.rule,
                    (unsigned long long)e.offset, e.msg);
        CHECK(rc == -1 && e.rule == cases[i].rule && e.offset == base + cases[i].off);
    }
}

/* The no-malloc JSON emitter produces what jansson parses back. */
static void test_json_writer(void)
{
    char buf[512];
    mlz_jw w;
    mlz_jw_init(&w, buf, sizeof buf);
    mlz_jw_obj(&w, NULL);
    mlz_jw_str(&w, "kind", "sp\"o\\ol\n\x01");
    mlz_jw_u64(&w, "rate", 1ull << 62);   /* jansson stops at INT64_MAX */
    mlz_jw_i64(&w, "pid", -42);
    mlz_jw_bool(&w, "t", 1);
    mlz_jw_obj(&w, "functions");
    mlz_jw_idkey_str(&w, 0, "main");
    mlz_jw_idkey_str(&w, 17, "work");
    mlz_jw_end(&w);
    mlz_jw_obj(&w, "stack_traces");
    mlz_jw_idkey_arr(&w, 3);
    mlz_jw_obj(&w, NULL);
    mlz_jw_u64(&w, "line", 7);
    mlz_jw_end(&w);
    mlz_jw_end(&w);
    mlz_jw_end(&w);
    mlz_jw_arr(&w, "empty");
    mlz_jw_end(&w);
    mlz_jw_end(&w);
    REQUIRE(mlz_jw_ok(&w) == 0);
    json_error_t je;
    json_t *j = json_loadb(buf, w.len, 0, &je);
    REQUIRE(j);
    CHECK(!strcmp(json_string_value(json_object_get(j, "kind")), "sp\"o\\ol\n\x01"));
    CHECK(json_integer_value(json_object_get(j, "pid")) == -42);
    CHECK(!strcmp(json_string_value(json_object_get(json_object_get(j, "functions"), "17")), "work"));
    CHECK(json_array_size(json_object_get(json_object_get(j, "stack_traces"), "3")) == 1);
    json_decref(j);
    /* Overflow is remembered, never written past the buffer. */
    mlz_jw_init(&w, buf, 8);
    mlz_jw_obj(&w, NULL);
    mlz_jw_str(&w, "long", "xxxxxxxxxxxxxxxx");
    mlz_jw_end(&w);
    CHECK(mlz_jw_ok(&w) != 0 && w.len <= 8);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    snprintf(dir, sizeof dir, "/tmp/mlz-test-format-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(test_varint_examples);
    RUN(test_varint_len_every_width);
    RUN(test_varint_rejects);
    RUN(test_roundtrip_raw_and_lz4);
    RUN(test_lz4_smaller_and_seek);
    RUN(test_empty_tables_and_no_events);
    RUN(test_stack_lookup);
    RUN(test_never_overwrites_without_replace);
    RUN(test_every_truncation);
    RUN(test_plain_v1_truncation);
    RUN(test_bit_flips);
    RUN(test_each_rule);
    RUN(test_common_events_mid_buffer);
    RUN(test_json_writer);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    CHECK_EXIT();
}
