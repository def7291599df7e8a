/* dlchurn_lib.c - the libraries dlchurn.c loads (built as libchurnN.so and
 * libkeepN.so, N from -DID: each its own file, so each load is new). */
#include <stdlib.h>

__attribute__((noinline)) void *lib_alloc(size_t n) { return malloc(n + ID); }
void *lib_keep(size_t n) { return lib_alloc(n); }
void lib_churn(int k)
{
    for (int i = 0; i < k; i++) free(lib_alloc(32 + (size_t)i % 300));
}
