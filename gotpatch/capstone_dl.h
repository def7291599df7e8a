/*
 * capstone_dl.h - libcapstone loaded with dlopen, allocating from a private
 * mmap arena (shared by the blind-spot scan and the inline-hook relocator).
 *
 * The payload keeps libc as its only link-time dependency, and nothing may
 * come from the target's allocator, which may be routed through our hooks:
 * CS_OPT_MEM points capstone at an arena that mlz__cs_end() drops. CS_OPT_MEM
 * is global to the capstone library, so afterwards it is set back to libc's
 * functions, capstone's defaults.
 */
#ifndef MLZ_CAPSTONE_DL_H
#define MLZ_CAPSTONE_DL_H

#include <capstone/capstone.h>

typedef struct mlz__cs {
    void *lib;
    cs_err (*open)(cs_arch, cs_mode, csh *);
    cs_err (*option)(csh, cs_opt_type, size_t);
    cs_insn *(*malloc_insn)(csh);
    void (*free)(cs_insn *, size_t);
    bool (*disasm_iter)(csh, const uint8_t **, size_t *, uint64_t *, cs_insn *);
    cs_err (*close)(csh *);
    csh h;          /* open handle between begin and end */
    cs_insn *insn;  /* one instruction buffer (with detail if asked) */
} mlz__cs;

/* dlopen libcapstone (call outside the gotpatch lock: constructors may
 * dlopen). 0 or MLZ_GOT_ENOCAPSTONE; mlz__cs_unload() in both cases. */
int mlz__cs_load(mlz__cs *c);
void mlz__cs_unload(mlz__cs *c);
/* Arena, handle (x86_64), instruction buffer; `detail`: operand details on.
 * 0, MLZ_GOT_ENOMEM or MLZ_GOT_ENOCAPSTONE. mlz__cs_end() in every case. */
int mlz__cs_begin(mlz__cs *c, int detail);
void mlz__cs_end(mlz__cs *c);

#endif
