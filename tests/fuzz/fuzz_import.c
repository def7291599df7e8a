/*
 * fuzz_import.c - libFuzzer target for the importers: any byte string given
 * to the dumpalloc and the heaptrack importer must end in an imported trace
 * or a reported error, never a crash, a hang or a sanitizer report. Seeds:
 * memlyze exports of the report fixture in both formats and the hand-made
 * dumpalloc files of tests/e2e/interop/dumpalloc.py, made by `make fuzz`.
 */
#include "dumpalloc.h"
#include "import.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What was imported must be consistent: every event's stack exists. */
static void check_trace(const imp_trace *t)
{
    for (size_t i = 0; i < t->nevents; i++)
        if (t->events[i].stack != UINT32_MAX && t->events[i].stack >= t->nstacks) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    imp_trace t;
    dumpalloc_info info;
    char err[256];
    if (imp_init(&t)) return 0;
    if (dumpalloc_parse(data, size, &t, &info, err, sizeof err) == 0) check_trace(&t);
    else if (!memchr(err, 0, sizeof err) || !err[0]) __builtin_trap();   /* an error always says why */
    dumpalloc_info_free(&info);
    imp_free(&t);

    import_job *job = calloc(1, sizeof *job);
    if (!job || imp_init(&t)) return free(job), 0;
    job->data = data;
    job->len = size;
    job->t = &t;
    if (heaptrack_import(job) == 0) check_trace(&t);
    else if (!job->err[0]) __builtin_trap();
    for (size_t i = 0; i < sizeof job->owned / sizeof job->owned[0]; i++) free(job->owned[i]);
    free(job);
    imp_free(&t);
    return 0;
}
