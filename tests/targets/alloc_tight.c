/*
 * alloc_tight.c - one thread that does nothing but malloc and free (16-143
 * B), checking each block's contents before it frees it: a stop of the
 * process almost always lands inside the allocator. Prints "ready", then
 * runs until killed; a corrupted block aborts it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define SLOTS 1024
#define MAGIC 0x5a17e5a17e5a17ull

int main(void)
{
    static uint64_t *slot[SLOTS];
    uint32_t x = 1;
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        x = x * 1103515245u + 12345u;
        uint32_t i = (x >> 8) % SLOTS;
        if (slot[i]) {
            if (slot[i][0] != i || slot[i][1] != MAGIC) {
                fprintf(stderr, "alloc_tight: block of slot %u corrupted\n", i);
                abort();
            }
            free(slot[i]);
            slot[i] = NULL;
        } else {
            slot[i] = malloc(16 + ((x >> 4) & 127));
            if (!slot[i]) abort();
            slot[i][0] = i;
            slot[i][1] = MAGIC;
        }
    }
}
