/* attach_ctorwait.c - a plugin whose constructor, run under the loader lock,
 * waits for the main thread to tick 20 more times (mlzt_main_ticks, in the
 * executable). Borrowing the main thread for a dlopen while this runs would
 * deadlock the process: the constructor waits for main, main for the lock. */
#include <stdatomic.h>
#include <time.h>
extern atomic_long mlzt_main_ticks;
__attribute__((constructor)) static void wait_for_main(void)
{
    long until = atomic_load(&mlzt_main_ticks) + 20;
    while (atomic_load(&mlzt_main_ticks) < until) {
        struct timespec d = { 0, 200000 };
        nanosleep(&d, NULL);
    }
}
int mlzt_ctorwait(void) { return 1; }
