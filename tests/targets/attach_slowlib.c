/* attach_slowlib.c - a library whose constructor sleeps (20 ms, or
 * MLZT_CTOR_SLEEP_MS), so a thread that dlopens it in a loop spends most of
 * its time inside the loader, holding the loader's lock. */
#include <stdlib.h>
#include <time.h>
__attribute__((constructor)) static void slow(void)
{
    const char *e = getenv("MLZT_CTOR_SLEEP_MS");
    long ms = e ? atol(e) : 20;
    struct timespec d = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&d, NULL);
}
int mlzt_slow(void) { return 1; }
