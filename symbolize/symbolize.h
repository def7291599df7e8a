/*
 * symbolize.h - program counters to function, file:line (libdw), outside
 * the target. Strings returned stay valid until sym_free.
 */
#ifndef MLZ_SYMBOLIZE_H
#define MLZ_SYMBOLIZE_H

#include <stddef.h>
#include <stdint.h>

typedef struct symbolizer symbolizer;

typedef struct sym_frame {
    const char *func;         /* never NULL: "module+0xoffset" when unknown */
    const char *file;         /* "" when unknown */
    unsigned line;            /* 0 when unknown */
    int inlined;              /* inlined into the next frame */
} sym_frame;

symbolizer *sym_new(void);
/* Module paths are the target's: look them up under root first (a live
 * target's "/proc/PID/root"; NULL or "" for none). Before sym_add_module. */
void sym_set_root(symbolizer *s, const char *root);
/* start..start+size as mapped in the target; bias = runtime - ELF address. */
int  sym_add_module(symbolizer *s, const char *path, uint64_t start, uint64_t size, uint64_t bias,
                    const uint8_t *build_id, size_t build_id_len);
/* Call once after the last sym_add_module. */
void sym_ready(symbolizer *s);
/* Frames for one return address, innermost inline first; the count. Also
 * the module's index (-1 if none) and the address relative to its bias. */
int  sym_resolve(symbolizer *s, uint64_t pc, sym_frame *out, int max, int *module, uint64_t *rel);
/* Loads now what resolving pc will need: its module's symbol table and
 * DWARF (decompressed, for a debug file whose sections are). Resolving
 * does it on first use anyway; this lets another thread do it ahead. */
void sym_warm(symbolizer *s, uint64_t pc);
void sym_free(symbolizer *s);
void sym_hex(const uint8_t *b, size_t n, char *out);

#endif
