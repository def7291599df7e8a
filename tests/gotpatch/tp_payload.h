/* tp_payload.h - what target programs call in the test payload libtp.so. */
#ifndef TP_PAYLOAD_H
#define TP_PAYLOAD_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { TP_MALLOC, TP_CALLOC, TP_REALLOC, TP_FREE, TP_POSIX_MEMALIGN, TP_ALIGNED_ALLOC, TP_MEMALIGN,
       TP_VALLOC, TP_PVALLOC, TP_REALLOCARRAY, TP_DLOPEN, TP_DLCLOSE, TP_N };

typedef struct tp_detach_result {
    int rc;
    size_t patched, restored, left, slot_diffs, relro_diffs;
    int maps_differ;
} tp_detach_result;

int tp_init(void);
int tp_attach(void);
int tp_detach(tp_detach_result *res);
unsigned long tp_count(int i);
long tp_live(void);
void *tp_hook_of(int i);
int tp_bench(int runs, double *median_us, double *unpatch_median_us, int *slots, int *modules);

#ifdef __cplusplus
}
#endif
#endif
