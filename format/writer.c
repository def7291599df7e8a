/*
 * writer.c - writes .mlyze files without allocating.
 *
 * Used inside profiled processes (the payload's spool) and by the tools
 * (finalize, undump). Everything lives in the caller's mlz_writer and
 * buffers; output goes through write(2)/pwrite(2) with EINTR and short
 * writes handled. The file is built under a temporary name, its header is
 * sealed with the final sizes, fsync'ed and only then renamed into place:
 * a reader never finds a half-written file under the real name.
 *
 * In LZ4 mode the buffer is one 64 KiB block: events never straddle blocks,
 * so each block decodes on its own and the .mlyze.idx index can point at it.
 */
#include "mlz_format.h"
#include "codec_split.h"
#include "tmp_guard.h"
#include "worker.h"
#include "varint.h"

#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* Weak, so that the injected payload, which never compresses, does not
 * depend on liblz4 being present in the target's file system. */
#pragma weak LZ4_compress_default

/* ------------------------------------------------------------- helpers */

/*
 * Descriptors. The injected payload writes its spool from inside a program
 * that owns the descriptor table: it may close every descriptor (a daemon
 * starting) or dup2() a file of its own onto one of ours (`exec 4>file` in
 * a shell), and the next write would land in the program's file. So our
 * files sit high, above the numbers programs pick, and every write first
 * checks that the number still names our file. If it does not, the file is
 * opened again by its name, and the number is left alone: it is the
 * program's now.
 */
static int move_high(int fd)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return fd;
    rlim_t top = rl.rlim_cur < 1024 ? rl.rlim_cur : 1024;   /* a bigger table would cost the program memory */
    int base = (int)(top / 4 * 3);
    int nfd = fd < base ? fcntl(fd, F_DUPFD_CLOEXEC, base) : -1;
    if (nfd < 0) return fd;
    close(fd);
    return nfd;
}

static int names_file(int fd, uint64_t dev, uint64_t ino)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino;
}

/* open(2), moved high, its file's identity in *dev and *ino; -errno. */
static int open_own(const char *path, int flags, int mode, uint64_t *dev, uint64_t *ino)
{
    int fd = open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0) return -errno;
    struct stat st;
    if (fstat(fd, &st)) {
        int e = -errno;
        close(fd);
        return e;
    }
    *dev = (uint64_t)st.st_dev;
    *ino = (uint64_t)st.st_ino;
    return move_high(fd);
}

/* *fd names the file (dev, ino) of path, again if need be (reopened, at
 * its end). 0, or -EBADF with *fd = -1 when the file is gone. */
static int keep_own(int *fd, const char *path, uint64_t dev, uint64_t ino)
{
    if (names_file(*fd, dev, ino)) return 0;
    uint64_t d, i;
    int nfd = open_own(path, O_WRONLY, 0, &d, &i);
    *fd = -1;
    if (nfd < 0) return -EBADF;
    if (d != dev || i != ino || lseek(nfd, 0, SEEK_END) < 0) {
        close(nfd);
        return -EBADF;
    }
    *fd = nfd;
    return 0;
}

/* Closes *fd if it still names our file. */
static void close_own(int *fd, uint64_t dev, uint64_t ino)
{
    if (names_file(*fd, dev, ino)) close(*fd);
    *fd = -1;
}

/* Before writing: both files still ours (the index only while open). */
static int own_fds(mlz_writer *w)
{
    int rc = keep_own(&w->fd, w->tmp, w->fd_dev, w->fd_ino);
    if (!rc && w->idx_fd >= 0) rc = keep_own(&w->idx_fd, w->idx_tmp, w->idx_dev, w->idx_ino);
    return rc;
}

/*
 * A write that starts at or past RLIMIT_FSIZE gets the process SIGXFSZ,
 * whose default is death: inside a profiled program, the program's. The
 * limit is looked up before each write (the program may lower it at any
 * time, even just before exit while its last spool block is written on
 * its own thread), and such a write fails with EFBIG instead. Below the
 * limit the kernel shortens a write to end there; the next one stops here.
 */
static int past_fsize_limit(off_t pos)
{
    struct rlimit rl;
    return pos >= 0 && !getrlimit(RLIMIT_FSIZE, &rl) && rl.rlim_cur != RLIM_INFINITY && (rlim_t)pos >= rl.rlim_cur;
}

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    off_t pos = lseek(fd, 0, SEEK_CUR);      /* -1 (a pipe): no limit applies */
    while (n > 0) {
        if (past_fsize_limit(pos)) return -EFBIG;
        ssize_t k = write(fd, b, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        b += k;
        n -= (size_t)k;
        if (pos >= 0) pos += k;
    }
    return 0;
}

static int pwrite_all(int fd, const void *p, size_t n, off_t off)
{
    const uint8_t *b = p;
    while (n > 0) {
        if (past_fsize_limit(off)) return -EFBIG;
        ssize_t k = pwrite(fd, b, n, off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        b += k;
        n -= (size_t)k;
        off += k;
    }
    return 0;
}

/* Bounded string building without snprintf (which may allocate). */
static int build_path(char *dst, size_t cap, const char *a, const char *b, long pid, const char *c)
{
    size_t n = 0;
    const char *parts[2] = { a, b };
    for (int i = 0; i < 2; i++)
        for (const char *s = parts[i]; s && *s; s++) {
            if (n + 1 >= cap) return -ENAMETOOLONG;
            dst[n++] = *s;
        }
    if (pid >= 0) {
        char num[24];
        int k = 0;
        unsigned long v = (unsigned long)pid;
        do { num[k++] = (char)('0' + v % 10); v /= 10; } while (v);
        if (n + 1 + (size_t)k + 1 >= cap) return -ENAMETOOLONG;
        dst[n++] = '.';
        while (k) dst[n++] = num[--k];
    }
    for (const char *s = c; s && *s; s++) {
        if (n + 1 >= cap) return -ENAMETOOLONG;
        dst[n++] = *s;
    }
    dst[n] = 0;
    return 0;
}

void mlz_header_encode(const mlz_header *h, uint8_t out[MLZ_HEADER_SIZE])
{
    memset(out, 0, MLZ_HEADER_SIZE);
    memcpy(out, MLZ_MAGIC, 4);
    mlz_put_u32(out + 4, h->version);
    mlz_put_u64(out + 8, h->start_us);
    mlz_put_u32(out + 16, h->meta_len);
    mlz_put_u32(out + 20, h->flags);
    mlz_put_u64(out + 24, h->stream_len);
    mlz_put_u64(out + 32, h->event_count);
    mlz_put_u64(out + 40, h->raw_len);
    memcpy(out + 48, h->rest, sizeof h->rest);
}

static int fail(mlz_writer *w, int e)
{
    if (!w->err) w->err = e;
    return w->err;
}

static int fail_idx(mlz_writer *w, int e)
{
    if (!w->err) w->err_in_idx = 1;
    return fail(w, e);
}

const char *mlz_writer_error_path(const mlz_writer *w, const char *path)
{
    return w->err_in_idx ? w->idx_path : path;
}

/* ------------------------------------------------------------ open/close */

/* The unsealed header (the sealed one replaces it at close) and the
 * metadata. Split files carry their metadata zstd-compressed: on a recorded
 * server the symbolized stacks outweigh the events (docs/FORMAT.md). */
static int write_head(mlz_writer *w, const mlz_writer_opts *o)
{
    const void *meta = o->meta;
    size_t meta_len = o->meta_len;
    uint8_t *zmeta = NULL;
    if (w->flags & MLZ_FLAG_SPLIT) {
        long n = mlz_split_meta_pack(o->meta, o->meta_len, o->level ? o->level : MLZ_SPLIT_LEVEL, &zmeta);
        if (n < 0) return -ENOMEM;
        meta = zmeta;
        meta_len = (size_t)n;
        w->flags |= MLZ_FLAG_ZMETA | MLZ_FLAG_SPLIT2;
    }
    w->meta_len = (uint32_t)meta_len;
    mlz_header h = { .version = MLZ_VERSION, .start_us = o->start_us,
                     .meta_len = w->meta_len, .flags = w->flags };
    uint8_t hb[MLZ_HEADER_SIZE];
    mlz_header_encode(&h, hb);
    int rc = write_all(w->fd, hb, sizeof hb);
    if (!rc) rc = write_all(w->fd, meta, meta_len);
    free(zmeta);
    return rc;
}

int mlz_writer_open(mlz_writer *w, const char *path, const mlz_writer_opts *o)
{
    memset(w, 0, sizeof *w);
    w->fd = w->idx_fd = -1;
    if (o->buf_size < MLZ_BLOCK_SIZE || !o->buf) return fail(w, -EINVAL);
    if ((o->flags & ~MLZ_FLAGS_BLOCKS) != 0 || o->flags == MLZ_FLAGS_BLOCKS) return fail(w, -EINVAL);
    if (o->flags & MLZ_FLAG_LZ4) {
        if (!LZ4_compress_default) return fail(w, -ENOTSUP);
        if (!o->zbuf || o->zbuf_size < MLZ_LZ4_BOUND) return fail(w, -EINVAL);
    }
    if (o->meta_len > UINT32_MAX) return fail(w, -EFBIG);
    if (o->level < 0 || o->level > MLZ_SPLIT_LEVEL_MAX) return fail(w, -EINVAL);

    w->flags = o->flags;
    w->replace = o->replace;
    w->keep_on_error = o->keep_on_error && !(o->flags & MLZ_FLAGS_BLOCKS);
    /* Block files are always sealed: one whose v1 form is unsealed says so
     * by a flag, so that converting it back gives that file again. */
    w->plain = o->plain && !(o->flags & MLZ_FLAGS_BLOCKS);
    if (o->plain && (o->flags & MLZ_FLAGS_BLOCKS)) w->flags |= MLZ_FLAG_UNSEALED_V1;
    w->buf = o->buf;
    w->cap = (o->flags & MLZ_FLAG_LZ4) ? MLZ_BLOCK_SIZE : o->buf_size;
    if (o->flags & MLZ_FLAG_SPLIT) {
        if (w->cap > MLZ_SPLIT_MAX_RAW) w->cap = MLZ_SPLIT_MAX_RAW;
        w->level = o->level ? o->level : MLZ_SPLIT_LEVEL;
        if (!(w->split = mlz_split_new(w->level))) return fail(w, -ENOTSUP);
    }
    w->zbuf = o->zbuf;
    w->zcap = o->zbuf_size;
    w->start_us = w->last_us = w->block_base_us = o->start_us;

    long pid = (long)getpid();
    int rc;
    if ((rc = build_path(w->path, sizeof w->path, path, NULL, -1, NULL)) ||
        (rc = build_path(w->tmp, sizeof w->tmp, path, NULL, pid, ".tmp")))
        return fail(w, rc);
    int mode = o->mode ? o->mode : 0644;
    /* O_EXCL|O_NOFOLLOW: never write through a planted symlink. */
    w->fd = open_own(w->tmp, O_WRONLY | O_CREAT | O_EXCL, mode, &w->fd_dev, &w->fd_ino);
    if (w->fd < 0) {
        rc = w->fd;
        w->fd = -1;
        return fail(w, rc);
    }
    mlz_tmp_guard_add(w->tmp);

    if (o->flags & MLZ_FLAGS_BLOCKS) {
        if ((rc = build_path(w->idx_path, sizeof w->idx_path, path, ".idx", -1, NULL)) ||
            (rc = build_path(w->idx_tmp, sizeof w->idx_tmp, path, ".idx", pid, ".tmp"))) {
            mlz_writer_abort(w);
            return fail(w, rc);
        }
        /* A directory in the index's place would only fail the rename at
         * close, after all the work. */
        struct stat st;
        if (!stat(w->idx_path, &st) && S_ISDIR(st.st_mode)) {
            mlz_writer_abort(w);
            return fail_idx(w, -EISDIR);
        }
        w->idx_fd = open_own(w->idx_tmp, O_WRONLY | O_CREAT | O_EXCL, mode, &w->idx_dev, &w->idx_ino);
        if (w->idx_fd < 0) {
            rc = w->idx_fd;
            w->idx_fd = -1;
            mlz_writer_abort(w);
            return fail_idx(w, rc);
        }
        mlz_tmp_guard_add(w->idx_tmp);
        uint8_t ih[MLZ_INDEX_HEADER_SIZE] = { 0 };
        if ((rc = write_all(w->idx_fd, ih, sizeof ih))) { mlz_writer_abort(w); return fail(w, rc); }
    }

    if ((rc = write_head(w, o))) {
        mlz_writer_abort(w);
        return fail(w, rc);
    }
    return 0;
}

/* One encoded block and its index entry: where its raw bytes start, its
 * base time and first event. */
static int write_block(mlz_writer *w, const uint8_t *blk, size_t blen, uint64_t raw_off,
                       uint64_t base_us, uint64_t first_event)
{
    uint8_t ent[32];
    int rc;
    mlz_put_u64(ent, MLZ_HEADER_SIZE + (uint64_t)w->meta_len + w->stream_len);
    mlz_put_u64(ent + 8, raw_off);
    mlz_put_u64(ent + 16, base_us);
    mlz_put_u64(ent + 24, first_event);
    if ((rc = own_fds(w)) || (rc = write_all(w->fd, blk, blen)) ||
        (rc = write_all(w->idx_fd, ent, sizeof ent)))
        return fail(w, rc);
    w->stream_len += blen;
    w->nblocks++;
    return 0;
}

/* The buffered events are handed over (or written): a new block starts. */
static void block_done(mlz_writer *w)
{
    w->raw_len += w->len;
    w->len = 0;
    w->block_base_us = w->last_us;
    w->block_first_event = w->events;
}

/* ------------------------------------------------- split: encode behind */

/* With two CPUs a second thread encodes split block k while the caller
 * fills block k+1: zstd is most of the time a split file takes to write
 * (finalize at detach, convert). Blocks reach the file in order: block k
 * is written when block k+1 is handed over, or at close. The thread has its
 * own encoder; the caller's buffer and a second one of the same size take
 * turns. The bytes written are the same as the one-thread path's. */
struct mlz_encode_behind {
    mlz_worker w;
    mlz_split_codec *codec;
    const uint8_t *raw;                 /* the block being encoded */
    size_t raw_len;
    uint64_t raw_off, base_us, first_event;
    const uint8_t *out;                 /* its encoding, in codec */
    long out_len;                       /* <= 0: encoding failed */
    uint8_t *spare, *own;               /* the buffer the caller gets next; ours to free */
};

static void behind_job(void *arg)
{
    struct mlz_encode_behind *b = arg;
    b->out_len = mlz_split_encode(b->codec, b->raw, b->raw_len, &b->out);
}

static void behind_free(struct mlz_encode_behind *b)
{
    mlz_split_free(b->codec);
    free(b->own);
    free(b);
}

static void behind_stop(mlz_writer *w)
{
    if (!w->behind) return;
    mlz_worker_stop(&w->behind->w);
    behind_free(w->behind);
    w->behind = NULL;
}

/* The thread, when this process may run on two CPUs; NULL otherwise, or
 * if it cannot start (the caller then encodes every block itself). */
static struct mlz_encode_behind *behind_start(mlz_writer *w)
{
    if (w->behind_failed || !mlz_worker_two_cpus()) return NULL;
    struct mlz_encode_behind *b = calloc(1, sizeof *b);
    if (b && (!(b->codec = mlz_split_new(w->level)) || !(b->own = malloc(w->cap)) ||
              mlz_worker_start(&b->w, behind_job, b))) {
        behind_free(b);
        b = NULL;
    }
    if (!b) {
        w->behind_failed = 1;
        return NULL;
    }
    b->spare = b->own;
    return w->behind = b;
}

/* Waits for the block being encoded, if any, and writes it. */
static int behind_collect(mlz_writer *w)
{
    struct mlz_encode_behind *b = w->behind;
    if (!mlz_worker_wait(&b->w)) return 0;
    if (b->out_len <= 0) return fail(w, -EIO);
    return write_block(w, b->out, (size_t)b->out_len, b->raw_off, b->base_us, b->first_event);
}

/* With the thread free: writes the block it finished, if any, hands it the
 * buffered one and takes the other buffer. */
static int behind_hand(mlz_writer *w)
{
    struct mlz_encode_behind *b = w->behind;
    int rc = behind_collect(w);
    if (rc) return rc;
    uint8_t *next = b->spare;
    b->raw = w->buf;
    b->raw_len = w->len;
    b->raw_off = w->raw_len;
    b->base_us = w->block_base_us;
    b->first_event = w->block_first_event;
    mlz_worker_ask(&b->w);
    b->spare = w->buf;
    w->buf = next;
    block_done(w);
    return 0;
}

/* Writes the buffered events: as they are (raw) or as one block. `last`:
 * at close, so a split file of one block starts no thread. */
static int flush(mlz_writer *w, int last)
{
    if (w->len == 0 || w->err) return w->err;
    int rc;
    if (!(w->flags & MLZ_FLAGS_BLOCKS)) {
        if ((rc = own_fds(w)) || (rc = write_all(w->fd, w->buf, w->len))) return fail(w, rc);
        w->stream_len += w->len;
        block_done(w);
        return 0;
    }
    const uint8_t *blk;
    size_t blen;
    if (w->split) {
        /* The thread free: it takes this block. Still encoding the one
         * before (blocks fill faster than they encode): this one is
         * encoded here meanwhile, and written after that one. */
        int beside = 0;
        if (w->behind || (!last && behind_start(w))) {
            if (!mlz_worker_busy(&w->behind->w)) return behind_hand(w);
            beside = 1;
        }
        long n = mlz_split_encode(w->split, w->buf, w->len, &blk);
        if (beside && (rc = behind_collect(w))) return rc;
        if (n <= 0) return fail(w, -EIO);
        blen = (size_t)n;
    } else {
        int c = LZ4_compress_default((const char *)w->buf, (char *)w->zbuf + 8,
                                     (int)w->len, (int)w->zcap - 8);
        if (c <= 0) return fail(w, -EIO);
        mlz_put_u32(w->zbuf, (uint32_t)c);
        mlz_put_u32(w->zbuf + 4, (uint32_t)w->len);
        blk = w->zbuf;
        blen = (size_t)c + 8;
    }
    if ((rc = write_block(w, blk, blen, w->raw_len, w->block_base_us, w->block_first_event))) return rc;
    block_done(w);
    return 0;
}

int mlz_writer_end_block(mlz_writer *w)
{
    return flush(w, 0);
}

void mlz_writer_set_header_rest(mlz_writer *w, const uint8_t rest[MLZ_HEADER_SIZE - 48])
{
    memcpy(w->rest, rest, sizeof w->rest);
}

int mlz_writer_close(mlz_writer *w)
{
    int rc = flush(w, 1);
    if (!rc && w->behind) rc = behind_collect(w);
    /* The error is noted before the abort: keep_on_error looks at it. */
    if (rc) { fail(w, rc); mlz_writer_abort(w); return rc; }
    behind_stop(w);
    mlz_split_free(w->split);
    w->split = NULL;

    mlz_header h = { .version = MLZ_VERSION, .start_us = w->start_us,
                     .meta_len = w->meta_len, .flags = w->flags | MLZ_FLAG_SEALED,
                     .stream_len = w->stream_len, .event_count = w->events,
                     .raw_len = w->raw_len };
    if (w->plain) {
        h.flags = 0;
        h.stream_len = h.event_count = h.raw_len = 0;
    }
    memcpy(h.rest, w->rest, sizeof h.rest);
    uint8_t hb[MLZ_HEADER_SIZE];
    mlz_header_encode(&h, hb);
    if ((rc = own_fds(w)) || (rc = pwrite_all(w->fd, hb, sizeof hb, 0)) || (fsync(w->fd) && (rc = -errno))) {
        fail(w, rc);
        mlz_writer_abort(w);
        return w->err;
    }

    if (w->idx_fd >= 0) {
        uint8_t ih[MLZ_INDEX_HEADER_SIZE] = { 0 };
        memcpy(ih, MLZ_INDEX_MAGIC, 4);
        mlz_put_u32(ih + 4, 1);
        mlz_put_u64(ih + 8, w->start_us);
        mlz_put_u64(ih + 16, MLZ_HEADER_SIZE + (uint64_t)w->meta_len);
        mlz_put_u64(ih + 24, w->nblocks);
        mlz_put_u64(ih + 32, MLZ_HEADER_SIZE + (uint64_t)w->meta_len + w->stream_len);
        mlz_put_u64(ih + 40, w->events);
        if ((rc = pwrite_all(w->idx_fd, ih, sizeof ih, 0)) ||
            (fsync(w->idx_fd) && (rc = -errno))) {
            mlz_writer_abort(w);
            return fail(w, rc);
        }
        close_own(&w->idx_fd, w->idx_dev, w->idx_ino);
        /* The index goes first: a main file under its real name always has
         * its index beside it (a stale index is detected by its sizes). */
        if (rename(w->idx_tmp, w->idx_path)) {
            rc = -errno;
            mlz_writer_abort(w);
            return fail_idx(w, rc);
        }
    }
    close_own(&w->fd, w->fd_dev, w->fd_ino);
    if (w->replace) {
        rc = rename(w->tmp, w->path) ? -errno : 0;
    } else {
        /* link() fails with EEXIST instead of replacing: never overwrite. */
        rc = link(w->tmp, w->path) ? -errno : 0;
        unlink(w->tmp);
    }
    if (rc) {
        if (!w->keep_on_error) unlink(w->tmp);
        if (w->idx_path[0]) unlink(w->idx_path);
    }
    mlz_tmp_guard_drop(w->tmp);
    mlz_tmp_guard_drop(w->idx_tmp);
    return rc ? fail(w, rc) : 0;
}

void mlz_writer_forget(mlz_writer *w)
{
    close_own(&w->fd, w->fd_dev, w->fd_ino);
    close_own(&w->idx_fd, w->idx_dev, w->idx_ino);
}

void mlz_writer_abort(mlz_writer *w)
{
    behind_stop(w);
    close_own(&w->fd, w->fd_dev, w->fd_ino);
    close_own(&w->idx_fd, w->idx_dev, w->idx_ino);
    if (w->tmp[0] && !(w->keep_on_error && w->err)) unlink(w->tmp);
    if (w->idx_tmp[0]) unlink(w->idx_tmp);
    mlz_tmp_guard_drop(w->tmp);
    mlz_tmp_guard_drop(w->idx_tmp);
    mlz_split_free(w->split);
    w->split = NULL;
}

/* --------------------------------------------------------------- events */

static int reserve_slow(mlz_writer *w, size_t n)
{
    if (w->err) return w->err;
    if (w->len + n > w->cap) return flush(w, 0);
    if (w->split && w->events - w->block_first_event >= MLZ_SPLIT_MAX_EVENTS) return flush(w, 0);
    return 0;
}

/* Makes room for an event of at most n bytes; 0 or the sticky error. The
 * common case, a plain writer with room, is inline: the payload's drain
 * thread writes every event of exact mode through here. */
static inline int reserve(mlz_writer *w, size_t n)
{
    if (__builtin_expect(!w->err && !w->split && w->len + n <= w->cap, 1)) return 0;
    return reserve_slow(w, n);
}

/* Events from several threads can arrive slightly out of order; a negative
 * delta cannot be encoded, so such an event keeps its predecessor's time. */
static uint64_t delta_to(const mlz_writer *w, uint64_t t_us)
{
    return t_us > w->last_us ? t_us - w->last_us : 0;
}

static size_t put_head(mlz_writer *w, uint8_t type, uint64_t delta)
{
    w->last_us += delta;
    uint8_t *p = w->buf + w->len;
    p[0] = type;
    return 1 + mlz_varint_put(p + 1, delta);
}

static int put_alloc(mlz_writer *w, uint64_t delta, uint64_t addr, uint64_t size,
                     uint64_t stack_id, uint16_t thread)
{
    int rc = reserve(w, 1 + 10 + 8 + 10 + 10 + 2);
    if (rc) return rc;
    size_t n = put_head(w, MLZ_EV_ALLOC, delta);
    uint8_t *p = w->buf + w->len;
    mlz_put_u64(p + n, addr); n += 8;
    n += mlz_varint_put(p + n, size);
    n += mlz_varint_put(p + n, stack_id);
    mlz_put_u16(p + n, thread); n += 2;
    w->len += n;
    w->events++;
    return 0;
}

static int put_free(mlz_writer *w, uint64_t delta, uint64_t addr)
{
    int rc = reserve(w, 1 + 10 + 8);
    if (rc) return rc;
    size_t n = put_head(w, MLZ_EV_FREE, delta);
    mlz_put_u64(w->buf + w->len + n, addr);
    w->len += n + 8;
    w->events++;
    return 0;
}

static int put_gc(mlz_writer *w, uint64_t delta, uint64_t objects, uint64_t bytes)
{
    int rc = reserve(w, 1 + 30);
    if (rc) return rc;
    size_t n = put_head(w, MLZ_EV_GC, delta);
    uint8_t *p = w->buf + w->len;
    n += mlz_varint_put(p + n, objects);
    n += mlz_varint_put(p + n, bytes);
    w->len += n;
    w->events++;
    return 0;
}

static int put_marker(mlz_writer *w, uint64_t delta, uint64_t name_id)
{
    int rc = reserve(w, 1 + 20);
    if (rc) return rc;
    size_t n = put_head(w, MLZ_EV_MARKER, delta);
    n += mlz_varint_put(w->buf + w->len + n, name_id);
    w->len += n;
    w->events++;
    return 0;
}

static int put_ext(mlz_writer *w, unsigned type, uint64_t delta,
                   const void *payload, size_t len)
{
    if (type < MLZ_EV_EXT_FIRST || type > 255 || len > MLZ_EXT_MAX)
        return fail(w, -EINVAL);
    int rc = reserve(w, 1 + 10 + 10 + len);
    if (rc) return rc;
    size_t n = put_head(w, (uint8_t)type, delta);
    uint8_t *p = w->buf + w->len;
    n += mlz_varint_put(p + n, len);
    memcpy(p + n, payload, len);
    w->len += n + len;
    w->events++;
    return 0;
}

int mlz_writer_alloc(mlz_writer *w, uint64_t t_us, uint64_t addr, uint64_t size,
                     uint64_t stack_id, uint16_t thread)
{
    return put_alloc(w, delta_to(w, t_us), addr, size, stack_id, thread);
}

int mlz_writer_free(mlz_writer *w, uint64_t t_us, uint64_t addr)
{
    return put_free(w, delta_to(w, t_us), addr);
}

int mlz_writer_gc(mlz_writer *w, uint64_t t_us, uint64_t objects, uint64_t bytes)
{
    return put_gc(w, delta_to(w, t_us), objects, bytes);
}

int mlz_writer_marker(mlz_writer *w, uint64_t t_us, uint64_t name_id)
{
    return put_marker(w, delta_to(w, t_us), name_id);
}

int mlz_writer_ext(mlz_writer *w, unsigned type, uint64_t t_us, const void *payload, size_t len)
{
    return put_ext(w, type, delta_to(w, t_us), payload, len);
}

/* Undump: the event keeps exactly the delta it had. */
int mlz_writer_raw_event(mlz_writer *w, const mlz_event *ev)
{
    uint64_t d = ev->delta_us;
    switch (ev->type) {
    case MLZ_EV_ALLOC:  return put_alloc(w, d, ev->addr, ev->size, ev->stack_id, ev->thread);
    case MLZ_EV_FREE:   return put_free(w, d, ev->addr);
    case MLZ_EV_GC:     return put_gc(w, d, ev->objects, ev->bytes);
    case MLZ_EV_MARKER: return put_marker(w, d, ev->name_id);
    default:            return put_ext(w, (unsigned)ev->type, d, ev->data, ev->len);
    }
}
