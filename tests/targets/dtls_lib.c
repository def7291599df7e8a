/*
 * dtls_lib.c - a library for dlopen whose __thread variable alone holds a
 * heap object (heapgraph.sh). ld.so allocates a dlopen'd module's TLS block
 * on first use, through its own pointer to malloc.
 */
#include <stdlib.h>

__thread void *dtls_held;   /* not static: the store must stay */

__attribute__((noinline)) void *dtls_obj(void) { return calloc(1, 176); }

void dtls_set(void) { dtls_held = dtls_obj(); }
