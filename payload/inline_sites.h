/*
 * inline_sites.h - the inline-hook jumps an injector writes itself.
 *
 * In an attached process other threads may be executing the first bytes of
 * an allocator when its entry is overwritten. So memlyze-attach passes
 * "inline=remote": memlyze_attach prepares the trampolines but writes no
 * jump, and memlyze_inline_sites() describes the jumps; the injector stops
 * every thread, checks that no thread's PC is inside (at, at + len), and
 * writes `jmp` over `orig` through /proc/PID/mem. memlyze_detach restores
 * `orig` wherever the jump is found (in-process, safe while threads run:
 * with the jump in place no thread can be inside the range).
 */
#ifndef MLZ_INLINE_SITES_H
#define MLZ_INLINE_SITES_H

#include <stdint.h>

#define MEMLYZE_INLINE_SITES_MAX 16

struct memlyze_inline_site {
    uint64_t at;            /* where the jump goes */
    uint64_t name;          /* address of the hooked name (C string) */
    uint8_t len;            /* whole instructions moved: no PC may be in (at, at + len) */
    uint8_t jmp_len;        /* bytes of the jump */
    uint8_t orig[16];       /* the bytes the jump replaces (checked before writing) */
    uint8_t jmp[16];
    uint8_t pad[6];
};

/* Exported by the payload: fills up to cap sites, returns how many. */
int memlyze_inline_sites(struct memlyze_inline_site *out, int cap);

#endif
