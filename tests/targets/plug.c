/* plug.c - a plugin dlopen'ed after profiling started, found only through
 * the main program's RUNPATH ($ORIGIN/plugins). Its allocations must be seen. */
#include <stdlib.h>

static void *held[100];

__attribute__((noinline)) static void *plug_site(size_t n) { return malloc(n); }

void plug_alloc(int n)
{
    for (int i = 0; i < n && i < 100; i++) held[i] = plug_site(2000);
}
