/* bsym_site.c - an allocation site inside the -Bsymbolic library that also
 * defines the malloc family (own_alloc.c): its call is direct, no GOT slot. */
#include <stdlib.h>
#include <string.h>

static void *kept[7];

__attribute__((noinline)) void lib_site(void)
{
    for (int i = 0; i < 7; i++) {
        kept[i] = malloc(3000);
        memset(kept[i], 'b', 3000);
    }
}
