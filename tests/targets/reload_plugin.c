/*
 * reload_plugin.c - the two plugins of reload.c, built twice: with
 * -DSECOND the allocating function has another name, its blocks another
 * size, and a constructor keeps one more of them. Same code size both ways, so the
 * loader reuses the first one's addresses for the second.
 */
#include <stdlib.h>

#ifdef SECOND
#define SITE second_plugin_site
#define SIZE 2000
#else
#define SITE first_plugin_site
#define SIZE 1000
#endif

__attribute__((noinline)) static void *SITE(void)
{
    void *p = malloc(SIZE);
    __asm__ volatile("" ::: "memory");
    return p;
}

#ifdef SECOND
static void *volatile at_load;
__attribute__((constructor)) static void loaded(void) { at_load = SITE(); }
#endif

void *plugin_alloc(void) { return SITE(); }
