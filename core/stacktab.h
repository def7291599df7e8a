/*
 * stacktab.h - lock-free intern table for call stacks: PC arrays -> dense
 * 32-bit ids.
 *
 * Called once per sample with the captured stack; a program has thousands to
 * a few hundred thousand distinct allocation stacks, so the table starts at a
 * few KiB and grows. Nothing ever moves: records and frames live in large
 * MAP_NORESERVE reservations that cost RSS only as they fill, so a reader in
 * another process can follow recs/frames with process_vm_readv:
 *
 *     id valid   iff 1 <= id < mlz_stacktab_count() and recs[id].ready == 1
 *     its frames: frames[recs[id].frames_offset ... + recs[id].depth]
 */
#ifndef MLZ_STACKTAB_H
#define MLZ_STACKTAB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

#define MLZ_MAX_FRAMES 128
#define MLZ_STACK_NONE 0u               /* "no stack" */
#define MLZ_STACK_TRUNCATED UINT32_MAX  /* table or frame arena full */

#define MLZ_STACKTAB_DEFAULT_MAX   (1u << 20)   /* stacks */
#define MLZ_STACKTAB_DEFAULT_ARENA (64u << 20)  /* bytes of frames */
#define MLZ_STACKTAB_LEVEL0_LOG2   9            /* 512 index slots = 4 KiB */
#define MLZ_STACKTAB_MAX_LEVELS    32

typedef struct mlz_stack_rec {
    _Atomic uint32_t ready;  /* 1 once depth, hash and frames are written (release) */
    uint32_t depth;
    uint64_t hash;
    uint64_t frames_offset;  /* index of the first frame in mlz_stacktab.frames */
} mlz_stack_rec;

typedef struct mlz_stacktab {
    mlz_stack_rec *recs;       /* indexed by id; recs[0] unused */
    uint64_t *frames;          /* frame arena */
    _Atomic uint64_t *index;   /* index levels back to back: {hash tag << 32 | id} */
    uint32_t max_stacks;
    unsigned max_levels;
    uint64_t arena_cap;        /* frames */
    size_t recs_map, frames_map, index_map; /* reservation sizes, bytes */
    _Atomic uint32_t next_id;
    _Atomic uint32_t nlevels;
    _Atomic uint64_t arena_used;                             /* frames handed out */
    _Atomic uint64_t level_used[MLZ_STACKTAB_MAX_LEVELS];    /* index entries per level */
    _Atomic uint64_t collisions; /* tag matches whose stack differed */
    _Atomic uint64_t truncated;  /* MLZ_STACK_TRUNCATED returned */
    _Atomic uint64_t clamped;    /* stacks deeper than MLZ_MAX_FRAMES, cut */
    _Atomic uint64_t unindexed;  /* ids created but not findable (index full) */
} mlz_stacktab;

typedef struct mlz_stacktab_stats {
    uint32_t ids;              /* ids handed out (count - 1) */
    uint32_t levels;           /* index levels in use */
    uint64_t collisions, truncated, clamped, unindexed;
    uint64_t bytes_used;       /* records + frames + index levels in use */
    uint64_t bytes_reserved;   /* virtual address space reserved */
} mlz_stacktab_stats;

/* max_stacks 0 = default, at most UINT32_MAX - 2; arena_bytes 0 = default.
 * 0 on success, -1 on failure. */
int mlz_stacktab_init(mlz_stacktab *t, uint32_t max_stacks, size_t arena_bytes);
/* Only when no other thread can touch the table any more. */
void mlz_stacktab_destroy(mlz_stacktab *t);

/* Id of this stack (depth > MLZ_MAX_FRAMES is cut and counted), a fresh id
 * for a stack not seen before, or MLZ_STACK_TRUNCATED when full. */
uint32_t mlz_stacktab_intern(mlz_stacktab *t, const uint64_t *pcs, unsigned depth);

/* 1 and the frames if id is valid and ready, else 0. */
int mlz_stacktab_get(const mlz_stacktab *t, uint32_t id, const uint64_t **pcs,
                     unsigned *depth);

/* Ids handed out so far + 1 (ids start at 1): valid ids are [1, count). */
uint32_t mlz_stacktab_count(const mlz_stacktab *t);

void mlz_stacktab_get_stats(const mlz_stacktab *t, mlz_stacktab_stats *s);

/* The 64-bit hash used for stacks (exposed for the reader and tests). */
uint64_t mlz_stack_hash(const uint64_t *pcs, unsigned depth);

#endif
