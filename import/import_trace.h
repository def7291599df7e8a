/*
 * import_trace.h - builds a .mlyze trace from another tool's recording.
 *
 * Importers (dumpalloc, heaptrack) feed events and call chains as they parse;
 * the builder interns function and file names, shares identical call chains
 * as one stack, keeps the events in memory (the metadata, written first,
 * needs every stack) and writes an exact (rate 1) trace at the end. Times
 * are made non-decreasing: the file's order is the event order.
 * No printing here: failures come back as -1 with a message.
 */
#ifndef MLZ_IMPORT_TRACE_H
#define MLZ_IMPORT_TRACE_H

#include <stddef.h>
#include <stdint.h>

typedef struct imp_frame {
    const char *func;         /* NULL or "": unknown */
    const char *file;         /* NULL or "": unknown */
    uint32_t line;
    uint64_t addr;            /* absolute address, 0 if unknown */
    int inlined;              /* inlined into the next frame */
} imp_frame;

typedef struct imp_event {
    uint64_t time_us, addr, size;
    uint32_t stack;           /* UINT32_MAX: a free */
    uint16_t thread;
} imp_event;

typedef struct imp_trace {
    /* interned strings: functions and files share one table of ids */
    char **strs;  size_t nstrs, capstrs;
    uint32_t *str_slots;  size_t str_mask;        /* hash -> id + 1 */
    /* stacks: frames stored flat */
    struct imp_stack { size_t first; uint32_t depth; uint64_t hash; } *stacks;
    size_t nstacks, capstacks;
    uint32_t *stack_slots;  size_t stack_mask;    /* hash -> index + 1 */
    struct imp_fr { uint32_t func, file, line, inlined; uint64_t addr; } *frames;
    size_t nframes, capframes;
    imp_event *events;  size_t nevents, capevents;
    uint64_t last_us;
} imp_trace;

int  imp_init(imp_trace *t);
void imp_free(imp_trace *t);
/* The stack id of a call chain, leaf first; -1 on out of memory. */
int64_t imp_stack(imp_trace *t, const imp_frame *frames, uint32_t depth);
/* 0, or -1 on out of memory. */
int  imp_alloc(imp_trace *t, uint64_t time_us, uint64_t addr, uint64_t size, uint32_t stack, uint16_t thread);
int  imp_free_event(imp_trace *t, uint64_t time_us, uint64_t addr);

typedef struct imp_info {
    int64_t pid;              /* -1: unknown */
    const char *exe;          /* NULL: unknown */
    const char *source;       /* "dumpalloc", "heaptrack": kept as metadata "imported_from" */
    const char *extra_json;   /* NULL, or a JSON object whose members join the metadata */
} imp_info;

/* Writes the trace to path (replacing it only when `replace`); 0, or -1
 * with err filled; nothing is left under path on failure. */
int  imp_write(const imp_trace *t, const char *path, const imp_info *info, int replace,
               char *err, size_t errlen);

#endif
