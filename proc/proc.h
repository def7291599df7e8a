/*
 * proc.h - a process seen from outside: its modules (/proc/PID/maps), the
 * files behind them, their symbols, build ids and debug files, its memory,
 * and the memlyze payload in it with its memlyze_info descriptor.
 *
 * One library for every tool that looks into another process without a
 * debugger: memlyze-attach/-detach (injector/), memlyze snapshot, watch and
 * serve (live/snapshot.c). So they all find the payload, open a module's
 * file and read a symbol the same way, as root and as an ordinary user.
 * Nothing here stops or ptraces the process.
 *
 * Errors: functions return 0 (or a count) or a negative MLZ_PROC_E* code
 * and leave one line naming the cause in mlz_proc_error(); they never print.
 */
#ifndef MLZ_PROC_H
#define MLZ_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct memlyze_info;

enum {
    MLZ_PROC_EIO = -1,       /* /proc or the process's memory could not be read */
    MLZ_PROC_ENOENT = -2,    /* no such module, symbol or payload */
    MLZ_PROC_EELF = -3,      /* a module that is no ELF image we can read */
    MLZ_PROC_ENOMEM = -4,
    MLZ_PROC_EAMBIG = -5,    /* a name with several different definitions */
    MLZ_PROC_EENTRY = -6,    /* another symbol inside a function's first bytes */
};

/* The cause of the last failure in this thread ("" if none). */
const char *mlz_proc_error(void);

/* ---- mem.c: memory */
/* 0 when all len bytes at addr were read (process_vm_readv, else
 * /proc/PID/mem), else MLZ_PROC_EIO. */
int mlz_proc_read(pid_t pid, uint64_t addr, void *buf, size_t len);

/* ---- tasks.c: threads */
/* /proc/PID/task/TID/stat (tid 0: /proc/PID/stat) read into buf; returns
 * its fields after the command name, state letter first, or NULL if gone. */
const char *mlz_proc_stat_fields(pid_t pid, pid_t tid, char *buf, size_t cap);
/* The process's start time (clock ticks since boot; 0 if gone): with the
 * pid, it names one process, never a later one given the same pid. */
unsigned long long mlz_proc_start_ticks(pid_t pid);
/* memlyze-attach's record of process pid (injector/state.c), as the
 * process sees /tmp, read through via (a live thread of it): 0 with
 * *attached_at (unix seconds) and *start_ticks, or -1 if there is none. The
 * file lies in the target's /tmp: a FIFO, a symlink or a device there is no
 * record (never waited on, never followed), and at most 8 KiB are read. */
int mlz_proc_attach_record(pid_t via, pid_t pid, long long *attached_at, unsigned long long *start_ticks);
/* The thread to read a process through: pid itself while its main thread
 * lives; once that one has exited (pthread_exit in main, the others running
 * on) /proc/PID/maps is empty and reads through pid fail, so a thread still
 * running; 0 if there is none. */
pid_t mlz_proc_live_tid(pid_t pid);
/* 1 if a thread of pid that is not a zombie yet is in do_exit: the process
 * may be dying (killed, and tearing down a large heap takes a while), its
 * maps already empty and its main thread already a zombie. */
int mlz_proc_exiting(pid_t pid);
/* The first thread of pid, the main one left out, that pick() accepts; 0
 * if none (or the process is gone). */
pid_t mlz_proc_task_find(pid_t pid, int (*pick)(pid_t pid, pid_t tid, void *arg), void *arg);

/* ---- maps.c: the modules a process mapped */
typedef struct mlz_proc_module {
    char path[4096];             /* as in /proc/PID/maps, " (deleted)" removed */
    int deleted;                 /* maps said " (deleted)" */
    uint64_t start, end;         /* lowest and highest address of its mappings */
    uint64_t first_start, first_end;  /* the mapping of file offset 0 (0: none) */
    uint64_t dev, ino;           /* of the mapped file (0 for [vdso]) */
    /* Filled by mlz_proc_module_load (and mlz_proc_modules): */
    int loaded;
    uint64_t bias;               /* runtime address = ELF address + bias */
    uint8_t build_id[64];
    size_t build_id_len;
} mlz_proc_module;

/* Every file-backed module (and [vdso]), loaded; free with free(). A module
 * whose ELF facts cannot be read keeps bias = start and no build id. */
int  mlz_proc_modules(pid_t pid, mlz_proc_module **out, size_t *count);
/* The first file-backed module whose path satisfies match (not loaded). */
int  mlz_proc_module_find(pid_t pid, int (*match)(const char *path), mlz_proc_module *m);
int  mlz_proc_is_libc(const char *path);
int  mlz_proc_is_ldso(const char *path);
int  mlz_proc_is_payload(const char *path);    /* our memfd, or a file named libmemlyze*.so */

/* ---- elfimage.c: a module's ELF image, from its file or else its memory */
/* The file is the very one the process mapped (same device and inode),
 * opened through /proc/PID/map_files (root), /proc/PID/root/PATH, or a
 * descriptor the process holds (/proc/PID/fd: the payload's memfd). With no
 * file to open, the image the loader mapped is read from memory. */
int  mlz_proc_module_load(pid_t pid, mlz_proc_module *m);   /* bias and build id */
/* That file, read-only (the caller closes it), or -1 when none opens. */
int  mlz_proc_module_open(pid_t pid, const mlz_proc_module *m);
typedef struct mlz_proc_sym {
    uint64_t addr;               /* runtime address, 0 when not found */
    uint64_t size;               /* st_size */
} mlz_proc_sym;
/* Defined FUNC/OBJECT symbols of .dynsym in their default version (never an
 * IFUNC resolver). Missing names get addr 0; returns how many were found,
 * or < 0. */
int  mlz_proc_syms(pid_t pid, const mlz_proc_module *m, const char *const *names, mlz_proc_sym *out, int n);
/* ---- funcs.c: a function by name (--hook), local functions too */
/* In the ELF file fd: .symtab first, else .dynsym. Its link-time value and
 * size; 0, MLZ_PROC_ENOENT, MLZ_PROC_EAMBIG (two static functions of that
 * name), or MLZ_PROC_EENTRY: another symbol lies in its first
 * MLZ_PROC_ENTRY_SPAN bytes (and inside it), which an inline hook moves
 * (code elsewhere may jump there). */
#define MLZ_PROC_ENTRY_SPAN 20
int  mlz_proc_elf_func(int fd, const char *name, uint64_t *value, uint64_t *size);
/* The same in a loaded module: runtime address and size in *out. */
int  mlz_proc_func(pid_t pid, const mlz_proc_module *m, const char *name, mlz_proc_sym *out);
/* Unused executable bytes: the tail of the page after the module's last
 * executable segment, which no code reaches. */
int  mlz_proc_cave(pid_t pid, const mlz_proc_module *m, uint64_t *addr, size_t *len);
/* The separate debug file of a loaded module by build id
 * ($MEMLYZE_DEBUG_DIR or /usr/lib/debug)/.build-id/xx/yyyy.debug): 0 when
 * it is installed, else MLZ_PROC_ENOENT. */
/* /usr/lib/debug/.build-id/xx/rest.debug of build id b (n bytes; the
 * directory $MEMLYZE_DEBUG_DIR for tests), whether it exists or not: 0, or
 * -1 if n < 2 or it does not fit cap. */
int  mlz_proc_build_id_path(const uint8_t *b, size_t n, char *path, size_t cap);
int  mlz_proc_debug_file(const mlz_proc_module *m, char *path, size_t cap);

/* ---- payload.c: the memlyze payload in a process */
/* The payload's module (not loaded); MLZ_PROC_ENOENT when none is mapped. */
int  mlz_proc_payload_find(pid_t pid, mlz_proc_module *m);
/* Its memlyze_info descriptor: address and bytes. Checks the magic only:
 * whether its layout is one we read is memlyze_info_readable()'s say. */
int  mlz_proc_payload_info(pid_t pid, const mlz_proc_module *m, struct memlyze_info *in, uint64_t *addr);

/* spool_cut.c: why the unsealed spool of pid (0: of a child of ours, gone)
 * stopped growing: its file system full, pid's user no longer allowed in
 * its directory, or the file-size limit reached; into why, or NULL when
 * none of these shows (a write failed otherwise, or the process died). */
const char *mlz_proc_spool_cut(pid_t pid, const char *spool, char *why, size_t cap);

#endif
