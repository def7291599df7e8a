/*
 * fuzz_arc.c - libFuzzer target for the .arc reader (heapgraph/arc_read.c):
 * any byte string must parse or be rejected with a rule and an offset
 * inside the input, never crash, hang or trip a sanitizer. A stream that
 * parses is walked the way the heap graph walks it. Seeds: the hand-made
 * cases of tests/arc/make_cases.py, written when `make fuzz` runs.
 */
#include "arc.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    arc_file a;
    arc_error e;
    if (arc_parse(&a, buf, size, &e)) {
        if (strcmp(e.rule, "io") && e.offset > size) abort();   /* offsets lie inside the input */
    } else {
        uint64_t sum = 0;
        for (size_t i = 0; i < a.nobjs; i++) {
            const arc_obj *o = &a.objs[i];
            for (uint64_t w = 0; w < o->size / 8; w++) {
                if (!arc_tagged(o, w)) continue;
                uint64_t v;
                memcpy(&v, o->data + 8 * w, 8);
                if ((v & ~ARC_WEAK) && arc_find(&a, v) < 0) abort();   /* validated: must resolve */
            }
            for (uint64_t k = 0; k < o->size; k++) sum += o->data[k];
        }
        (void)sum;
    }
    arc_close(&a);
    return 0;
}
