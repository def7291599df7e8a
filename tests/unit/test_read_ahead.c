/*
 * test_read_ahead.c - the reader's read-ahead of split blocks (a second
 * thread decodes block k+1 while the caller reads block k, and a caller
 * that finds it still busy decodes block k+2 meanwhile): it runs, it
 * hands out exactly the events of the file in order (event by event and in
 * blocks), it survives seeks, closes in mid-stream and damaged blocks with
 * the same error a plain read gives. And the writer's mirror image (a
 * second thread encodes block k while the caller fills block k+1): it runs
 * and writes the same bytes as one thread. Also built with ThreadSanitizer.
 */
#include "../check.h"
#include "mlz_format.h"
#include "varint.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#define BLOCKS 20
#define PER_BLOCK 2000
#define EVENTS (BLOCKS * PER_BLOCK)

static const char META[] =
    "{\"stack_traces\":{\"0\":[{\"file_id\":0,\"line\":1,\"func_id\":0}],"
    "\"1\":[{\"file_id\":0,\"line\":2,\"func_id\":0}]},"
    "\"files\":{\"0\":\"/src/a.c\"},\"functions\":{\"0\":\"main\"},\"kind\":\"trace\",\"rate\":1}";

static char dir[64], path[128];
static uint8_t wbuf[1 << 20], zbuf[MLZ_LZ4_BOUND];

/* The events as written, for comparison. */
static struct { uint8_t type; uint64_t t, addr, size; } want[EVENTS];

static int threads_now(void);
static int g_threads_writing;   /* threads while the writer was in its second block */

static void write_file(const char *p)
{
    static mlz_writer w;
    mlz_writer_opts o = { .start_us = 1700000000000000ull, .meta = META, .meta_len = sizeof META - 1,
                          .flags = MLZ_FLAG_SPLIT, .replace = 1, .buf = wbuf, .buf_size = sizeof wbuf,
                          .zbuf = zbuf, .zbuf_size = sizeof zbuf };
    if (mlz_writer_open(&w, p, &o)) return;
    uint64_t t = o.start_us, s = 11, live[128] = { 0 };
    for (int i = 0; i < EVENTS; i++) {
        uint64_t r = check_rng(&s);
        t += r % 3;
        if (i && i % PER_BLOCK == 0) mlz_writer_end_block(&w);
        if (i == PER_BLOCK + 1) g_threads_writing = threads_now();
        unsigned k = (r >> 8) & 127;
        want[i].t = t;
        if (live[k]) {
            mlz_writer_free(&w, t, live[k]);
            want[i].type = MLZ_EV_FREE;
            want[i].addr = live[k];
            live[k] = 0;
        } else {
            live[k] = 0x7f0000000000ull + ((r >> 20) & 0xffff0);
            want[i].type = MLZ_EV_ALLOC;
            want[i].addr = live[k];
            want[i].size = 16 + ((r >> 40) & 1023);
            mlz_writer_alloc(&w, t, live[k], want[i].size, (r >> 60) & 1, 1);
        }
    }
    mlz_writer_close(&w);
}

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static int same_event(const mlz_event *ev, int i)
{
    return ev->type == want[i].type && ev->time_us == want[i].t && ev->addr == want[i].addr &&
           (ev->type != MLZ_EV_ALLOC || ev->size == want[i].size);
}

static void test_a_second_thread_decodes(void)
{
    cpu_set_t all, one;
    REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
    if (CPU_COUNT(&all) < 2) { printf("SKIP: test_a_second_thread_decodes (one CPU)\n"); return; }
    mlz_error e;
    mlz_reader *r = mlz_reader_open(path, 0, &e);
    REQUIRE(r);
    int before = threads_now();
    mlz_event ev;
    CHECK(mlz_reader_next(r, &ev, &e) == 1);
    int during = threads_now();
    CHECK(during > before);      /* (ThreadSanitizer may start one of its own) */
    mlz_reader_close(r);
    CHECK(threads_now() == during - 1);

    /* Allowed one CPU, the reader keeps to one thread. */
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) { CPU_SET(c, &one); break; }
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    before = threads_now();
    r = mlz_reader_open(path, 0, &e);
    REQUIRE(r);
    CHECK(mlz_reader_next(r, &ev, &e) == 1);
    CHECK(threads_now() == before);
    mlz_reader_close(r);
    sched_setaffinity(0, sizeof all, &all);
}



/* The writer: with two CPUs a second thread encodes while blocks fill (and
 * is gone after close); with one, none. Same file and index either way. */
static void test_writer_second_thread(void)
{
    cpu_set_t all, one;
    REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
    if (CPU_COUNT(&all) < 2) { printf("SKIP: test_writer_second_thread (one CPU)\n"); return; }
    char p1[160], p2[160], i1[168], i2[168];
    snprintf(p1, sizeof p1, "%s/one.mlyze", dir);
    snprintf(p2, sizeof p2, "%s/two.mlyze", dir);
    snprintf(i1, sizeof i1, "%s.idx", p1);
    snprintf(i2, sizeof i2, "%s.idx", p2);
    int before = threads_now();
    write_file(p2);
    CHECK(g_threads_writing > before);
    CHECK(threads_now() == before);

    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) { CPU_SET(c, &one); break; }
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    write_file(p1);
    CHECK(g_threads_writing == before);
    sched_setaffinity(0, sizeof all, &all);
    CHECK(check_same_file(p1, p2) && check_same_file(i1, i2) && check_same_file(p1, path));
}

static void test_every_event_in_order(void)
{
    mlz_error e;
    mlz_reader *r = mlz_reader_open(path, 0, &e);
    REQUIRE(r);
    mlz_event ev;
    int i = 0, bad = 0, rc;
    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) {
        if (i >= EVENTS || !same_event(&ev, i)) bad++;
        i++;
    }
    CHECK(rc == 0 && i == EVENTS && bad == 0);
    mlz_reader_close(r);

    /* Whole blocks: the same events, as columns. */
    r = mlz_reader_open(path, 0, &e);
    REQUIRE(r);
    mlz_block_view b;
    i = bad = 0;
    int blocks = 0;
    while ((rc = mlz_reader_next_block(r, &b, &e)) == 1) {
        uint64_t t = b.base_us;
        uint32_t a = 0, f = 0;
        for (uint32_t k = 0; k < b.n; k++, i++) {
            t += b.delta[k];
            uint64_t addr = b.kind[k] == MLZ_EV_ALLOC ? b.a_addr[a++] : b.f_addr[f++];
            if (i >= EVENTS || b.kind[k] != want[i].type || t != want[i].t || addr != want[i].addr) bad++;
        }
        blocks++;
    }
    CHECK(rc == 0 && i == EVENTS && bad == 0 && blocks == BLOCKS);
    mlz_reader_close(r);
}

/* A caller with nothing to do per block finds the thread still decoding
 * the block it wants: it decodes the next one itself meanwhile, so both
 * CPUs decode. The blocks still come out whole and in order. Timing
 * decides how often; over ten passes of 20 blocks it happens (each pass
 * has about ten chances). With one CPU, never. */
static void test_caller_decodes_beside(void)
{
    cpu_set_t all, one;
    REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
    if (CPU_COUNT(&all) < 2) { printf("SKIP: test_caller_decodes_beside (one CPU)\n"); return; }
    uint64_t beside = 0;
    int bad = 0;
    for (int pass = 0; pass < 10 && !beside; pass++) {
        mlz_error e;
        mlz_reader *r = mlz_reader_open(path, 0, &e);
        REQUIRE(r);
        mlz_block_view b;
        int i = 0, rc;
        while ((rc = mlz_reader_next_block(r, &b, &e)) == 1) {
            uint32_t a = 0, f = 0;
            for (uint32_t k = 0; k < b.n; k++, i++) {
                uint64_t addr = b.kind[k] == MLZ_EV_ALLOC ? b.a_addr[a++] : b.f_addr[f++];
                if (i >= EVENTS || b.kind[k] != want[i].type || addr != want[i].addr) bad++;
            }
        }
        if (rc != 0 || i != EVENTS) bad++;
        beside += mlz_reader_blocks_beside(r);
        mlz_reader_close(r);
    }
    CHECK(beside > 0 && bad == 0);

    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) { CPU_SET(c, &one); break; }
    REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
    mlz_error e;
    mlz_reader *r = mlz_reader_open(path, 0, &e);
    REQUIRE(r);
    mlz_block_view b;
    while (mlz_reader_next_block(r, &b, &e) == 1) {}
    CHECK(mlz_reader_blocks_beside(r) == 0);
    mlz_reader_close(r);
    sched_setaffinity(0, sizeof all, &all);
}

/* Seeks in every direction, after reading part of a block: the block read
 * ahead is dropped, the events after the seek are the file's. */
static void test_seeks(void)
{
    mlz_error e;
    mlz_reader *r = mlz_reader_open(path, 0, &e);
    REQUIRE(r);
    REQUIRE(mlz_reader_has_index(r));
    uint64_t s = 5;
    int bad = 0;
    for (int round = 0; round < 60; round++) {
        int target = (int)(check_rng(&s) % EVENTS);
        if (mlz_reader_seek_time(r, want[target].t, &e)) { bad++; continue; }
        int i = 0;
        while (i < EVENTS && want[i].t < want[target].t) i++;
        mlz_event ev;
        for (int k = 0; k < 2500 && i < EVENTS; k++, i++)   /* across a block boundary */
            if (mlz_reader_next(r, &ev, &e) != 1 || !same_event(&ev, i)) { bad++; break; }
    }
    CHECK(bad == 0);
    mlz_reader_close(r);
}

/* Closing while the thread decodes, many times over. */
static void test_close_mid_stream(void)
{
    int ok = 1;
    for (int k = 0; k < 200; k++) {
        mlz_error e;
        mlz_reader *r = mlz_reader_open(path, 0, &e);
        if (!r) { ok = 0; break; }
        mlz_event ev;
        for (int i = 0; i < k * 37 % (3 * PER_BLOCK); i++)
            if (mlz_reader_next(r, &ev, &e) != 1) ok = 0;
        mlz_reader_close(r);
    }
    CHECK(ok);
}

/* A damaged block 10: blocks 0..9 are handed out whole, then the error the
 * reader gives without read-ahead (the block's offset, its rule). */
static void test_damage_found_in_order(void)
{
    mlz_error e;
    mlz_reader *r = mlz_reader_open(path, 0, &e);
    REQUIRE(r);
    mlz_block_view b;
    for (int k = 0; k < 10; k++) REQUIRE(mlz_reader_next_block(r, &b, &e) == 1);
    mlz_reader_close(r);
    FILE *f = fopen(path, "rb");
    REQUIRE(f);
    static uint8_t bytes[4 << 20];
    size_t n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    /* Block 10's offset, from the index. */
    char ipath[160];
    snprintf(ipath, sizeof ipath, "%s.idx", path);
    f = fopen(ipath, "rb");
    REQUIRE(f);
    uint8_t ent[32];
    REQUIRE(fseek(f, MLZ_INDEX_HEADER_SIZE + 10 * 32, SEEK_SET) == 0 && fread(ent, 1, 32, f) == 32);
    fclose(f);
    uint64_t off = mlz_get_u64(ent);
    REQUIRE(off + 100 < n);
    bytes[off + 60] ^= 0x10;
    for (int by_block = 0; by_block < 2; by_block++) {
        r = mlz_reader_open_mem(bytes, n, MLZ_READ_NO_INDEX, &e);
        REQUIRE(r);
        int got = 0, rc;
        if (by_block) {
            while ((rc = mlz_reader_next_block(r, &b, &e)) == 1) got += (int)b.n;
        } else {
            mlz_event ev;
            while ((rc = mlz_reader_next(r, &ev, &e)) == 1) got++;
        }
        CHECK(rc == -1 && got == 10 * PER_BLOCK && e.offset == off && e.rule == MLZ_RULE_SIZE);
        mlz_reader_close(r);
    }
}

/* Whole blocks are not handed out from the middle of one. */
static void test_no_blocks_mid_block(void)
{
    mlz_error e;
    mlz_reader *r = mlz_reader_open(path, 0, &e);
    REQUIRE(r);
    mlz_event ev;
    mlz_block_view b;
    CHECK(mlz_reader_next(r, &ev, &e) == 1);
    CHECK(mlz_reader_next_block(r, &b, &e) == -1 && strstr(e.msg, "middle"));
    mlz_reader_close(r);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    snprintf(dir, sizeof dir, "/tmp/mlz-test-ahead-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/t.mlyze", dir);
    write_file(path);
    RUN(test_a_second_thread_decodes);
    RUN(test_writer_second_thread);
    RUN(test_every_event_in_order);
    RUN(test_caller_decodes_beside);
    RUN(test_seeks);
    RUN(test_close_mid_stream);
    RUN(test_damage_found_in_order);
    RUN(test_no_blocks_mid_block);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    CHECK_EXIT();
}
