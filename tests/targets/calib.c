/*
 * calib.c - known live bytes per site, for checking that sampled estimates
 * and their 95% intervals are calibrated. Every block stays live to exit.
 */
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
static void *volatile sink;   /* the store keeps malloc from being a tail call */
NOINLINE void site_tiny(void) { sink = malloc(16); }
NOINLINE void site_small(void) { sink = malloc(200); }
NOINLINE void site_mid(void) { sink = malloc(8192); }
NOINLINE void site_big(void) { sink = malloc(262144); }
NOINLINE void site_huge(void) { sink = malloc(1 << 20); }

int main(void)
{
    for (int i = 0; i < 20000; i++) site_tiny();
    for (int i = 0; i < 5000; i++) site_small();
    for (int i = 0; i < 500; i++) site_mid();
    for (int i = 0; i < 20; i++) site_big();
    for (int i = 0; i < 4; i++) site_huge();
    return 0;
}
