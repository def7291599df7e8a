/*
 * modtab.h - lock-free snapshot of the loaded modules (executable, shared
 * objects, vDSO), for the DWARF unwinder and for the module maps written
 * into traces.
 *
 * Workload: the unwinder looks up every frame's pc (millions of lookups),
 * while modules change a few times in a process's life. So lookups are a
 * binary search over an immutable, address-sorted snapshot reached through
 * one atomic pointer, and all the work (dl_iterate_phdr, which takes the
 * loader lock, mmap) happens in mlz_modtab_refresh(), called from a
 * background thread when mlz_modtab_changed() says so. A stale snapshot is
 * safe for lookups of modules that are still loaded; a pc in a module loaded
 * since is simply not found.
 *
 * Retired snapshots stay mapped (readers may still hold them) until
 * mlz_modtab_release_all() at quiescent shutdown: each refresh costs about
 * (modules x 200 bytes + paths) of address space for the life of the table.
 *
 * Known limit: after a dlclose, until the next refresh, a pc in an address
 * range reused by a new module is matched against the old module's CFI
 * pointers, which may then point at unmapped memory. Refresh promptly after
 * mlz_modtab_changed().
 */
#ifndef MLZ_MODTAB_H
#define MLZ_MODTAB_H

#include <stdint.h>

#define MLZ_BUILD_ID_MAX 32
#define MLZ_MODULE_CFI_SPANS 8

typedef struct mlz_module {
    uint64_t start, end;            /* [start, end): all PT_LOAD segments, runtime addresses */
    uint64_t exec_start, exec_end;  /* span of the executable PT_LOAD segment(s) */
    uint64_t exec_offset;           /* file offset of exec_start (for pprof mappings) */
    uint64_t load_bias;             /* dlpi_addr: runtime address - ELF vaddr */
    uint64_t eh_frame_hdr;          /* runtime address of .eh_frame_hdr, 0 if none */
    uint64_t eh_frame_hdr_size;
    /* Checked at refresh so the sampling path does not re-check it: */
    uint64_t eh_table;              /* sorted (initial_loc, fde) int32 pairs, 0 if unusable */
    uint64_t eh_seg_lo, eh_seg_hi;  /* readable PT_LOAD holding .eh_frame_hdr: CFI reads stay inside */
    uint32_t eh_count;              /* entries in eh_table */
    uint16_t nexec;                 /* executable PT_LOAD segments */
    uint8_t build_id_len;           /* 0 if no NT_GNU_BUILD_ID note */
    uint8_t build_id[MLZ_BUILD_ID_MAX];
    /* Built with frame pointers, as its CFI shows (mlz__unwind_classify):
     * cached walks then step its frames by rbp, except in the ncfi spans
     * [lo, hi) of cfi[], its few other FDEs (the PLT, _start). */
    uint8_t frame_pointers;
    uint8_t ncfi;
    uint64_t cfi[MLZ_MODULE_CFI_SPANS][2];
    const char *path;               /* dlpi_name, /proc/self/exe target for the executable; never NULL */
} mlz_module;

/* Decide m->frame_pointers and its spans left to the CFI from the module's
 * CFI (core/unwind_dwarf.c); the refresh does it for every module. */
void mlz__unwind_classify(mlz_module *m);

/* Rebuild the snapshot with dl_iterate_phdr into fresh mmap'd memory and
 * publish it (release store); the previous one is retired, not unmapped.
 * Takes the loader lock: never call it on the sampling path or from a
 * signal handler. While another refresh runs, waits (20 ms at most) for one
 * that began after this call. Returns 0, -ENOMEM, -EBUSY (waited in vain),
 * or -EAGAIN when modules may not be walked now (a fork is under way, or a
 * fork child has not seen the loader lock free: see the fork functions
 * below); the snapshot stays as it was. */
int mlz_modtab_refresh(void);

/* The module whose [start, end) holds pc in the current snapshot, or NULL
 * (no snapshot yet, or pc in no module). Lock-free and async-signal-safe. */
const mlz_module *mlz_modtab_find(uint64_t pc);

/* 1 if modules were loaded or unloaded since the current snapshot (compares
 * dl_iterate_phdr's dlpi_adds/dlpi_subs), or if there is no snapshot; else 0
 * (also when modules may not be walked now).
 * Cheap, but takes the loader lock: background thread only. */
int mlz_modtab_changed(void);

/* fork's atfork handlers: prepare waits for our walks of the modules to end
 * (at most 0.5 s) and holds new ones back, so the child never inherits the
 * lock dl_iterate_phdr takes from us (glibc resets ld.so's other locks in
 * the child, not that one). A child that goes on profiling (profiled) does
 * not walk until mlz_modtab_lock_seen, called after a dlopen of the program
 * loaded a library (that took the lock: it is free); mlz_modtab_walk_unsafe
 * says whether it is still waiting for that. */
void mlz_modtab_fork_prepare(void);
void mlz_modtab_fork_parent(void);
void mlz_modtab_fork_child(int profiled);
void mlz_modtab_lock_seen(void);
int mlz_modtab_walk_unsafe(void);

/* The current snapshot's modules, sorted by start, and their count; NULL and
 * 0 if there is none. *generation (may be NULL) grows by one per refresh, so a
 * trace writer knows when to write a new module map; *stamp_ns (may be NULL)
 * is when the snapshot was taken, by the clock given below. The array stays
 * valid until mlz_modtab_release_all(). */
const mlz_module *mlz_modtab_modules(unsigned *count, uint64_t *generation, uint64_t *stamp_ns);

/* The same for an earlier snapshot, by its generation (retired ones are
 * kept): NULL if there was none (a failed refresh) or it is released.
 * A writer that missed some generations can still write every module that
 * was loaded, however briefly. */
const mlz_module *mlz_modtab_modules_of(uint64_t generation, unsigned *count, uint64_t *stamp_ns);

/* The clock that stamps snapshots (the payload's event clock, so a trace
 * can tell an event before an unload from one after it); NULL: none, 0. */
void mlz_modtab_set_clock(uint64_t (*now_ns)(void));

/* The current snapshot's generation (0 if none); one atomic load. */
uint64_t mlz_modtab_generation(void);

/* Unmap the current and every retired snapshot. Only when no thread can be
 * unwinding or holding a mlz_module pointer (shutdown, tests). */
void mlz_modtab_release_all(void);

#endif
