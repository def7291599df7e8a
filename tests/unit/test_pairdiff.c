/*
 * test_pairdiff.c - the paired diff estimator (report/pairdiff.c) on
 * hand-made snapshot pairs: shared samples cancel, born and died ones
 * count, an address reused by another object is a death and a birth, a
 * sample named differently in the two files (gdb's snapshot vs memlyze's)
 * is still one sample, and
 * the interval is exact zero with no change, normal with many samples,
 * and skewed upwards with few.
 */
#include "../check.h"
#include "../../report/pairdiff.h"
#include "sampler.h"

#include <math.h>
#include <unistd.h>

#define RATE 524288

typedef struct smp { uint64_t addr, t, size, stack, thread; } smp;   /* thread 0: 1 */

/* The name snap() gives stack 1's function: gdb names main "main()". */
static const char *name_f = "f";

static char dir[] = "/tmp/mlz-pairdiff.XXXXXX";

/* A snapshot file of these samples (stacks 1 = f, 2 = g). */
static const char *snap(const char *name, const char *session, int pid, uint64_t rate, const smp *s, size_t n)
{
    static char path[128];
    static uint8_t buf[MLZ_BLOCK_SIZE];
    static mlz_writer w;
    char meta[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int ml = snprintf(meta, sizeof meta,
                      "{\"kind\":\"snapshot\",\"rate\":%llu,\"pid\":%d%s%s%s,\"stack_traces\":{"
                      "\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0}],\"2\":[{\"file_id\":0,\"line\":2,\"func_id\":1}]},"
                      "\"files\":{\"0\":\"t.c\"},\"functions\":{\"0\":\"%s\",\"1\":\"g\"}}",
                      (unsigned long long)rate, pid, session ? ",\"session\":\"" : "", session ? session : "",
                      session ? "\"" : "", name_f);
    mlz_writer_opts o = { .start_us = 1000, .meta = meta, .meta_len = (size_t)ml, .replace = 1,
                          .buf = buf, .buf_size = sizeof buf };
    int rc = mlz_writer_open(&w, path, &o);
    for (size_t i = 0; !rc && i < n; i++) rc = mlz_writer_alloc(&w, 1000 + s[i].t, s[i].addr, s[i].size, s[i].stack, (uint16_t)(s[i].thread ? s[i].thread : 1));
    if (!rc) rc = mlz_writer_close(&w);
    return rc ? NULL : path;
}

typedef struct side { mlz_reader *r; prof p; } side;

static int load(side *s, const char *path)
{
    mlz_error e = { 0 };
    if (!path || !(s->r = mlz_reader_open(path, 0, &e))) return -1;
    if (prof_replay(&s->p, s->r, UINT64_MAX, &e)) { mlz_reader_close(s->r); return -1; }
    return 0;
}

static void unload(side *s)
{
    prof_free(&s->p);
    mlz_reader_close(s->r);
}

/* Collects the changes per stack id (sites 0 and 1 are stacks 1 and 2). */
typedef struct seen {
    pd_growth g[2];
    int born, died;
    uint64_t born_addr[8], died_addr[8];
} seen;

static void on_change(void *arg, const prof *p, const addr_obj *o, int sign)
{
    seen *s = arg;
    pd_add(&s->g[o->site], mlz_weight_bytes(o->size, p->rate), mlz_var_bytes(o->size, p->rate), sign);
    if (sign > 0 && s->born < 8) s->born_addr[s->born++] = o->addr;
    if (sign < 0 && s->died < 8) s->died_addr[s->died++] = o->addr;
}

static int pair(const smp *a, size_t na, const smp *b, size_t nb, seen *out)
{
    side sa, sb;
    memset(out, 0, sizeof *out);
    if (load(&sa, snap("a.mlyze", "7.1", 7, RATE, a, na))) return -1;
    if (load(&sb, snap("b.mlyze", "7.1", 7, RATE, b, nb))) { unload(&sa); return -1; }
    pd_changes(&sa.p, &sb.p, on_change, out);
    unload(&sa);
    unload(&sb);
    return 0;
}

static void test_shared_born_died(void)
{
    smp a[] = { { 0x1000, 10, 100, 1, 0 }, { 0x2000, 20, 5000, 2, 0 }, { 0x4000, 25, 70000, 1, 0 } };
    smp b[] = { { 0x1000, 10, 100, 1, 0 }, { 0x4000, 25, 70000, 1, 0 }, { 0x3000, 30, 200, 1, 0 } };
    seen s;
    REQUIRE(pair(a, 3, b, 3, &s) == 0);
    CHECK(s.born == 1 && s.born_addr[0] == 0x3000);
    CHECK(s.died == 1 && s.died_addr[0] == 0x2000);
    /* f: +200 B born only; g: -5000 B died only; the shared ones add nothing. */
    CHECK(s.g[0].born.value == mlz_weight_bytes(200, RATE) && s.g[0].died.value == 0);
    CHECK(s.g[0].born.var == mlz_var_bytes(200, RATE));
    CHECK(s.g[1].died.value == mlz_weight_bytes(5000, RATE) && s.g[1].born.value == 0);
    CHECK(pd_value(&s.g[1]) == -mlz_weight_bytes(5000, RATE));
}

static void test_unchanged_is_exactly_zero(void)
{
    smp a[] = { { 0x1000, 10, 100, 1, 0 }, { 0x2000, 20, 5000, 2, 0 } };
    seen s;
    REQUIRE(pair(a, 2, a, 2, &s) == 0);
    CHECK(s.born == 0 && s.died == 0);
    double lo = 1, hi = 1;
    pd_interval95(&s.g[0], &lo, &hi);
    CHECK(pd_value(&s.g[0]) == 0 && lo == 0 && hi == 0);
}

static void test_address_reused(void)
{
    /* The object at 0x1000 was freed and another took its address: same
     * size and site, later birth. Also: same address and time, another size
     * or another thread - other objects too. */
    smp a[] = { { 0x1000, 10, 100, 1, 0 }, { 0x2000, 20, 300, 1, 0 }, { 0x5000, 20, 300, 1, 3 } };
    smp b[] = { { 0x1000, 40, 100, 1, 0 }, { 0x2000, 20, 301, 1, 0 }, { 0x5000, 20, 300, 1, 4 } };
    seen s;
    REQUIRE(pair(a, 3, b, 3, &s) == 0);
    CHECK(s.born == 3 && s.died == 3);
    /* The value may cancel, the uncertainty does not. */
    double lo, hi;
    pd_interval95(&s.g[0], &lo, &hi);
    CHECK(s.g[0].born.var > 0 && s.g[0].died.var > 0);
    CHECK(lo < pd_value(&s.g[0]) && hi > pd_value(&s.g[0]));
}

/* The gdb script names some frames unlike memlyze snapshot (main() for
 * main, relative file names): its snapshot of an unchanged heap still
 * pairs every sample with memlyze's. */
static void test_named_differently(void)
{
    smp a[] = { { 0x1000, 10, 100, 1, 0 }, { 0x2000, 20, 5000, 2, 0 } };
    side sa, sb;
    seen s;
    memset(&s, 0, sizeof s);
    REQUIRE(load(&sa, snap("a.mlyze", "7.1", 7, RATE, a, 2)) == 0);
    name_f = "f()";
    int rc = load(&sb, snap("b.mlyze", "7.1", 7, RATE, a, 2));
    name_f = "f";
    if (rc) unload(&sa);
    REQUIRE(rc == 0);
    CHECK(sa.p.nsites == 2 && sb.p.nsites == 2);
    pd_changes(&sa.p, &sb.p, on_change, &s);
    CHECK(s.born == 0 && s.died == 0);
    unload(&sa);
    unload(&sb);
}

static void test_sessions(void)
{
    smp a[] = { { 0x1000, 10, 100, 1, 0 } };
    side x, y;
    const char *why = NULL;
    REQUIRE(load(&x, snap("x.mlyze", "7.1", 7, RATE, a, 1)) == 0);
    struct { const char *session; int pid; uint64_t rate; int same; const char *why; } cases[] = {
        { "7.1", 7, RATE, 1, NULL },
        { "7.2", 7, RATE, 0, "different attach sessions" },
        { "8.1", 8, RATE, 0, "different processes" },
        { NULL, 7, RATE, 0, "no sampling session recorded" },
        { "7.1", 7, 4096, 0, "different sampling rates" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        REQUIRE(load(&y, snap("y.mlyze", cases[i].session, cases[i].pid, cases[i].rate, a, 1)) == 0);
        why = NULL;
        CHECK(pd_same_session(x.p.meta, y.p.meta, &why) == cases[i].same);
        CHECK(cases[i].same ? why == NULL : why && !strcmp(why, cases[i].why));
        unload(&y);
    }
    unload(&x);
}

static void test_interval(void)
{
    double lo, hi;
    /* Exact mode: no variance, no width. */
    pd_growth g = { { 4096, 0 }, { 1024, 0 } };
    pd_interval95(&g, &lo, &hi);
    CHECK(lo == 3072 && hi == 3072);
    /* One small sample: about one rate's worth, interval skewed upwards
     * (a 4-sample truth lies inside), never below zero. */
    g = (pd_growth){ { mlz_weight_bytes(64, RATE), mlz_var_bytes(64, RATE) }, { 0, 0 } };
    pd_interval95(&g, &lo, &hi);
    double v = pd_value(&g);
    CHECK(lo >= 0 && lo < v && hi > v);
    CHECK(hi - v > v - lo);
    CHECK(hi > 4.0 * RATE);
    /* Many samples: the normal interval, born and died alike. */
    pd_growth born = { { 0, 0 }, { 0, 0 } };
    for (int i = 0; i < 20000; i++) pd_add(&born, mlz_weight_bytes(64, RATE), mlz_var_bytes(64, RATE), i % 3 ? 1 : -1);
    pd_interval95(&born, &lo, &hi);
    double sd = sqrt(born.born.var + born.died.var), c = pd_value(&born);
    CHECK(fabs((hi - c) / (1.96 * sd) - 1) < 0.01 && fabs((c - lo) / (1.96 * sd) - 1) < 0.01);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    RUN(test_shared_born_died);
    RUN(test_unchanged_is_exactly_zero);
    RUN(test_address_reused);
    RUN(test_named_differently);
    RUN(test_sessions);
    RUN(test_interval);
    const char *names[] = { "a.mlyze", "b.mlyze", "x.mlyze", "y.mlyze" };
    for (size_t i = 0; i < 4; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    CHECK_EXIT();
}
