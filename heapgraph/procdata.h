/*
 * procdata.h - a module's writable data (.data, .bss, ...) in a live
 * process, cut into pieces at its symbols: the global roots of a heap dump.
 */
#ifndef MLZ_PROCDATA_H
#define MLZ_PROCDATA_H

#include "proc.h"

typedef struct pm_piece {
    uint64_t addr, size;      /* 8-byte aligned */
    char *name;               /* the symbol at addr, or NULL */
    char *file;               /* its source file (local symbols), or NULL */
} pm_piece;

/* Appends the pieces of every writable PT_LOAD segment of m (file size and
 * bss) to *v. 0, or -1 when the module's file cannot be read. */
int  pm_data_pieces(pid_t pid, const mlz_proc_module *m, pm_piece **v, size_t *n, size_t *cap);
void pm_free_pieces(pm_piece *v, size_t n);

#endif
