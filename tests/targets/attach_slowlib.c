/* attach_slowlib.c - a library whose constructor sleeps, so a thread that
 * dlopens it in a loop spends most of its time inside the loader. */
#include <unistd.h>
__attribute__((constructor)) static void slow(void) { usleep(20000); }
int mlzt_slow(void) { return 1; }
