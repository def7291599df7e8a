/*
 * plugin.c - dlopen'ed plugins and their dependency, built several times:
 *   -DPLUG=plug   libplug.so   found only through the executable's RUNPATH
 *   -DPLUG=plug2  libplug2.so  RUNPATH $ORIGIN/deps, NEEDED libplugdep.so
 *   -DPLUG=plugdep libplugdep.so  (in plugins/deps)
 *   -DPLUG=plug3  libplug3.so  found only through libloader.so's RUNPATH
 *   -DPLUG=plug4  libplug4.so  found only through the executable's DT_RPATH
 * Each allocates through its own GOT.
 */
#include <stdlib.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)

#ifdef WITH_DEP
unsigned long plugdep_work(int n);
#endif

__attribute__((visibility("default"))) unsigned long CAT(PLUG, _work)(int n)
{
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        unsigned char *p = malloc((size_t)i + 1);
        __asm__ volatile("" : : "r"(p) : "memory");
        p[0] = 3;
        sum += p[0];
        free(p);
    }
#ifdef WITH_DEP
    sum += plugdep_work(n);
#endif
    return sum;
}
