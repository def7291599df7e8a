/*
 * dbg_badinfo.c - a process that exports a memlyze_info of another version
 * without a field table (a payload the scripts cannot describe): the
 * debugger scripts must refuse it with one line instead of misreading it.
 * Waits for standard input to close.
 */
#include "info.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

__attribute__((visibility("default"), used)) const struct {
    char magic[8];
    uint32_t version, size;
    uint64_t rest[40];
} memlyze_info = { MEMLYZE_INFO_MAGIC, MEMLYZE_INFO_VERSION + 1, 8 + 4 + 4 + 40 * 8, { 0 } };

int main(void)
{
    char buf[64];
    printf("ready\n");
    fflush(stdout);
    while (read(0, buf, sizeof buf) > 0) {}
    return 0;
}
