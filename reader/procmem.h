/*
 * procmem.h - reading a live process from outside, without stopping it.
 */
#ifndef MLZ_PROCMEM_H
#define MLZ_PROCMEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct pm_module {
    char *path;               /* as in /proc/PID/maps ("[vdso]" too) */
    uint64_t start, end;      /* lowest and highest mapped address */
    uint64_t bias;            /* runtime address - ELF address */
    uint64_t map_start, map_end;  /* the mapping of file offset 0 */
    uint8_t build_id[64];
    size_t build_id_len;
} pm_module;

/* 0 when all len bytes at addr were read. */
int  pm_read(pid_t pid, uint64_t addr, void *buf, size_t len);
/* The process's file-backed modules with their biases and build-ids. */
int  pm_modules(pid_t pid, pm_module **out, size_t *count);
void pm_free_modules(pm_module *m, size_t n);
/* The file of module m as the process mapped it (read-only fd), or -1. */
int  pm_open_module(pid_t pid, const pm_module *m);
/* Address of a symbol of module m in the process. */
int  pm_symbol(pid_t pid, const pm_module *m, const char *name, uint64_t *addr);

#endif
