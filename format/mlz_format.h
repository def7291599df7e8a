/*
 * mlz_format.h - the .mlyze trace format: constants, the writer and the
 * streaming reader. docs/FORMAT.md describes the bytes; this header the API.
 *
 * The writer runs inside profiled processes, so it never allocates: the
 * caller provides the writer struct and its buffers, and output goes through
 * raw write(2). It writes to "<path>.<pid>.tmp" and renames at the end, so a
 * file under the final name is always complete and sealed.
 *
 * The reader runs in the memlyze tools. It streams: memory stays bounded by
 * the metadata plus one 64 KiB block, whatever the size of the event stream,
 * and every defect is reported with the rule it breaks and its byte offset.
 */
#ifndef MLZ_FORMAT_H
#define MLZ_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#define MLZ_MAGIC          "MTRC"
#define MLZ_VERSION        1
#define MLZ_HEADER_SIZE    256
#define MLZ_BLOCK_SIZE     65536   /* raw bytes per LZ4 block (Phase 2) */
#define MLZ_LZ4_BOUND      (MLZ_BLOCK_SIZE + MLZ_BLOCK_SIZE / 255 + 16)
#define MLZ_EXT_MAX        60000   /* largest extension payload: fits a block */
#define MLZ_EVENT_MAX      (MLZ_EXT_MAX + 32)
#define MLZ_PATH_MAX       4096

/* Header flags, in reserved bytes 20..23 (zero in a plain v1 file). */
#define MLZ_FLAG_SEALED    0x1u  /* stream_len/event_count/raw_len are final */
#define MLZ_FLAG_LZ4       0x2u  /* event stream is a sequence of LZ4 blocks */
#define MLZ_FLAG_SPLIT     0x4u  /* event stream is split-stream blocks (codec_split.h) */
#define MLZ_FLAG_ZMETA     0x8u  /* metadata is one zstd frame of the JSON (split files only) */
#define MLZ_FLAG_SPLIT2    0x10u /* split blocks use address model 2 (set by every split writer) */
#define MLZ_FLAG_UNSEALED_V1 0x20u /* blocks made from an unsealed v1 file: its v1 form is unsealed */
#define MLZ_FLAGS_KNOWN    (MLZ_FLAG_SEALED | MLZ_FLAG_LZ4 | MLZ_FLAG_SPLIT | MLZ_FLAG_ZMETA | MLZ_FLAG_SPLIT2 | \
                            MLZ_FLAG_UNSEALED_V1)
#define MLZ_FLAGS_BLOCKS   (MLZ_FLAG_LZ4 | MLZ_FLAG_SPLIT)
#define MLZ_SPLIT_LEVEL    9       /* zstd level of the split-stream writer:
                                      finalize keeps seconds, not minutes */
#define MLZ_SPLIT_LEVEL_MAX 19     /* the smallest files (convert --level) */

enum mlz_event_type {
    MLZ_EV_ALLOC  = 0,
    MLZ_EV_FREE   = 1,
    MLZ_EV_GC     = 2,
    MLZ_EV_MARKER = 3,
    /* Types >= 4 are extensions framed as: type, delta, length varint,
     * payload; readers skip the ones they do not know. Ours start at 16,
     * leaving 4..6 to the spec's own future proposals. */
    MLZ_EV_EXT_FIRST  = 4,
    MLZ_EV_STACK_RAW  = 16,  /* spool only: id, depth, PCs (leaf first) */
    MLZ_EV_MODULE     = 17,  /* spool only: start, size, bias, build-id, path */
    MLZ_EV_COUNTERS   = 18,  /* spool only: the payload's statistics, JSON */
    MLZ_EV_COVERAGE   = 19,  /* spool only: GOT blind-spot report, text */
    MLZ_EV_MODULE_GONE = 20, /* spool only: start, time unloaded (µs), path */
    MLZ_EV_EXEC       = 23,  /* spool only: the image is about to exec ("E...") or it failed ("F") */
};

typedef struct mlz_header {
    uint32_t version;
    uint64_t start_us;       /* wall clock (CLOCK_REALTIME) of the first delta */
    uint32_t meta_len;
    uint32_t flags;
    uint64_t stream_len;     /* bytes of event stream on disk (SEALED) */
    uint64_t event_count;    /* events in the stream (SEALED) */
    uint64_t raw_len;        /* uncompressed stream bytes (SEALED) */
    uint8_t  rest[MLZ_HEADER_SIZE - 48]; /* bytes 48..255, kept verbatim */
} mlz_header;

typedef struct mlz_error mlz_error;
void mlz_header_encode(const mlz_header *h, uint8_t out[MLZ_HEADER_SIZE]);
/* Checks rules 1 and 2 (magic, version, known flags); 0 or -1 with *err. */
/* Fills *e (when not NULL) with the rule, byte offset and message; returns
 * -1. The one error setter of the format library. */
int  mlz__error_set(mlz_error *e, int rule, uint64_t off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int  mlz_header_decode(const uint8_t in[MLZ_HEADER_SIZE], mlz_header *h, mlz_error *err);

typedef struct mlz_event {
    int      type;
    uint64_t delta_us;
    uint64_t time_us;        /* absolute: header start + all deltas so far */
    uint64_t offset;         /* byte offset (see mlz_error.offset) */
    uint32_t enc_len;        /* bytes the event takes in the (raw) stream */
    uint64_t addr;           /* ALLOC, FREE */
    uint64_t size;           /* ALLOC */
    uint64_t stack_id;       /* ALLOC */
    uint16_t thread;         /* ALLOC */
    uint64_t objects, bytes; /* GC */
    uint64_t name_id;        /* MARKER */
    const uint8_t *data;     /* extension payload, valid until the next call */
    uint64_t len;            /* extension payload length */
} mlz_event;

/* ---------------------------------------------------------------- writer */

typedef struct mlz_writer_opts {
    uint64_t    start_us;
    const char *meta;        /* JSON metadata text */
    size_t      meta_len;
    unsigned    flags;       /* MLZ_FLAG_LZ4 or MLZ_FLAG_SPLIT to compress, else raw.
                                SPLIT allocates (tools only), takes blocks of up
                                to buf_size (<= 1 MiB) bytes of v1 events, and
                                with two CPUs encodes them on a second thread */
    int         replace;     /* may the final rename replace an existing file */
    int         keep_on_error; /* a failed close leaves the temporary file (an
                                unsealed v1 stream, readable up to its last
                                whole event): the payload's spool */
    int         plain;       /* leave the header unsealed, as a plain v1 writer
                                would (undump of such files); a block file
                                records it by MLZ_FLAG_UNSEALED_V1 */
    int         mode;        /* file permissions, e.g. 0600 (0 = 0644) */
    uint8_t    *buf;         /* event buffer, >= MLZ_BLOCK_SIZE bytes */
    size_t      buf_size;
    uint8_t    *zbuf;        /* LZ4 output, >= MLZ_LZ4_BOUND bytes (LZ4 only) */
    size_t      zbuf_size;
    int         level;       /* SPLIT only: zstd level of the streams and the
                                metadata, 1..MLZ_SPLIT_LEVEL_MAX (0 = MLZ_SPLIT_LEVEL) */
} mlz_writer_opts;

typedef struct mlz_writer {
    int      fd, idx_fd;
    uint64_t fd_dev, fd_ino, idx_dev, idx_ino;   /* the files fd and idx_fd must name */
    unsigned flags;
    int      replace, plain, keep_on_error;
    int      err;            /* first errno seen; every later call fails */
    int      err_in_idx;     /* ... and it concerns the index, not the main file */
    uint8_t *buf, *zbuf;
    size_t   cap, len, zcap;
    struct mlz_split_codec *split;  /* SPLIT mode's encoder */
    struct mlz_encode_behind *behind; /* SPLIT: the second thread encoding, if any */
    int      level, behind_failed;
    uint64_t start_us, last_us;
    uint64_t events, stream_len, raw_len;
    uint64_t block_base_us, block_first_event, nblocks;
    uint32_t meta_len;
    uint8_t  rest[MLZ_HEADER_SIZE - 48];
    char     path[MLZ_PATH_MAX], tmp[MLZ_PATH_MAX + 32];
    char     idx_path[MLZ_PATH_MAX + 8], idx_tmp[MLZ_PATH_MAX + 40];
} mlz_writer;

/* All return 0 on success, -errno on failure (the first error sticks). */
int  mlz_writer_open(mlz_writer *w, const char *path, const mlz_writer_opts *o);
int  mlz_writer_alloc(mlz_writer *w, uint64_t t_us, uint64_t addr, uint64_t size,
                      uint64_t stack_id, uint16_t thread);
int  mlz_writer_free(mlz_writer *w, uint64_t t_us, uint64_t addr);
int  mlz_writer_gc(mlz_writer *w, uint64_t t_us, uint64_t objects, uint64_t bytes);
int  mlz_writer_marker(mlz_writer *w, uint64_t t_us, uint64_t name_id);
int  mlz_writer_ext(mlz_writer *w, unsigned type, uint64_t t_us,
                    const void *payload, size_t len);
/* Writes an already-encoded delta (undump reproduces files byte for byte). */
int  mlz_writer_raw_event(mlz_writer *w, const mlz_event *ev);
/* Ends the current LZ4 block early (undump reproduces block boundaries). */
int  mlz_writer_end_block(mlz_writer *w);
/* Flushes, seals the header, fsyncs and renames into place. */
int  mlz_writer_close(mlz_writer *w);
/* Gives up: closes and removes the temporary files. */
void mlz_writer_abort(mlz_writer *w);
/* The file the first error concerns, for its message: the index beside
 * PATH, or PATH itself. */
const char *mlz_writer_error_path(const mlz_writer *w, const char *path);
/* Closes the descriptors, touching no file (a fork child's copies). */
void mlz_writer_forget(mlz_writer *w);
/* Overrides the bytes 48..255 of the header written at close (undump). */
void mlz_writer_set_header_rest(mlz_writer *w, const uint8_t rest[MLZ_HEADER_SIZE - 48]);

/* ---------------------------------------------------------------- reader */

/* The spec's seven validation rules, plus I/O. */
enum mlz_rule {
    MLZ_RULE_IO = 0,
    MLZ_RULE_MAGIC = 1,       /* starts with "MTRC" */
    MLZ_RULE_VERSION = 2,     /* supported version (and header flags) */
    MLZ_RULE_METADATA = 3,    /* metadata is valid JSON of the right shape */
    MLZ_RULE_REFERENCE = 4,   /* stack/file/function ids exist */
    MLZ_RULE_EVENT_TYPE = 5,  /* only valid event types */
    MLZ_RULE_VARINT = 6,      /* varints properly (minimally) encoded */
    MLZ_RULE_SIZE = 7,        /* sizes add up: header + metadata + events */
};

struct mlz_error {
    int      rule;
    uint64_t offset;          /* file offset; in LZ4 files the block's offset */
    char     msg[320];
};

const char *mlz_rule_name(int rule);

/* Resolved metadata (reader side; owned by the reader). */
typedef struct mlz_frame {
    uint32_t func_id, file_id;
    uint32_t line;
    int32_t  module;          /* index into modules, -1 if unknown */
    uint64_t addr;            /* module-relative address, 0 if unknown */
    int      inlined;         /* an inline frame expanded from the next one */
} mlz_frame;

typedef struct mlz_stack {
    uint64_t   id;
    uint32_t   depth;
    mlz_frame *frames;        /* leaf (allocation site) first */
} mlz_stack;

typedef struct mlz_meta_module {
    char    *path;
    char    *build_id;        /* hex, may be NULL */
    uint64_t base, size;
} mlz_meta_module;

typedef struct mlz_meta {
    char       *json;         /* the metadata bytes as stored */
    size_t      json_len;
    void       *root;         /* jansson json_t *, for commands that need more */
    const char *kind;         /* "trace", "snapshot", "spool", or NULL (plain v1) */
    uint64_t    rate;         /* sampling rate in bytes; 1 = every allocation; 0 = unknown */
    int64_t     pid;
    const char *exe;
    mlz_stack  *stacks;  size_t nstacks;    /* sorted by id */
    uint64_t   *file_ids;  char **files;     size_t nfiles;     /* sorted */
    uint64_t   *func_ids;  char **functions; size_t nfunctions; /* sorted */
    mlz_meta_module *modules; size_t nmodules;
} mlz_meta;

const mlz_stack *mlz_meta_stack(const mlz_meta *m, uint64_t id);
const char *mlz_meta_file(const mlz_meta *m, uint64_t id);
const char *mlz_meta_function(const mlz_meta *m, uint64_t id);

/* A MARKER whose function is named MLZ_RATE_MARKER "N" (decimal, N >= 1)
 * sets the sampling rate of the ALLOC events after it, up to the next such
 * marker; before the first, the metadata's "rate" holds. The payload raises
 * the rate this way under overload (docs/FORMAT.md). Returns N, or 0 when
 * the function is no rate marker. */
#define MLZ_RATE_MARKER "memlyze:rate "
uint64_t mlz_meta_marker_rate(const mlz_meta *m, uint64_t func_id);
int  mlz_meta_parse(mlz_meta *m, const char *json, size_t len, mlz_error *err);
void mlz_meta_free(mlz_meta *m);

typedef struct mlz_reader mlz_reader;

#define MLZ_READ_NO_INDEX   0x1u  /* ignore a .mlyze.idx beside the file */
#define MLZ_READ_TRUNCATED_OK 0x2u /* an unsealed, cut-off stream ends cleanly
                                      at its last whole event (spool recovery) */

mlz_reader *mlz_reader_open(const char *path, unsigned flags, mlz_error *err);
mlz_reader *mlz_reader_open_mem(const void *data, size_t len, unsigned flags,
                                mlz_error *err);
const mlz_header *mlz_reader_header(const mlz_reader *r);
const mlz_meta   *mlz_reader_meta(const mlz_reader *r);
/* 1: *ev filled; 0: clean end of stream; -1: *err filled. */
int  mlz_reader_next(mlz_reader *r, mlz_event *ev, mlz_error *err);
/* Split-stream files only: the next whole block as columns, without
 * going through events one by one (the fast path for analyses). ALLOC
 * fields are indexed by allocation, FREE addresses by free, in stream
 * order; GC/MARKER/extension events are counted in n but not described.
 * Checks what mlz_reader_next checks (rule 4 for stack ids included).
 * Must not be mixed with mlz_reader_next. 1: *b filled (valid until the
 * next call); 0: clean end; -1: *err filled. */
typedef struct mlz_block_view {
    uint32_t n, nalloc, nfree;
    uint64_t first_event;       /* index of the block's first event */
    uint64_t base_us;           /* time the block's first delta adds to */
    const uint8_t  *kind;       /* [n] */
    const uint64_t *delta;      /* [n] */
    const uint64_t *a_addr, *a_size, *a_stack;   /* [nalloc] */
    const uint16_t *a_thread;   /* [nalloc] */
    const uint64_t *f_addr;     /* [nfree] */
    const uint32_t *o_len;      /* [n - nalloc - nfree] v1 length of each other event */
    const uint64_t *o_name;     /* [n - nalloc - nfree] a MARKER's function id (0 for others) */
    uint64_t alloc_v1_bytes;    /* v1 length of the block's ALLOCs together */
    uint64_t free_v1_bytes;     /* ... and of its FREEs */
} mlz_block_view;
int  mlz_reader_next_block(mlz_reader *r, mlz_block_view *b, mlz_error *err);

/* For LZ4 files: 1 when the next event starts a new block (dump shows it). */
int  mlz_reader_at_block_start(const mlz_reader *r);
/* Positions the reader at the block holding the first event at or after t_us
 * using the .mlyze.idx index; 0 on success, -1 if there is no usable index. */
int  mlz_reader_seek_time(mlz_reader *r, uint64_t t_us, mlz_error *err);
int  mlz_reader_has_index(const mlz_reader *r);
/* Split blocks the caller decoded itself while the read-ahead thread was
 * still on the block before (both CPUs decoding); for tests and benches. */
uint64_t mlz_reader_blocks_beside(const mlz_reader *r);
/* Was the stream cut off (MLZ_READ_TRUNCATED_OK only)? */
int  mlz_reader_was_truncated(const mlz_reader *r);
void mlz_reader_close(mlz_reader *r);

/* Index file (.mlyze.idx) entries, one per LZ4 block. */
typedef struct mlz_index_entry {
    uint64_t file_offset;     /* where the block header starts */
    uint64_t raw_offset;      /* uncompressed stream offset of its first byte */
    uint64_t base_us;         /* absolute time the block's first delta adds to */
    uint64_t first_event;     /* index of its first event */
} mlz_index_entry;
#define MLZ_INDEX_MAGIC "MLZI"
#define MLZ_INDEX_HEADER_SIZE 64

#endif
