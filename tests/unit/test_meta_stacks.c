/*
 * test_meta_stacks.c - the fast path for the metadata's stack_traces: it
 * must give exactly what jansson's tree gives (stacks, frames, and the
 * first error with its message), and decline, leaving the document to
 * jansson, on every shape it does not take. The jansson path is forced by
 * spelling the key "stack_traces" with an escape, which jansson reads as
 * the same key and the fast path's scan does not recognise.
 */
#include "../check.h"
#include "meta_stacks.h"
#include "mlz_format.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char HEAD[] = "{\"kind\":\"trace\",\"rate\":1,\"modules\":[{\"path\":\"/a.so\",\"base\":4096},{\"path\":\"/b.so\",\"base\":8192}],"
                           "\"files\":{\"0\":\"/src/a.c\",\"1\":\"/src/b.c\"},"
                           "\"functions\":{\"0\":\"main\",\"1\":\"f\",\"2\":\"g\"},";

/* The document HEAD + "stack_traces":STACKS + "}", with the key plain or
 * escaped (escape = 1 forces jansson's path). */
static char *doc(const char *stacks, int escape)
{
    size_t n = sizeof HEAD + strlen(stacks) + 64;
    char *d = malloc(n);
    snprintf(d, n, "%s\"%s\":%s}", HEAD, escape ? "stack\\u005ftraces" : "stack_traces", stacks);
    return d;
}

/* Parses stacks both ways: 1 if both succeed with equal stacks, 0 if both
 * fail with the same message, -1 if they differ. */
static int both_ways(const char *stacks)
{
    char *a = doc(stacks, 0), *b = doc(stacks, 1);
    mlz_meta ma, mb;
    mlz_error ea, eb;
    int ra = mlz_meta_parse(&ma, a, strlen(a), &ea), rb = mlz_meta_parse(&mb, b, strlen(b), &eb);
    int same = -1;
    if (ra && rb) {
        same = !strcmp(ea.msg, eb.msg) && ea.rule == eb.rule ? 0 : -1;
        if (same) fprintf(stderr, "  fast: %s\n  tree: %s\n", ea.msg, eb.msg);
    } else if (!ra && !rb && ma.nstacks == mb.nstacks) {
        same = 1;
        for (size_t i = 0; i < ma.nstacks && same == 1; i++) {
            const mlz_stack *x = &ma.stacks[i], *y = &mb.stacks[i];
            if (x->id != y->id || x->depth != y->depth) same = -1;
            for (uint32_t j = 0; same == 1 && j < x->depth; j++)
                if (memcmp(&x->frames[j], &y->frames[j], sizeof x->frames[j])) same = -1;
        }
    }
    mlz_meta_free(&ma);
    mlz_meta_free(&mb);
    free(a);
    free(b);
    return same;
}

static int fast_takes(const char *stacks)
{
    mlz_raw_stacks s;
    int rc = mlz_meta_parse_stacks(stacks, strlen(stacks), &s);
    if (!rc) mlz_raw_stacks_free(&s);
    return rc == 0;
}

static void test_same_stacks_both_ways(void)
{
    const char *ok[] = {
        "{}",
        "{\"1\":[]}",
        "{\"1\":[{\"file_id\":0,\"line\":42,\"func_id\":0}]}",
        "{\"7\":[{\"file_id\":1,\"line\":0,\"func_id\":2,\"module\":1,\"addr\":1045198,\"inline\":true},"
        " {\"func_id\":1, \"line\":4294967295, \"file_id\":0, \"inline\":false}],\n"
        " \"2\" : [ { \"file_id\" : 0 , \"line\" : 1 , \"func_id\" : 0 } ] ,\"18446744073709551615\":[]}",
        "{\"3\":[{\"file_id\":0,\"line\":1,\"func_id\":0,\"addr\":999999999999999999}]}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        CHECK(fast_takes(ok[i]));
        CHECK(both_ways(ok[i]) == 1);
    }
    /* The reader takes the fast path: the tree it keeps has an empty
     * stack_traces, the stacks themselves are in m.stacks. */
    char *d = doc(ok[3], 0);
    mlz_meta m;
    mlz_error e;
    REQUIRE(!mlz_meta_parse(&m, d, strlen(d), &e));
    CHECK(m.nstacks == 3 && json_object_size(json_object_get(m.root, "stack_traces")) == 0);
    CHECK(mlz_meta_stack(&m, 7) && mlz_meta_stack(&m, 7)->depth == 2 && mlz_meta_stack(&m, 7)->frames[0].inlined);
    mlz_meta_free(&m);
    free(d);
}

/* Errors found after parsing (ids not in the tables) come out the same. */
static void test_same_first_error(void)
{
    const char *bad[] = {
        "{\"1\":[{\"file_id\":5,\"line\":1,\"func_id\":0}]}",
        "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0}],\"2\":[{\"file_id\":0,\"line\":1,\"func_id\":9}]}",
        "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0,\"module\":2}]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(fast_takes(bad[i]));
        CHECK(both_ways(bad[i]) == 0);
        char *d = doc(bad[i], 0);
        mlz_meta m;
        mlz_error e;
        CHECK(mlz_meta_parse(&m, d, strlen(d), &e) == -1 && e.rule == MLZ_RULE_REFERENCE && strstr(e.msg, "which is not in"));
        mlz_meta_free(&m);
        free(d);
    }
}

/* Shapes the fast path declines: the outcome is then jansson's alone. */
static void test_declines_the_rest(void)
{
    const char *other[] = {
        "{\"01\":[]}", "{\"x\":[]}", "{\"\":[]}", "{\"18446744073709551616\":[]}",
        "{\"1\":[],\"1\":[]}",                                   /* duplicate ids */
        "{\"1\":[] \"2\":[]}", "{\"1\":[],}", "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0},]}",
        "{\"1\":[{\"file_id\":0 \"line\":1,\"func_id\":0}]}",
        "{\"1\":[{\"file_id\":0,\"line\":1}]}",                  /* func_id missing */
        "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0,\"line\":2}]}",
        "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0,\"extra\":1}]}",
        "{\"1\":[{\"file\\u005fid\":0,\"line\":1,\"func_id\":0}]}",
        "{\"1\":[{\"file_id\":-1,\"line\":1,\"func_id\":0}]}",
        "{\"1\":[{\"file_id\":0.5,\"line\":1,\"func_id\":0}]}",
        "{\"1\":[{\"file_id\":1e2,\"line\":1,\"func_id\":0}]}",
        "{\"1\":[{\"file_id\":01,\"line\":1,\"func_id\":0}]}",
        "{\"1\":[{\"file_id\":0,\"line\":4294967296,\"func_id\":0}]}",
        "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":1000000000000000000}]}",   /* 19 digits */
        "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0,\"inline\":1}]}",
        "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0,\"inline\":truex}]}",
        "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0,\"module\":null}]}",
        "{\"1\":[{\"file_id\":0,\"line\":1,\"func_id\":0}]", "{\"1\":{}}", "[]", "{\"1\":[1]}",
    };
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        if (fast_takes(other[i])) fprintf(stderr, "  taken: %s\n", other[i]);
        CHECK(!fast_takes(other[i]));
        CHECK(both_ways(other[i]) >= 0);
    }
}

/* The scan for the span: nested values, strings holding braces and
 * quotes, and the key found only at the top level. */
static void test_find_span(void)
{
    const char *d = "{\"a\":{\"stack_traces\":[1,{\"x\":\"}\\\"\"}]},\"b\":\"stack_traces\","
                    "\"stack_traces\" : {\"1\":[]} , \"c\":[true,false,null,-1.5e3]}";
    size_t b = 0, e = 0;
    mlz_raw_stacks s;
    REQUIRE(!mlz_meta_fast_stacks(d, strlen(d), &b, &e, &s));
    CHECK(e - b == 8 && !memcmp(d + b, "{\"1\":[]}", 8) && s.n == 1 && s.id[0] == 1);
    mlz_raw_stacks_free(&s);
    const char *twice = "{\"stack_traces\":{},\"stack_traces\":{}}";
    CHECK(mlz_meta_fast_stacks(twice, strlen(twice), &b, &e, &s) == -1 && !s.id);
    const char *none = "{\"files\":{}}";
    CHECK(mlz_meta_fast_stacks(none, strlen(none), &b, &e, &s) == -1);
    const char *cut = "{\"a\":\"unterminated";
    CHECK(mlz_meta_fast_stacks(cut, strlen(cut), &b, &e, &s) == -1);
    const char *bad = "{\"stack_traces\":{\"1\":[{}]}}";   /* a frame without its ids */
    CHECK(mlz_meta_fast_stacks(bad, strlen(bad), &b, &e, &s) == -1 && !s.frames);
    /* The rest of the document is jansson's to judge: broken after the
     * span, it is still refused, with jansson's message. */
    const char *broken = "{\"stack_traces\":{},\"files\":{},\"functions\":{},}";
    mlz_meta m;
    mlz_error err;
    CHECK(mlz_meta_parse(&m, broken, strlen(broken), &err) == -1 && strstr(err.msg, "not valid JSON"));
    mlz_meta_free(&m);
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    RUN(test_same_stacks_both_ways);
    RUN(test_same_first_error);
    RUN(test_declines_the_rest);
    RUN(test_find_span);
    CHECK_EXIT();
}
