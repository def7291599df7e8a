/*
 * replay_ops.h - a trace's allocation stream as replayable operations.
 *
 * The parent turns the trace into a flat file of fixed-size ops (in a
 * memfd) that each replaying child reads in chunks, so the child's own
 * memory stays small and alike for every allocator. Addresses become slot
 * numbers (reused once freed), so the child keeps one pointer array.
 */
#ifndef MLZ_REPLAY_OPS_H
#define MLZ_REPLAY_OPS_H

#include "mlz_format.h"

#include <stdint.h>

/* A memlyze trace records a realloc as the old block's FREE and the new
 * block's ALLOC (in time order, nothing tells the pair from a free and a
 * malloc), so the replay makes those two calls. */
enum replay_kind { RP_MALLOC = 0, RP_FREE = 1 };

typedef struct replay_op {
    uint8_t  kind;
    uint8_t  pad;
    uint16_t worker;          /* dense index of the recorded thread */
    uint32_t slot;            /* the block (its index in the child's pointer array) */
    uint64_t size;            /* MALLOC */
    uint64_t time_us;         /* since the first op */
} replay_op;

typedef struct replay_plan {
    int fd;                   /* memfd of nops replay_ops */
    uint64_t nops, nslots;
    uint32_t nworkers;        /* recorded threads */
    uint64_t allocs, frees;
    uint64_t unknown_frees;   /* frees of blocks the trace never allocated: skipped */
    uint64_t peak_live;       /* bytes live at the peak of the replayed stream */
    uint64_t peak_op;         /* index of the op after which that peak is reached */
    uint64_t live_at_end;
    uint64_t rate;            /* the trace's sampling rate; 1 = exact */
    int weighted;             /* sampled: each sample replayed weight times */
} replay_plan;

/* Reads the trace at path into a plan. A sampled trace (rate > 1) is
 * refused unless `weighted`: then each sampled block is replayed as
 * round(1/p) blocks of its size. 0, or -1 with err. */
int  replay_plan_build(const char *path, int weighted, replay_plan *plan, char *err, size_t errlen);
void replay_plan_free(replay_plan *plan);

#endif
