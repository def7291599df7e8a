/*
 * reader.c - streams and validates .mlyze files.
 *
 * Memory is bounded by the metadata plus one buffer (128 KiB raw, or one
 * 64 KiB block and its compressed form), whatever the stream's size. Every
 * event is checked as it is read against the spec's validation rules; the
 * first defect stops the stream with its rule and byte offset.
 *
 * A "spool" (the payload's raw output, see docs/FORMAT.md) names its stacks
 * in STACK_RAW events instead of in the metadata, so for spools rule 4 is
 * checked against the STACK_RAW events seen so far.
 */
#include "mlz_format.h"
#include "codec_split.h"
#include "worker.h"
#include "varint.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RAW_BUF (2 * MLZ_BLOCK_SIZE)

typedef struct read_ahead read_ahead;
static void ahead_stop(read_ahead *a);

struct mlz_reader {
    int fd;                   /* -1 when reading from memory */
    const uint8_t *mem;
    uint64_t file_size;
    unsigned flags;
    mlz_header h;
    mlz_meta meta;
    int spool;

    uint64_t data_off;        /* first byte of the event stream */
    uint64_t stream_end;      /* one past its last byte */
    uint64_t next_off;        /* next file byte to read */

    uint8_t *buf;             /* raw bytes or one decompressed block */
    size_t buf_len, buf_pos;
    uint64_t buf_file_off;    /* raw mode: file offset of buf[0] */
    uint64_t block_off;       /* LZ4 mode: file offset of the current block */
    uint8_t *zbuf;
    size_t zbuf_cap;
    mlz_split_codec *split;   /* SPLIT mode's decoder, holding the current block */
    read_ahead *ahead;        /* SPLIT mode: the next block, decoded meanwhile */
    uint32_t sp_i, sp_n, sp_a, sp_f;  /* SPLIT: next event, events, ALLOC and FREE cursors */
    size_t sp_o;              /* SPLIT: offset in the other-events stream */
    uint32_t *o_len;          /* SPLIT blocks: v1 length of each other event */
    uint64_t *o_name;         /* and a MARKER's function id */
    size_t o_len_cap;
    int block_start;          /* the event just returned opened its block */
    int ahead_failed;

    uint64_t time_us, events;
    int done, truncated;
    int have_pending;         /* seek_time found an event to hand out first */
    mlz_event pending;

    uint8_t *seen;            /* spool: bitmap of STACK_RAW ids seen */
    size_t seen_bytes;

    mlz_index_entry *idx;
    size_t nidx;
    int idx_empty;            /* a valid index of no blocks (a file of no events) */
};

const char *mlz_rule_name(int rule)
{
    static const char *names[] = {
        "i/o", "rule 1 (magic)", "rule 2 (version)", "rule 3 (metadata)",
        "rule 4 (reference)", "rule 5 (event type)", "rule 6 (varint)",
        "rule 7 (size)",
    };
    return rule >= 0 && rule <= 7 ? names[rule] : "unknown rule";
}

int mlz__error_set(mlz_error *e, int rule, uint64_t off, const char *fmt, ...)
{
    if (e) {
        e->rule = rule;
        e->offset = off;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Reads exactly n bytes at off; returns bytes read (short only at EOF). */
static ssize_t src_read(const mlz_reader *r, uint64_t off, void *dst, size_t n)
{
    if (off >= r->file_size) return 0;
    if (n > r->file_size - off) n = (size_t)(r->file_size - off);
    if (!r->mem) {
        size_t got = 0;
        while (got < n) {
            ssize_t k = pread(r->fd, (uint8_t *)dst + got, n - got, (off_t)(off + got));
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) return -1;
            if (k == 0) break;
            got += (size_t)k;
        }
        return (ssize_t)got;
    }
    memcpy(dst, r->mem + off, n);
    return (ssize_t)n;
}

int mlz_header_decode(const uint8_t in[MLZ_HEADER_SIZE], mlz_header *h, mlz_error *err)
{
    if (memcmp(in, MLZ_MAGIC, 4) != 0)
        return mlz__error_set(err, MLZ_RULE_MAGIC, 0, "bad magic %02x %02x %02x %02x, expected \"MTRC\"",
                      in[0], in[1], in[2], in[3]);
    h->version = mlz_get_u32(in + 4);
    h->start_us = mlz_get_u64(in + 8);
    h->meta_len = mlz_get_u32(in + 16);
    h->flags = mlz_get_u32(in + 20);
    h->stream_len = mlz_get_u64(in + 24);
    h->event_count = mlz_get_u64(in + 32);
    h->raw_len = mlz_get_u64(in + 40);
    memcpy(h->rest, in + 48, sizeof h->rest);
    if (h->version != MLZ_VERSION)
        return mlz__error_set(err, MLZ_RULE_VERSION, 4, "unsupported version %u (this reader knows 1)",
                      h->version);
    if (h->flags & ~MLZ_FLAGS_KNOWN)
        return mlz__error_set(err, MLZ_RULE_VERSION, 20, "unknown header flags 0x%x", h->flags);
    if (!(h->flags & MLZ_FLAG_SEALED) && (h->stream_len || h->event_count || h->raw_len))
        return mlz__error_set(err, MLZ_RULE_SIZE, 24, "unsealed header carries stream sizes");
    if ((h->flags & MLZ_FLAGS_BLOCKS) == MLZ_FLAGS_BLOCKS)
        return mlz__error_set(err, MLZ_RULE_VERSION, 20, "flags LZ4 and SPLIT together");
    if ((h->flags & MLZ_FLAG_ZMETA) && !(h->flags & MLZ_FLAG_SPLIT))
        return mlz__error_set(err, MLZ_RULE_VERSION, 20, "flag ZMETA without SPLIT");
    if ((h->flags & MLZ_FLAG_SPLIT2) && !(h->flags & MLZ_FLAG_SPLIT))
        return mlz__error_set(err, MLZ_RULE_VERSION, 20, "flag SPLIT2 without SPLIT");
    if ((h->flags & MLZ_FLAG_UNSEALED_V1) && !(h->flags & MLZ_FLAGS_BLOCKS))
        return mlz__error_set(err, MLZ_RULE_VERSION, 20, "flag UNSEALED_V1 without LZ4 or SPLIT");
    if ((h->flags & MLZ_FLAGS_BLOCKS) && !(h->flags & MLZ_FLAG_SEALED))
        return mlz__error_set(err, MLZ_RULE_SIZE, 20, "compressed file was never sealed (writer did not finish)");
    return 0;
}

/* ------------------------------------------------------------ the index */

static void load_index(mlz_reader *r, const char *path)
{
    char ipath[MLZ_PATH_MAX + 8];
    if (snprintf(ipath, sizeof ipath, "%s.idx", path) >= (int)sizeof ipath) return;
    FILE *f = fopen(ipath, "rb");
    if (!f) return;
    uint8_t ih[MLZ_INDEX_HEADER_SIZE];
    mlz_index_entry *v = NULL;
    if (fread(ih, 1, sizeof ih, f) != sizeof ih || memcmp(ih, MLZ_INDEX_MAGIC, 4) ||
        mlz_get_u32(ih + 4) != 1 || mlz_get_u64(ih + 8) != r->h.start_us ||
        mlz_get_u64(ih + 16) != r->data_off || mlz_get_u64(ih + 32) != r->file_size ||
        mlz_get_u64(ih + 40) != r->h.event_count)
        goto stale;
    uint64_t n = mlz_get_u64(ih + 24);
    if (n == 0 && r->stream_end == r->data_off && fgetc(f) == EOF) {   /* no events, no blocks */
        fclose(f);
        r->idx_empty = 1;
        return;
    }
    if (n == 0 || n > r->file_size / 8) goto stale;
    v = calloc((size_t)n, sizeof *v);
    if (!v) goto stale;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t e[32];
        if (fread(e, 1, 32, f) != 32) goto stale;
        v[i].file_offset = mlz_get_u64(e);
        v[i].raw_offset = mlz_get_u64(e + 8);
        v[i].base_us = mlz_get_u64(e + 16);
        v[i].first_event = mlz_get_u64(e + 24);
        if (v[i].file_offset < r->data_off || v[i].file_offset >= r->stream_end ||
            (i && (v[i].file_offset <= v[i - 1].file_offset || v[i].base_us < v[i - 1].base_us)))
            goto stale;
    }
    if (v[0].file_offset != r->data_off || fgetc(f) != EOF) goto stale;
    fclose(f);
    r->idx = v;
    r->nidx = (size_t)n;
    return;
stale:
    free(v);
    fclose(f);
}

int mlz_reader_has_index(const mlz_reader *r) { return r->nidx > 0 || r->idx_empty; }

/* ------------------------------------------------------------ open/close */

/* A decoder for the file's split blocks, of its address model
 * (codec_split.h); NULL when out of memory or without libzstd. */
static mlz_split_codec *split_decoder(const mlz_reader *r)
{
    mlz_split_codec *c = mlz_split_new(MLZ_SPLIT_LEVEL);
    if (c) mlz_split_set_model(c, r->h.flags & MLZ_FLAG_SPLIT2 ? 2 : 1);
    return c;
}

static mlz_reader *open_common(mlz_reader *r, const char *path, mlz_error *err)
{
    uint8_t hb[MLZ_HEADER_SIZE];
    if (r->file_size < 4 || src_read(r, 0, hb, 4) != 4 || memcmp(hb, MLZ_MAGIC, 4)) {
        if (r->file_size >= 4) return mlz__error_set(err, MLZ_RULE_MAGIC, 0, "bad magic, not a .mlyze file"), NULL;
        return mlz__error_set(err, MLZ_RULE_SIZE, r->file_size, "file is %llu bytes, shorter than the 256-byte header",
                      (unsigned long long)r->file_size), NULL;
    }
    if (r->file_size < MLZ_HEADER_SIZE)
        return mlz__error_set(err, MLZ_RULE_SIZE, r->file_size, "file is %llu bytes, shorter than the 256-byte header",
                      (unsigned long long)r->file_size), NULL;
    if (src_read(r, 0, hb, sizeof hb) != (ssize_t)sizeof hb)
        return mlz__error_set(err, MLZ_RULE_IO, 0, "cannot read header: %s", strerror(errno)), NULL;
    if (mlz_header_decode(hb, &r->h, err)) return NULL;

    r->data_off = MLZ_HEADER_SIZE + (uint64_t)r->h.meta_len;
    if (r->data_off > r->file_size)
        return mlz__error_set(err, MLZ_RULE_SIZE, 16, "metadata length %u runs past the end of the file (%llu bytes)",
                      r->h.meta_len, (unsigned long long)r->file_size), NULL;
    if (r->h.flags & MLZ_FLAG_SEALED) {
        uint64_t want = r->data_off + r->h.stream_len;
        if (want < r->data_off || want != r->file_size)
            return mlz__error_set(err, MLZ_RULE_SIZE, r->file_size < want ? r->file_size : want,
                          "file is %llu bytes but header + metadata + events = %llu%s",
                          (unsigned long long)r->file_size, (unsigned long long)want,
                          r->file_size < want ? " (truncated)" : " (trailing bytes)"), NULL;
        if (!(r->h.flags & MLZ_FLAGS_BLOCKS) && r->h.raw_len != r->h.stream_len)
            return mlz__error_set(err, MLZ_RULE_SIZE, 40, "raw length %llu differs from stream length %llu",
                          (unsigned long long)r->h.raw_len, (unsigned long long)r->h.stream_len), NULL;
    }
    r->stream_end = r->file_size;

    char *json = malloc(r->h.meta_len + 1u);
    if (!json) return mlz__error_set(err, MLZ_RULE_IO, 16, "out of memory for %u bytes of metadata", r->h.meta_len), NULL;
    if (src_read(r, MLZ_HEADER_SIZE, json, r->h.meta_len) != (ssize_t)r->h.meta_len) {
        free(json);
        return mlz__error_set(err, MLZ_RULE_IO, MLZ_HEADER_SIZE, "cannot read metadata"), NULL;
    }
    json[r->h.meta_len] = 0;
    size_t json_len = r->h.meta_len;
    if (r->h.flags & MLZ_FLAG_ZMETA) {
        char why[160], *plain;
        int bad = mlz_split_meta_unpack((const uint8_t *)json, json_len, &plain, &json_len, why, sizeof why);
        free(json);
        if (bad) return mlz__error_set(err, MLZ_RULE_METADATA, MLZ_HEADER_SIZE, "%s", why), NULL;
        json = plain;
    }
    int rc = mlz_meta_parse(&r->meta, json, json_len, err);
    free(json);
    if (rc) return NULL;
    r->spool = r->meta.kind && strcmp(r->meta.kind, "spool") == 0;

    r->buf = malloc(r->h.flags & MLZ_FLAG_SPLIT ? MLZ_SPLIT_MAX_RAW : RAW_BUF);
    if (!r->buf) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory"), NULL;
    if (r->h.flags & MLZ_FLAG_LZ4) {
        r->zbuf = malloc(MLZ_LZ4_BOUND + 8);
        if (!r->zbuf) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory"), NULL;
    }
    if (r->h.flags & MLZ_FLAG_SPLIT) {
        r->split = split_decoder(r);
        if (!r->split) return mlz__error_set(err, MLZ_RULE_IO, 0, "cannot set up the split-stream decoder (out of memory, or no libzstd)"), NULL;
    }
    if ((r->h.flags & MLZ_FLAGS_BLOCKS) && path && !(r->flags & MLZ_READ_NO_INDEX)) load_index(r, path);
    r->next_off = r->data_off;
    r->buf_file_off = r->data_off;
    r->time_us = r->h.start_us;
    return r;
}

mlz_reader *mlz_reader_open(const char *path, unsigned flags, mlz_error *err)
{
    /* O_NONBLOCK: a FIFO would block the open until a writer came. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return mlz__error_set(err, MLZ_RULE_IO, 0, "cannot open: %s", strerror(errno)), NULL;
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return mlz__error_set(err, MLZ_RULE_IO, 0, "not a regular file"), NULL;
    }
    fcntl(fd, F_SETFL, 0);
    mlz_reader *r = calloc(1, sizeof *r);
    if (!r) { close(fd); return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory"), NULL; }
    r->fd = fd;
    r->flags = flags;
    r->file_size = (uint64_t)st.st_size;
    if (!open_common(r, path, err)) { mlz_reader_close(r); return NULL; }
    return r;
}

mlz_reader *mlz_reader_open_mem(const void *data, size_t len, unsigned flags, mlz_error *err)
{
    mlz_reader *r = calloc(1, sizeof *r);
    if (!r) return mlz__error_set(err, MLZ_RULE_IO, 0, "out of memory"), NULL;
    r->fd = -1;
    r->mem = data;
    r->flags = flags | MLZ_READ_NO_INDEX;
    r->file_size = len;
    if (!open_common(r, NULL, err)) { mlz_reader_close(r); return NULL; }
    return r;
}

void mlz_reader_close(mlz_reader *r)
{
    if (!r) return;
    ahead_stop(r->ahead);   /* first: it may be reading the file */
    if (r->fd >= 0) close(r->fd);
    mlz_meta_free(&r->meta);
    free(r->buf);
    free(r->zbuf);
    free(r->o_len);
    free(r->o_name);
    mlz_split_free(r->split);
    free(r->seen);
    free(r->idx);
    free(r);
}

const mlz_header *mlz_reader_header(const mlz_reader *r) { return &r->h; }
const mlz_meta *mlz_reader_meta(const mlz_reader *r) { return &r->meta; }
int mlz_reader_at_block_start(const mlz_reader *r) { return r->block_start; }
int mlz_reader_was_truncated(const mlz_reader *r) { return r->truncated; }

/* ------------------------------------------------------------- events */

static int seen_set(mlz_reader *r, uint64_t id)
{
    if (id >= (uint64_t)UINT32_MAX) return -1;
    size_t byte = (size_t)(id / 8);
    if (byte >= r->seen_bytes) {
        size_t n = r->seen_bytes ? r->seen_bytes : 1024;
        while (n <= byte) n *= 2;
        uint8_t *p = realloc(r->seen, n);
        if (!p) return -1;
        memset(p + r->seen_bytes, 0, n - r->seen_bytes);
        r->seen = p;
        r->seen_bytes = n;
    }
    r->seen[byte] |= (uint8_t)(1u << (id % 8));
    return 0;
}

static int seen_has(const mlz_reader *r, uint64_t id)
{
    size_t byte = (size_t)(id / 8);
    return id < (uint64_t)UINT32_MAX && byte < r->seen_bytes && (r->seen[byte] >> (id % 8)) & 1;
}

/* Whether an ALLOC may name this stack: in a spool, a STACK_RAW before it
 * defined it; in a trace, the metadata's stack_traces. */
static int stack_known(const mlz_reader *r, uint64_t id)
{
    return r->spool ? seen_has(r, id) : mlz_meta_stack(&r->meta, id) != NULL;
}

/* Rule 4's error for an ALLOC at off naming stack id. */
static int unknown_stack(const mlz_reader *r, uint64_t id, uint64_t off, mlz_error *err)
{
    return mlz__error_set(err, MLZ_RULE_REFERENCE, off, "ALLOC names stack %llu, which is not in %s",
                          (unsigned long long)id, r->spool ? "a preceding STACK_RAW event" : "stack_traces");
}

enum { NEED_MORE = 0 };

#define GETV(dst) do { \
        size_t used_; \
        int vr_ = mlz_varint_get(p + n, end, &(dst), &used_); \
        if (vr_ == MLZ_VARINT_TRUNCATED) return NEED_MORE; \
        if (vr_ < 0) return mlz__error_set(err, MLZ_RULE_VARINT, off + n, "%s varint in %s event", \
                                   vr_ == MLZ_VARINT_OVERLONG ? "non-minimal" : "overlong", what); \
        n += used_; \
    } while (0)
#define NEED(k) do { if ((size_t)(end - p) < n + (k)) return NEED_MORE; } while (0)

/* Checks the payload of the extension events we define (spool records). */
static int check_ext(mlz_reader *r, const mlz_event *ev, mlz_error *err, uint64_t off)
{
    const uint8_t *p = ev->data, *end = ev->data + ev->len;
    size_t n = 0;
    const char *what = ev->type == MLZ_EV_STACK_RAW ? "STACK_RAW" : ev->type == MLZ_EV_MODULE ? "MODULE" : "MODULE_GONE";
    uint64_t a, b, c;
    if (ev->type == MLZ_EV_STACK_RAW) {
        GETV(a); GETV(b);
        if (b > 1024) return mlz__error_set(err, MLZ_RULE_SIZE, off, "STACK_RAW depth %llu is too deep", (unsigned long long)b);
        for (uint64_t i = 0; i < b; i++) GETV(c);
        if (n != ev->len) GETV(c);     /* the time (older spools end without it) */
        if (n != ev->len) return mlz__error_set(err, MLZ_RULE_SIZE, off, "STACK_RAW length mismatch");
        if (a == 0 || seen_set(r, a)) return mlz__error_set(err, MLZ_RULE_REFERENCE, off, "bad STACK_RAW id %llu", (unsigned long long)a);
        return 0;
    }
    if (ev->type == MLZ_EV_MODULE) {
        GETV(a); GETV(b); GETV(c); GETV(c);
        if (c > 64 || (size_t)(end - p) < n + c) return mlz__error_set(err, MLZ_RULE_SIZE, off, "MODULE build-id length mismatch");
        n += (size_t)c;
        GETV(c);
        if (c > MLZ_PATH_MAX || (size_t)(end - p) != n + c) return mlz__error_set(err, MLZ_RULE_SIZE, off, "MODULE path length mismatch");
        return 0;
    }
    if (ev->type == MLZ_EV_MODULE_GONE) {
        GETV(a); GETV(b); GETV(c);
        if (c > MLZ_PATH_MAX || (size_t)(end - p) != n + c) return mlz__error_set(err, MLZ_RULE_SIZE, off, "MODULE_GONE path length mismatch");
        return 0;
    }
    return 0;
}

/* Decodes the event at p (stream offset off). Returns its length, NEED_MORE
 * when [p,end) ends inside it, or -1 with *err. */
static int parse_event(mlz_reader *r, const uint8_t *p, const uint8_t *end,
                       uint64_t off, mlz_event *ev, mlz_error *err)
{
    size_t n = 1;
    const char *what = "an";
    if (p >= end) return NEED_MORE;
    memset(ev, 0, sizeof *ev);
    ev->type = p[0];
    ev->offset = off;
    switch (ev->type) {
    case MLZ_EV_ALLOC: what = "ALLOC"; break;
    case MLZ_EV_FREE: what = "FREE"; break;
    case MLZ_EV_GC: what = "GC"; break;
    case MLZ_EV_MARKER: what = "MARKER"; break;
    default:
        if (ev->type >= 128)
            return mlz__error_set(err, MLZ_RULE_EVENT_TYPE, off, "invalid event type %d (128..255 are reserved)", ev->type);
        what = "extension";
    }
    GETV(ev->delta_us);
    switch (ev->type) {
    case MLZ_EV_ALLOC:
        NEED(8); ev->addr = mlz_get_u64(p + n); n += 8;
        GETV(ev->size);
        GETV(ev->stack_id);
        NEED(2); ev->thread = mlz_get_u16(p + n); n += 2;
        if (!stack_known(r, ev->stack_id)) return unknown_stack(r, ev->stack_id, off, err);
        break;
    case MLZ_EV_FREE:
        NEED(8); ev->addr = mlz_get_u64(p + n); n += 8;
        break;
    case MLZ_EV_GC:
        GETV(ev->objects);
        GETV(ev->bytes);
        break;
    case MLZ_EV_MARKER:
        GETV(ev->name_id);
        if (!mlz_meta_function(&r->meta, ev->name_id))
            return mlz__error_set(err, MLZ_RULE_REFERENCE, off, "MARKER names function %llu, which is not in functions",
                          (unsigned long long)ev->name_id);
        break;
    default:
        GETV(ev->len);
        if (ev->len > MLZ_EXT_MAX)
            return mlz__error_set(err, MLZ_RULE_SIZE, off, "extension event of %llu bytes exceeds the %d-byte limit",
                          (unsigned long long)ev->len, MLZ_EXT_MAX);
        NEED((size_t)ev->len);
        ev->data = p + n;
        n += (size_t)ev->len;
        if (check_ext(r, ev, err, off)) return -1;
    }
    return (int)n;
}

/* The longest ALLOC: type, four 10-byte varints at most, address, thread. */
#define LONGEST_COMMON 41

/* One varint of an event that surely lies inside the buffer: one-byte
 * values inline; -1 (and parse_event decides) for any invalid encoding. */
static inline int varint_in(const uint8_t **q, uint64_t *v)
{
    const uint8_t *p = *q;
    if (p[0] < 0x80) { *v = p[0]; *q = p + 1; return 0; }
    size_t used;
    if (mlz_varint_get(p, p + MLZ_VARINT_MAX, v, &used) != MLZ_VARINT_OK) return -1;
    *q = p + used;
    return 0;
}

/* ALLOC and FREE, the events of almost every trace, when at least
 * LONGEST_COMMON bytes are left: parse_event's checks without its bounds
 * checks and its memset. Returns the length, or 0 for parse_event to take
 * the event (another type, a bad varint, an unknown stack: it reports). */
static inline int parse_common(const mlz_reader *r, const uint8_t *p, uint64_t off, mlz_event *ev)
{
    const uint8_t *q = p + 1;
    uint64_t delta;
    int t = p[0];
    if ((t != MLZ_EV_ALLOC && t != MLZ_EV_FREE) || varint_in(&q, &delta)) return 0;
    ev->type = t;
    ev->delta_us = delta;
    ev->offset = off;
    ev->addr = mlz_get_u64(q);
    q += 8;
    if (t == MLZ_EV_ALLOC) {
        if (varint_in(&q, &ev->size) || varint_in(&q, &ev->stack_id)) return 0;
        ev->thread = mlz_get_u16(q);
        q += 2;
        if (!stack_known(r, ev->stack_id)) return 0;
    } else {
        ev->size = ev->stack_id = 0;
        ev->thread = 0;
    }
    ev->objects = ev->bytes = ev->name_id = ev->len = 0;
    ev->data = NULL;
    return (int)(q - p);
}

/* Raw mode: keeps at least one whole event in the buffer when possible. */
static int refill_raw(mlz_reader *r, mlz_error *err)
{
    size_t keep = r->buf_len - r->buf_pos;
    memmove(r->buf, r->buf + r->buf_pos, keep);
    r->buf_file_off += r->buf_pos;
    r->buf_pos = 0;
    r->buf_len = keep;
    if (r->next_off >= r->stream_end) return 0;
    ssize_t k = src_read(r, r->next_off, r->buf + keep, RAW_BUF - keep);
    if (k < 0) return mlz__error_set(err, MLZ_RULE_IO, r->next_off, "read error: %s", strerror(errno));
    r->buf_len += (size_t)k;
    r->next_off += (uint64_t)k;
    return (int)k;
}

/* LZ4 mode: loads and decompresses the next block. 1 loaded, 0 end, -1 error. */
static int load_block(mlz_reader *r, mlz_error *err)
{
    if (r->next_off >= r->stream_end) return 0;
    uint64_t off = r->next_off;
    uint8_t bh[8];
    if (src_read(r, off, bh, 8) != 8)
        return mlz__error_set(err, MLZ_RULE_SIZE, off, "file ends inside a block header");
    uint32_t csize = mlz_get_u32(bh), rsize = mlz_get_u32(bh + 4);
    if (rsize == 0 || rsize > MLZ_BLOCK_SIZE || csize == 0 || csize > MLZ_LZ4_BOUND)
        return mlz__error_set(err, MLZ_RULE_SIZE, off, "block header has impossible sizes (%u compressed, %u raw)",
                      csize, rsize);
    if (off + 8 + csize > r->stream_end)
        return mlz__error_set(err, MLZ_RULE_SIZE, off, "block of %u bytes runs past the end of the file", csize);
    if (src_read(r, off + 8, r->zbuf, csize) != (ssize_t)csize)
        return mlz__error_set(err, MLZ_RULE_IO, off, "read error: %s", strerror(errno));
    int d = LZ4_decompress_safe((const char *)r->zbuf, (char *)r->buf, (int)csize, (int)rsize);
    if (d != (int)rsize)
        return mlz__error_set(err, MLZ_RULE_SIZE, off, "block does not decompress to its %u declared bytes", rsize);
    r->block_off = off;
    r->next_off = off + 8 + csize;
    r->buf_len = rsize;
    r->buf_pos = 0;
    return 1;
}

/* The largest payload a split block can have: the stream directory plus
 * every stream stored at its largest. */
#define SPLIT_PAYLOAD_MAX (MLZ_SPLIT_NSTREAMS * 8 + 3 * MLZ_SPLIT_MAX_EVENTS + \
                           7 * (1 + 8 * MLZ_SPLIT_MAX_EVENTS) + MLZ_SPLIT_MAX_RAW)

/* Decodes the block at off into codec (zbuf: scratch for its payload) and
 * sets *next to the offset after it; 1, or -1 with err set. Reads only what
 * open fixed, so the read-ahead thread runs it too. */
static int decode_split_at(const mlz_reader *r, mlz_split_codec *codec, uint8_t **zbuf, size_t *zbuf_cap,
                           uint64_t off, uint64_t *next, mlz_error *err)
{
    uint8_t bh[MLZ_SPLIT_HEADER];
    if (src_read(r, off, bh, sizeof bh) != (ssize_t)sizeof bh)
        return mlz__error_set(err, MLZ_RULE_SIZE, off, "file ends inside a block header");
    uint32_t plen = mlz_get_u32(bh), n = mlz_get_u32(bh + 4), rsize = mlz_get_u32(bh + 8);
    if (plen > SPLIT_PAYLOAD_MAX || n == 0 || n > MLZ_SPLIT_MAX_EVENTS || rsize == 0 || rsize > MLZ_SPLIT_MAX_RAW)
        return mlz__error_set(err, MLZ_RULE_SIZE, off, "block header has impossible sizes (%u payload, %u events, %u raw)",
                      plen, n, rsize);
    if (off + sizeof bh + plen > r->stream_end)
        return mlz__error_set(err, MLZ_RULE_SIZE, off, "block of %u bytes runs past the end of the file", plen);
    if (plen > *zbuf_cap) {
        uint8_t *z = realloc(*zbuf, plen);
        if (!z) return mlz__error_set(err, MLZ_RULE_IO, off, "out of memory");
        *zbuf = z;
        *zbuf_cap = plen;
    }
    if (src_read(r, off + sizeof bh, *zbuf, plen) != (ssize_t)plen)
        return mlz__error_set(err, MLZ_RULE_IO, off, "read error: %s", strerror(errno));
    if (mlz_split_crc(*zbuf, plen) != mlz_get_u32(bh + 12))
        return mlz__error_set(err, MLZ_RULE_SIZE, off, "block checksum mismatch (damaged block)");
    char why[200];
    int bad_kind;
    if (mlz_split_decode(codec, *zbuf, plen, n, why, sizeof why, &bad_kind))
        return mlz__error_set(err, bad_kind ? MLZ_RULE_EVENT_TYPE : MLZ_RULE_SIZE, off, "split block: %s", why);
    const mlz_split_cols *c = mlz_split_columns(codec);
    if (c->raw_len != rsize)
        return mlz__error_set(err, MLZ_RULE_SIZE, off, "block decodes to %llu v1 bytes, its header says %u",
                      (unsigned long long)c->raw_len, rsize);
    *next = off + sizeof bh + plen;
    return 1;
}

/* ------------------------------------------------------ split read-ahead */

/* With two cores, a second thread decodes block k+1 while the caller reads
 * block k: decoding is about half of what stats and top spend. The thread
 * has its own decoder; taking its block swaps the two decoders.
 *
 * A caller that reads faster than blocks decode (validate, convert, a bare
 * loop over blocks) would find the thread still busy and wait; instead it
 * decodes the block after that one itself meanwhile, into a third decoder
 * (the spare), and the thread goes on with the block after the spare's.
 * Both CPUs then decode, in turns, and blocks still come out in order. */
#define NO_BLOCK UINT64_MAX

struct read_ahead {
    mlz_worker w;
    const mlz_reader *r;
    mlz_split_codec *codec;
    uint8_t *zbuf;
    size_t zbuf_cap;
    uint64_t off, next;         /* the block asked for, and the offset after it */
    int asked;                  /* off was asked for and not taken yet */
    int rc;                     /* decode_split_at's result, and its error */
    mlz_error err;
    /* The caller's side. */
    mlz_split_codec *spare;     /* the block at spare_off, decoded beside */
    uint64_t spare_off, spare_next;
    uint64_t beside;            /* blocks decoded beside (mlz_reader_blocks_beside) */
};

static void ahead_job(void *arg)
{
    read_ahead *a = arg;
    a->rc = decode_split_at(a->r, a->codec, &a->zbuf, &a->zbuf_cap, a->off, &a->next, &a->err);
}

static void ahead_stop(read_ahead *a)
{
    if (!a) return;
    mlz_worker_stop(&a->w);
    mlz_split_free(a->codec);
    mlz_split_free(a->spare);
    free(a->zbuf);
    free(a);
}

/* The read-ahead thread with its own decoder; NULL when it cannot start. */
static read_ahead *ahead_start(const mlz_reader *r)
{
    read_ahead *a = calloc(1, sizeof *a);
    if (!a || !(a->codec = split_decoder(r))) {
        free(a);
        return NULL;
    }
    a->r = r;
    a->spare_off = NO_BLOCK;
    if (mlz_worker_start(&a->w, ahead_job, a)) {
        mlz_split_free(a->codec);
        free(a);
        return NULL;
    }
    return a;
}

/* Starts decoding the block at off, starting the thread the first time.
 * No read-ahead for a short trace (a thread costs more than it saves), on
 * one CPU, or when the thread cannot start. */
#define AHEAD_MIN_EVENTS 16384

static void ahead_ask(mlz_reader *r, uint64_t off)
{
    read_ahead *a = r->ahead;
    if (a && a->asked) return;          /* already on the block after the spare */
    if (a && a->spare_off == off) off = a->spare_next;
    if (off >= r->stream_end || r->h.event_count < AHEAD_MIN_EVENTS) return;
    if (!a) {
        if (r->ahead_failed || !mlz_worker_two_cpus()) return;
        if (!(a = r->ahead = ahead_start(r))) {
            r->ahead_failed = 1;
            return;
        }
    }
    a->off = off;               /* the worker is idle: ahead_take waited for it */
    a->asked = 1;
    mlz_worker_ask(&a->w);
}

/* The offset after the split block at off, from its header; 0 if the
 * header is unreadable or impossible (decode_split_at says why, in turn). */
static int split_block_end(const mlz_reader *r, uint64_t off, uint64_t *end)
{
    uint8_t bh[MLZ_SPLIT_HEADER];
    if (src_read(r, off, bh, sizeof bh) != (ssize_t)sizeof bh) return 0;
    uint32_t plen = mlz_get_u32(bh);
    if (plen > SPLIT_PAYLOAD_MAX || off + sizeof bh + plen > r->stream_end) return 0;
    *end = off + sizeof bh + plen;
    return 1;
}

/* The thread is still decoding block off: the caller decodes the block
 * after it into the spare meanwhile. One that fails to decode is dropped:
 * its turn comes, and the error is reported in order. */
static void decode_beside(mlz_reader *r, read_ahead *a, uint64_t off)
{
    uint64_t after, next;
    mlz_error e;
    if (!split_block_end(r, off, &after) || after >= r->stream_end) return;
    if (!a->spare && !(a->spare = split_decoder(r))) return;
    if (decode_split_at(r, a->spare, &r->zbuf, &r->zbuf_cap, after, &next, &e) != 1) return;
    a->spare_off = after;
    a->spare_next = next;
    a->beside++;
}

/* The block at off if the spare holds it (swapped in); any other block
 * there is dropped (a seek). */
static int spare_take(mlz_reader *r, uint64_t off, uint64_t *next)
{
    read_ahead *a = r->ahead;
    if (!a || a->spare_off == NO_BLOCK) return 0;
    int hit = a->spare_off == off;
    a->spare_off = NO_BLOCK;
    if (!hit) return 0;
    mlz_split_codec *c = r->split;
    r->split = a->spare;
    a->spare = c;
    *next = a->spare_next;
    return 1;
}

/* The block at off if the thread was asked for it: waits for it (decoding
 * the next one beside meanwhile) and swaps its decoder in. 0 if it was not
 * asked for (after a seek: it is dropped), else decode_split_at's result. */
static int ahead_take(mlz_reader *r, uint64_t off, uint64_t *next, mlz_error *err)
{
    read_ahead *a = r->ahead;
    if (!a || !a->asked) return 0;
    /* (spare_take emptied the spare: it is free for the next block.) */
    if (a->off == off && mlz_worker_busy(&a->w)) decode_beside(r, a, off);
    mlz_worker_wait(&a->w);
    a->asked = 0;
    if (a->off != off) return 0;
    if (a->rc < 0) {
        if (err) *err = a->err;
        return -1;
    }
    mlz_split_codec *c = r->split;
    r->split = a->codec;
    a->codec = c;
    *next = a->next;
    return 1;
}

uint64_t mlz_reader_blocks_beside(const mlz_reader *r) { return r->ahead ? r->ahead->beside : 0; }

/* SPLIT mode: loads, checks and decodes the next block into columns. */
static int load_split_block(mlz_reader *r, mlz_error *err)
{
    if (r->next_off >= r->stream_end) return 0;
    uint64_t off = r->next_off, next;
    int k = spare_take(r, off, &next);
    if (k == 0) k = ahead_take(r, off, &next, err);
    if (k == 0) k = decode_split_at(r, r->split, &r->zbuf, &r->zbuf_cap, off, &next, err);
    if (k < 0) return -1;
    r->block_off = off;
    r->next_off = next;
    r->buf_len = mlz_split_columns(r->split)->raw_len;
    r->buf_pos = 0;
    ahead_ask(r, next);
    return 1;
}

static int end_of_stream(mlz_reader *r, mlz_error *err)
{
    r->done = 1;
    if ((r->h.flags & MLZ_FLAG_SEALED) && r->events != r->h.event_count)
        return mlz__error_set(err, MLZ_RULE_SIZE, r->stream_end, "stream holds %llu events, header says %llu",
                      (unsigned long long)r->events, (unsigned long long)r->h.event_count);
    return 0;
}

static int check_stacks(mlz_reader *r, const mlz_split_cols *c, mlz_error *err);

/* SPLIT mode: the GC, MARKER or extension event of type t whose v1 bytes
 * after the delta come next in the other-events stream, re-framed as v1
 * bytes in buf and parsed there (the usual checks). 0 or -1. */
static int split_other_event(mlz_reader *r, int t, uint64_t d, mlz_event *ev, mlz_error *err)
{
    const mlz_split_cols *c = mlz_split_columns(r->split);
    const uint8_t *p = c->other + r->sp_o, *end = c->other + c->other_len, *q = p;
    uint64_t v = 0;
    size_t u = 0;
    for (int f = 0; f < (t == MLZ_EV_GC ? 2 : 1); f++) {
        if (mlz_varint_get(q, end, &v, &u)) return mlz__error_set(err, MLZ_RULE_SIZE, r->block_off, "bad other-events stream");
        q += u;
    }
    if (t >= MLZ_EV_EXT_FIRST) q += v;
    size_t tl = (size_t)(q - p), n = 1;
    r->buf[0] = (uint8_t)t;
    n += mlz_varint_put(r->buf + 1, d);
    memcpy(r->buf + n, p, tl);
    int k = parse_event(r, r->buf, r->buf + n + tl, r->block_off, ev, err);
    if (k < 0) return -1;
    if (k != (int)(n + tl)) return mlz__error_set(err, MLZ_RULE_SIZE, r->block_off, "bad other-events stream");
    ev->enc_len = (uint32_t)k;
    r->sp_o += tl;
    return 0;
}

/* SPLIT mode: hands out the events of the decoded block's columns (no v1
 * bytes in between). Extension, GC and MARKER events are re-framed as v1
 * bytes in buf and parsed there, so they get the usual checks. */
static int next_split_event(mlz_reader *r, mlz_event *ev, mlz_error *err)
{
    if (r->done) return 0;
    r->block_start = 0;
    if (r->sp_i == r->sp_n) {
        int k = load_split_block(r, err);
        if (k < 0) return -1;
        if (k == 0) return end_of_stream(r, err);
        if (check_stacks(r, mlz_split_columns(r->split), err)) return -1;
        r->sp_i = r->sp_a = r->sp_f = 0;
        r->sp_o = 0;
        r->sp_n = mlz_split_columns(r->split)->n;
        r->block_start = 1;
    }
    const mlz_split_cols *c = mlz_split_columns(r->split);   /* after the load: it may swap decoders */
    uint32_t i = r->sp_i++;
    int t = c->kind[i];
    uint64_t d = c->delta[i], time = r->time_us + d;
    /* Whole-struct literals: the fields not named are zero, without the
     * call to memset that was a quarter of this function. */
    if (t == MLZ_EV_ALLOC) {
        uint32_t a = r->sp_a++;
        uint64_t size = c->a_size[a], stack = c->a_stack[a];
        if (r->spool && !stack_known(r, stack)) return unknown_stack(r, stack, r->block_off, err);
        *ev = (mlz_event){ .type = t, .delta_us = d, .time_us = time, .offset = r->block_off,
                           .enc_len = (uint32_t)mlz_v1_alloc_len(d, size, stack), .addr = c->a_addr[a],
                           .size = size, .stack_id = stack, .thread = c->a_thread[a] };
    } else if (t == MLZ_EV_FREE) {
        *ev = (mlz_event){ .type = t, .delta_us = d, .time_us = time, .offset = r->block_off,
                           .enc_len = (uint32_t)mlz_v1_free_len(d), .addr = c->f_addr[r->sp_f++] };
    } else {
        if (split_other_event(r, t, d, ev, err)) return -1;
        ev->type = t;
        ev->delta_us = d;
        ev->offset = r->block_off;
        ev->time_us = time;
    }
    r->time_us = time;
    r->events++;
    return 1;
}

static int next_event(mlz_reader *r, mlz_event *ev, mlz_error *err)
{
    if (r->split) return next_split_event(r, ev, err);
    if (r->done) return 0;
    int lz4 = (r->h.flags & MLZ_FLAGS_BLOCKS) != 0;
    for (;;) {
        if (lz4 && r->buf_pos == r->buf_len) {
            int b = load_block(r, err);
            if (b < 0) return -1;
            if (b == 0) return end_of_stream(r, err);
        }
        uint64_t off = lz4 ? r->block_off : r->buf_file_off + r->buf_pos;
        r->block_start = lz4 && r->buf_pos == 0;
        int n = r->buf_len - r->buf_pos >= LONGEST_COMMON ? parse_common(r, r->buf + r->buf_pos, off, ev) : 0;
        if (n == 0) n = parse_event(r, r->buf + r->buf_pos, r->buf + r->buf_len, off, ev, err);
        if (n < 0) return -1;
        if (n > 0) {
            ev->enc_len = (uint32_t)n;
            r->buf_pos += (size_t)n;
            r->time_us += ev->delta_us;
            ev->time_us = r->time_us;
            r->events++;
            if (r->events == UINT64_MAX)
                return mlz__error_set(err, MLZ_RULE_SIZE, off, "too many events");
            return 1;
        }
        /* The buffer ends inside an event. */
        if (lz4)
            return mlz__error_set(err, MLZ_RULE_SIZE, off, "an event runs past the end of its block");
        size_t left = r->buf_len - r->buf_pos;
        int k = refill_raw(r, err);
        if (k < 0) return -1;
        if (k == 0) {
            if (left == 0) return end_of_stream(r, err);
            if ((r->flags & MLZ_READ_TRUNCATED_OK) && !(r->h.flags & MLZ_FLAG_SEALED)) {
                r->truncated = 1;
                r->done = 1;
                return 0;
            }
            return mlz__error_set(err, MLZ_RULE_SIZE, off, "file ends inside an event (%zu bytes of it present)", left);
        }
    }
}

int mlz_reader_next(mlz_reader *r, mlz_event *ev, mlz_error *err)
{
    if (r->have_pending) {
        *ev = r->pending;
        r->have_pending = 0;
        return 1;
    }
    return next_event(r, ev, err);
}

int mlz_reader_seek_time(mlz_reader *r, uint64_t t_us, mlz_error *err)
{
    if (!r->nidx) return mlz__error_set(err, MLZ_RULE_IO, 0, "no usable .mlyze.idx index");
    size_t lo = 0, hi = r->nidx;      /* last block whose base time is < t */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (r->idx[mid].base_us < t_us) lo = mid; else hi = mid;
    }
    /* A pending event handed out after a seek keeps its block flag. */
    const mlz_index_entry *e = &r->idx[lo];
    r->next_off = e->file_offset;
    r->buf_len = r->buf_pos = 0;
    r->sp_i = r->sp_n = 0;
    r->time_us = e->base_us;
    r->events = e->first_event;
    r->done = 0;
    r->have_pending = 0;
    mlz_event ev;
    for (;;) {
        int rc = next_event(r, &ev, err);
        if (rc <= 0) return rc;
        if (ev.time_us >= t_us) {
            r->pending = ev;
            r->have_pending = 1;
            return 0;
        }
    }
}

/* Rule 4 over a column of stack ids; consecutive repeats are checked once.
 * A spool's block may hold the STACK_RAW events its ALLOCs name: there the
 * check goes in event order (next_split_event, mlz_reader_next_block), and
 * here returns 0. */
static int check_stacks(mlz_reader *r, const mlz_split_cols *c, mlz_error *err)
{
    if (r->spool) return 0;
    /* A trace's stack ids are usually dense: then a block whose ids lie
     * within them is checked by its smallest and largest (the decoder
     * finds them), not id by id. */
    size_t ns = r->meta.nstacks;
    if (!r->spool && ns && r->meta.stacks[ns - 1].id - r->meta.stacks[0].id == ns - 1) {
        if (!c->nalloc || (c->stack_lo >= r->meta.stacks[0].id && c->stack_hi <= r->meta.stacks[ns - 1].id))
            return 0;
    }
    uint64_t last = UINT64_MAX;
    int last_ok = 0;
    for (uint32_t i = 0; i < c->nalloc; i++) {
        uint64_t id = c->a_stack[i];
        if (id == last && last_ok) continue;
        last = id;
        last_ok = stack_known(r, id);
        if (!last_ok) return unknown_stack(r, id, r->block_off, err);
    }
    return 0;
}

int mlz_reader_next_block(mlz_reader *r, mlz_block_view *b, mlz_error *err)
{
    if (!r->split) return mlz__error_set(err, MLZ_RULE_IO, 0, "not a split-stream file");
    if (r->sp_i < r->sp_n) return mlz__error_set(err, MLZ_RULE_IO, r->block_off, "whole blocks asked for in the middle of one");
    if (r->done) return 0;
    int k = load_split_block(r, err);
    if (k < 0) return -1;
    if (k == 0) return end_of_stream(r, err);
    const mlz_split_cols *c = mlz_split_columns(r->split);
    if (check_stacks(r, c, err)) return -1;
    /* GC, MARKER and extension events get the checks mlz_reader_next gives. */
    r->sp_o = 0;
    uint32_t no = c->n - c->nalloc - c->nfree;
    if (no || r->spool) {
        if (r->o_len_cap < no) {
            uint32_t *v = realloc(r->o_len, no * sizeof *v);
            if (v) r->o_len = v;
            uint64_t *nm = v ? realloc(r->o_name, no * sizeof *nm) : NULL;
            if (!nm) return mlz__error_set(err, MLZ_RULE_IO, r->block_off, "out of memory");
            r->o_name = nm;
            r->o_len_cap = no;
        }
        mlz_event ev;
        for (uint32_t i = 0, j = 0, a = 0; i < c->n; i++)
            if (c->kind[i] == MLZ_EV_ALLOC) {
                if (r->spool && !stack_known(r, c->a_stack[a])) return unknown_stack(r, c->a_stack[a], r->block_off, err);
                a++;
            } else if (c->kind[i] != MLZ_EV_FREE) {
                if (split_other_event(r, c->kind[i], c->delta[i], &ev, err)) return -1;
                r->o_name[j] = ev.type == MLZ_EV_MARKER ? ev.name_id : 0;
                r->o_len[j++] = ev.enc_len;
            }
    }
    b->o_len = r->o_len;
    b->o_name = r->o_name;
    b->n = c->n;
    b->nalloc = c->nalloc;
    b->nfree = c->nfree;
    b->first_event = r->events;
    b->base_us = r->time_us;
    b->kind = c->kind;
    b->delta = c->delta;
    b->a_addr = c->a_addr;
    b->a_size = c->a_size;
    b->a_stack = c->a_stack;
    b->a_thread = c->a_thread;
    b->f_addr = c->f_addr;
    b->alloc_v1_bytes = c->alloc_v1_bytes;
    b->free_v1_bytes = c->free_v1_bytes;
    r->time_us += c->delta_sum;
    r->events += c->n;
    r->sp_i = r->sp_n = 0;
    return 1;
}
