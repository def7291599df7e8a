/*
 * fuzz_dumpalloc.c - libFuzzer target: any byte string given to the dumpalloc
 * importer must end in an imported trace or a reported error, never a crash,
 * a hang or a sanitizer report. Seeds: a memlyze export of the report
 * fixture and the hand-made files of tests/e2e/interop/dumpalloc.py, made
 * when `make fuzz` runs.
 */
#include "dumpalloc.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    imp_trace t;
    dumpalloc_info info;
    char err[256];
    if (imp_init(&t)) return 0;
    if (dumpalloc_parse(data, size, &t, &info, err, sizeof err) == 0) {
        /* what was imported must be consistent: every event's stack exists */
        for (size_t i = 0; i < t.nevents; i++)
            if (t.events[i].stack != UINT32_MAX && t.events[i].stack >= t.nstacks) __builtin_trap();
    } else if (!memchr(err, 0, sizeof err) || !err[0]) {
        __builtin_trap();   /* an error always says why */
    }
    dumpalloc_info_free(&info);
    imp_free(&t);
    return 0;
}
