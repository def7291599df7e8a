/*
 * codec_split.h - the split-stream block codec (.mlyze extension, header
 * flag SPLIT; docs/FORMAT.md "Split-stream blocks" has the bytes).
 *
 * A block holds the events of up to 1 MiB of v1 stream as eleven separate
 * streams (kinds, time deltas, size codes and literals, address codes and
 * literals, stack ids, threads, free references and literals, the rest),
 * each modelled (recent-size table, addresses reused from blocks of the same
 * size freed earlier in the block or from a recent FREE, frees naming their
 * allocation by its place among the live ones) and then compressed with
 * zstd. Every block decodes alone.
 *
 * The codec converts between one block of v1 event bytes and its encoded
 * form, losslessly: v1 -> split -> v1 gives back the same bytes. It runs
 * only in the memlyze tools (finalize, convert, the reader), never inside a
 * profiled process; it allocates.
 */
#ifndef MLZ_CODEC_SPLIT_H
#define MLZ_CODEC_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#define MLZ_SPLIT_MAX_RAW     (1u << 20)  /* v1 bytes per block */
#define MLZ_SPLIT_MAX_EVENTS  (1u << 17)  /* events per block */
#define MLZ_SPLIT_HEADER      16          /* payload len, events, raw len, crc32 */
#define MLZ_SPLIT_NSTREAMS    11
#define MLZ_SPLIT_SIZE_SLOTS  251         /* recent-size table (slot = size mod 251) */
#define MLZ_SPLIT_REUSE_SLOTS 1024        /* freed blocks, by size */
#define MLZ_SPLIT_REUSE_DEPTH 8           /* entries per row: address codes 1..8 */
#define MLZ_SPLIT_BACK_MAX    247         /* address codes 9..255: the 1st..247th latest FREE */
#define MLZ_SPLIT_RING        32          /* model 1: freed blocks of any size, latest first */
#define MLZ_SPLIT_THREAD_SLOTS 16         /* previous address per thread */

enum mlz_split_stream {
    MLZ_S_KIND, MLZ_S_DELTA, MLZ_S_SIZE_CODE, MLZ_S_SIZE_LIT, MLZ_S_ADDR_CODE,
    MLZ_S_ADDR_LIT, MLZ_S_STACK, MLZ_S_THREAD, MLZ_S_FREE_REF, MLZ_S_FREE_LIT,
    MLZ_S_OTHER,
};

/* One block's events as columns. ALLOC fields are indexed by allocation
 * (0..nalloc-1), FREE addresses by free; GC/MARKER/extension events keep
 * their v1 bytes after the delta in `other`, in order. */
typedef struct mlz_split_cols {
    uint32_t n, nalloc, nfree, cap;
    uint64_t raw_len;                 /* v1 bytes of these events */
    uint64_t alloc_v1_bytes, free_v1_bytes;   /* ... of the ALLOCs, and of the FREEs */
    uint64_t delta_sum;               /* the deltas' sum (mod 2^64): the block's span */
    uint64_t stack_lo, stack_hi;      /* the smallest and largest stack id (if nalloc) */
    uint8_t  *kind;                   /* [n] event types */
    uint64_t *delta;                  /* [n] */
    uint64_t *a_addr, *a_size, *a_stack;   /* [nalloc] */
    uint16_t *a_thread;               /* [nalloc] */
    uint64_t *f_addr;                 /* [nfree] */
    uint8_t  *other;                  /* tails of the other events */
    size_t    other_len, other_cap;
} mlz_split_cols;

typedef struct mlz_split_codec mlz_split_codec;

/* NULL when out of memory or when libzstd is not linked in. A new codec
 * uses address model 2 (header flag SPLIT2); set_model(c, 1) decodes the
 * blocks of files written before it (no encoding then). */
mlz_split_codec *mlz_split_new(int level);
void mlz_split_set_model(mlz_split_codec *c, int model);
void mlz_split_free(mlz_split_codec *c);

/* Encodes `len` bytes of whole v1 events (at most MLZ_SPLIT_MAX_RAW and
 * MLZ_SPLIT_MAX_EVENTS events) into one block, header included. On success
 * *out points into the codec (valid until the next call) and returns its
 * length; -1 if the v1 bytes are malformed or zstd fails. */
long mlz_split_encode(mlz_split_codec *c, const uint8_t *v1, size_t len, const uint8_t **out);

/* Decodes a block payload (the bytes after the 16-byte header) holding
 * `nevents` events into c's columns. 0 on success; -1 with a reason in why
 * (and for invalid event kinds, *bad_kind set to 1). */
int mlz_split_decode(mlz_split_codec *c, const uint8_t *payload, size_t len,
                     uint32_t nevents, char *why, size_t whylen, int *bad_kind);
const mlz_split_cols *mlz_split_columns(const mlz_split_codec *c);

/* Writes the decoded columns back as v1 event bytes (cols->raw_len of them;
 * out has room for MLZ_SPLIT_MAX_RAW). Returns the length. */
size_t mlz_split_to_v1(const mlz_split_cols *cols, uint8_t *out);

/* Stream i (enum mlz_split_stream) as the last encode or decode left it,
 * before compression: what the models produced (tests look at codes). */
const uint8_t *mlz_split_stream(const mlz_split_codec *c, int i, size_t *len);

/* The metadata of split files (flag ZMETA): CRC-32 u32 of the frame, then
 * one zstd frame holding the JSON. pack: *out is malloc'd; returns its
 * length, or -1. unpack: *json is malloc'd and NUL-terminated; 0, or -1
 * with a reason in why (a bad checksum, or not exactly one frame of a
 * stated size up to MLZ_META_MAX bytes). */
#define MLZ_META_MAX (1u << 30)
long mlz_split_meta_pack(const void *json, size_t len, int level, uint8_t **out);
int mlz_split_meta_unpack(const uint8_t *in, size_t len, char **json, size_t *json_len,
                          char *why, size_t whylen);

/* The checksum blocks carry (CRC-32 as zlib computes it). */
uint32_t mlz_split_crc(const uint8_t *p, size_t n);

#endif
