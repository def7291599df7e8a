/*
 * families.c - the prefixed entry points of jemalloc (je_), tcmalloc (tc_)
 * and mimalloc (mi_) a process may call next to glibc's malloc. Only those
 * whose arguments are the standard ones of their kind: mi_malloc_aligned's
 * (size, align), tc_new_nothrow's extra argument or je_mallocx's flags
 * would reach a hook of the wrong shape, which would pass the original the
 * wrong arguments.
 */
#include "gotpatch.h"

#include <stddef.h>

const mlz_got_family_fn mlz_got_family_fns[] = {
    { "je_malloc", "malloc" }, { "je_free", "free" }, { "je_calloc", "calloc" }, { "je_realloc", "realloc" },
    { "je_memalign", "memalign" }, { "je_aligned_alloc", "memalign" }, { "je_posix_memalign", "posix_memalign" },
    { "tc_malloc", "malloc" }, { "tc_free", "free" }, { "tc_calloc", "calloc" }, { "tc_realloc", "realloc" },
    { "tc_memalign", "memalign" }, { "tc_posix_memalign", "posix_memalign" }, { "tc_new", "malloc" },
    { "tc_newarray", "malloc" }, { "tc_delete", "free" }, { "tc_deletearray", "free" },
    { "mi_malloc", "malloc" }, { "mi_free", "free" }, { "mi_calloc", "calloc" }, { "mi_realloc", "realloc" },
    { "mi_zalloc", "malloc" }, { "mi_memalign", "memalign" }, { "mi_aligned_alloc", "memalign" },
    { "mi_posix_memalign", "posix_memalign" }, { "mi_new", "malloc" },
    { NULL, NULL },
};

/* jemalloc, tcmalloc and mimalloc define these too: a program's new then
 * never reaches malloc. libstdc++'s do, through malloc's GOT slot. */
const mlz_got_family_fn mlz_got_cxx_fns[] = {
    { "_Znwm", "new" }, { "_Znam", "new" }, { "_ZnwmRKSt9nothrow_t", "new" }, { "_ZnamRKSt9nothrow_t", "new" },
    { "_ZnwmSt11align_val_t", "new" }, { "_ZnamSt11align_val_t", "new" },
    { "_ZnwmSt11align_val_tRKSt9nothrow_t", "new" }, { "_ZnamSt11align_val_tRKSt9nothrow_t", "new" },
    { "_ZdlPv", "delete" }, { "_ZdaPv", "delete" }, { "_ZdlPvm", "delete" }, { "_ZdaPvm", "delete" },
    { "_ZdlPvRKSt9nothrow_t", "delete" }, { "_ZdaPvRKSt9nothrow_t", "delete" },
    { "_ZdlPvSt11align_val_t", "delete" }, { "_ZdaPvSt11align_val_t", "delete" },
    { "_ZdlPvmSt11align_val_t", "delete" }, { "_ZdaPvmSt11align_val_t", "delete" },
    { "_ZdlPvSt11align_val_tRKSt9nothrow_t", "delete" }, { "_ZdaPvSt11align_val_tRKSt9nothrow_t", "delete" },
    { NULL, NULL },
};
