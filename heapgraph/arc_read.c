/*
 * arc_read.c - reads a .arc stream and checks it against every rule of
 * seed 003 (docs/FORMAT.md lists them with their names):
 *
 *   truncated      a header, bitmap or data runs past the end
 *   unused-bits    header bits 48..62 are not 0
 *   class-bit      header bit 42 is not 1
 *   alignment      the offset-bit field is not the one the size requires
 *                  (objectid aligned to 2^max(5, ceil(log2(size))))
 *   bitmap-padding a bitmap bit beyond the object's whole words is set
 *   overlap        two objects' id ranges overlap
 *   declared-once  an object is fully declared twice
 *   forward-once   forward-declared twice, or after its full declaration
 *   undeclared     forward-declared but never fully declared
 *   pointer-range  a tagged word is neither 0 nor inside a declared object
 *   declared-before-referenced  it points into an object declared later
 *   empty          no element at all (there is no root)
 *
 * Three passes over a stream held in memory: headers, then the sorted id
 * ranges (overlaps and duplicates), then every tagged word. When several
 * rules are broken the one at the lowest byte offset is reported.
 */
#include "arc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct decl {
    uint64_t id, size, off;
    int fwd;
} decl;

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Keeps the violation at the lowest offset. */
static void fail(arc_error *e, int *bad, uint64_t off, const char *rule, const char *fmt, ...)
{
    if (*bad && e->offset <= off) return;
    *bad = 1;
    e->offset = off;
    e->rule = rule;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

static int by_id_size_off(const void *x, const void *y)
{
    const decl *a = x, *b = y;
    if (a->id != b->id) return a->id < b->id ? -1 : 1;
    if (a->size != b->size) return a->size < b->size ? -1 : 1;
    return a->off < b->off ? -1 : a->off > b->off;
}

static const arc_file *sort_file;
static int by_obj_id(const void *x, const void *y)
{
    uint64_t a = sort_file->objs[*(const uint32_t *)x].id, b = sort_file->objs[*(const uint32_t *)y].id;
    return a < b ? -1 : a > b;
}

long arc_find(const arc_file *a, uint64_t value)
{
    value &= ~ARC_WEAK;
    size_t lo = 0, hi = a->nobjs;
    while (lo < hi) {                 /* first object with id > value */
        size_t mid = (lo + hi) / 2;
        if (a->objs[a->by_id[mid]].id <= value) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    const arc_obj *o = &a->objs[a->by_id[lo - 1]];
    return value - o->id < o->size ? (long)a->by_id[lo - 1] : -1;
}

/* The parse in progress: declarations in stream order (pass 1), and the
 * lowest-offset violation so far. */
typedef struct parse {
    arc_file *a;
    arc_error *e;
    int bad;
    decl *d;
    size_t nd, cd, cap;
} parse;

/* Doubles *v (of *cap elements of elem bytes) when n reached it. */
static int room_for_one(void **v, size_t n, size_t *cap, size_t elem)
{
    if (n < *cap) return 0;
    void *nv = realloc(*v, 2 * *cap * elem);
    if (!nv) return -1;
    *v = nv;
    *cap *= 2;
    return 0;
}

static int push_decl(parse *x, decl v)
{
    if (room_for_one((void **)&x->d, x->nd, &x->cd, sizeof *x->d)) return -1;
    x->d[x->nd++] = v;
    return 0;
}

static int push_obj(parse *x, arc_obj o)
{
    arc_file *a = x->a;
    if (room_for_one((void **)&a->objs, a->nobjs, &x->cap, sizeof *a->objs)) return -1;
    a->objs[a->nobjs++] = o;
    return 0;
}

/* Pass 1: the headers, one element after the other. 1 if the stream is
 * cut short (nothing after a cut can be checked), -1 out of memory. */
static int read_headers(parse *x)
{
    const uint8_t *buf = x->a->buf;
    size_t len = x->a->len, pos = 0;
    arc_error *e = x->e;
    while (pos < len) {
        if (len - pos < 8) { fail(e, &x->bad, pos, "truncated", "%zu bytes left, a header needs 8", len - pos); return 1; }
        uint64_t p = rd64(buf + pos);
        uint64_t low = p & ((1ull << 48) - 1);
        unsigned c = (unsigned)(p >> 37) & 31;
        uint64_t id = low & -(32ull << c), size = low - id + 1;
        int fwd = (int)(p >> 63);
        if (p & (((1ull << 15) - 1) << 48))
            fail(e, &x->bad, pos, "unused-bits", "header bits 48..62 must be 0 (header %#llx)", (unsigned long long)p);
        if (!(p & ARC_CLASS_BIT))
            fail(e, &x->bad, pos, "class-bit", "header bit 42 must be 1 (header %#llx)", (unsigned long long)p);
        if (arc_offset_bits(size) != 5 + c)
            fail(e, &x->bad, pos, "alignment", "offset-bit field gives 2^%u but a %llu-byte object needs 2^%u",
                 5 + c, (unsigned long long)size, arc_offset_bits(size));
        if (push_decl(x, (decl){ id, size, pos, fwd })) return -1;
        pos += 8;
        if (fwd) continue;
        uint64_t nb = ARC_BITMAP_BYTES(size);
        if (len - pos < nb || len - pos - nb < size) {
            fail(e, &x->bad, pos - 8, "truncated", "a %llu-byte object needs %llu more bytes, %zu left",
                 (unsigned long long)size, (unsigned long long)(nb + size), len - pos);
            return 1;
        }
        uint64_t words = size / 8;
        if (words % 8 && (buf[pos + nb - 1] >> (words % 8)))
            fail(e, &x->bad, pos + nb - 1, "bitmap-padding", "bits beyond the object's %llu words are set",
                 (unsigned long long)words);
        if (push_obj(x, (arc_obj){ id, size, pos - 8, UINT64_MAX, buf + pos, buf + pos + nb })) return -1;
        pos += nb + size;
    }
    return 0;
}

/* Pass 2: ranges in id order (sorts x->d). Equal (id, size) pairs are one
 * object's declarations; anything else sharing bytes overlaps. */
static void check_ranges(parse *x)
{
    decl *d = x->d;
    arc_error *e = x->e;
    qsort(d, x->nd, sizeof *d, by_id_size_off);
    uint64_t max_end = 0, max_off = 0;
    for (size_t i = 0; i < x->nd;) {
        size_t j = i, full = SIZE_MAX, nfwd = 0;
        uint64_t first = d[i].off;
        for (; j < x->nd && d[j].id == d[i].id && d[j].size == d[i].size; j++) {
            if (d[j].fwd) {
                if (nfwd++) fail(e, &x->bad, d[j].off, "forward-once", "object %#llx is forward-declared twice", (unsigned long long)d[j].id);
                else if (full != SIZE_MAX)
                    fail(e, &x->bad, d[j].off, "forward-once", "object %#llx is forward-declared after its declaration", (unsigned long long)d[j].id);
            } else if (full != SIZE_MAX) {
                fail(e, &x->bad, d[j].off, "declared-once", "object %#llx is declared a second time (first at byte %llu)",
                     (unsigned long long)d[j].id, (unsigned long long)d[full].off);
            } else {
                full = j;
            }
        }
        if (full == SIZE_MAX)
            fail(e, &x->bad, d[i].off, "undeclared", "object %#llx is forward-declared but never declared", (unsigned long long)d[i].id);
        if (i > 0 && d[i].id < max_end)
            fail(e, &x->bad, first > max_off ? first : max_off, "overlap",
                 "object %#llx (%llu bytes) overlaps an object declared at byte %llu", (unsigned long long)d[i].id,
                 (unsigned long long)d[i].size, (unsigned long long)(first > max_off ? max_off : first));
        if (d[i].id + d[i].size > max_end) { max_end = d[i].id + d[i].size; max_off = first; }
        i = j;
    }
}

/* Objects by id; each learns where it was first announced. */
static int index_objects(parse *x, uint64_t root_id)
{
    arc_file *a = x->a;
    a->by_id = malloc((a->nobjs ? a->nobjs : 1) * sizeof *a->by_id);
    if (!a->by_id) return -1;
    for (size_t i = 0; i < a->nobjs; i++) a->by_id[i] = (uint32_t)i;
    sort_file = a;
    qsort(a->by_id, a->nobjs, sizeof *a->by_id, by_obj_id);
    for (size_t i = 0; i < x->nd; i++)
        if (x->d[i].fwd) {
            long k = arc_find(a, x->d[i].id);
            if (k >= 0 && a->objs[k].id == x->d[i].id && a->objs[k].size == x->d[i].size && x->d[i].off < a->objs[k].fwd_off)
                a->objs[k].fwd_off = x->d[i].off;
        }
    long r = arc_find(a, root_id);
    a->root = r >= 0 ? (size_t)r : 0;
    return 0;
}

/* Pass 3: every tagged word points into an object announced before its own. */
static void check_pointers(parse *x)
{
    const arc_file *a = x->a;
    for (size_t i = 0; i < a->nobjs; i++) {
        const arc_obj *o = &a->objs[i];
        uint64_t words = o->size / 8;
        for (uint64_t w = 0; w < words; w++) {
            if (!o->bitmap[w / 8]) { w |= 7; continue; }
            if (!arc_tagged(o, w)) continue;
            uint64_t v = rd64(o->data + 8 * w), at = (uint64_t)(o->data + 8 * w - a->buf);
            if ((v & ~ARC_WEAK) == 0) continue;
            long t = arc_find(a, v);
            if (t < 0) {
                fail(x->e, &x->bad, at, "pointer-range", "tagged word %#llx is neither 0 nor inside a declared object",
                     (unsigned long long)v);
                continue;
            }
            const arc_obj *to = &a->objs[t];
            uint64_t announced = to->fwd_off < to->off ? to->fwd_off : to->off;
            if (announced > o->off)
                fail(x->e, &x->bad, at, "declared-before-referenced", "points into object %#llx, first declared later (byte %llu)",
                     (unsigned long long)to->id, (unsigned long long)announced);
        }
    }
}

int arc_parse(arc_file *a, uint8_t *buf, size_t len, arc_error *e)
{
    memset(a, 0, sizeof *a);
    memset(e, 0, sizeof *e);
    a->buf = buf;
    a->len = len;
    parse x = { .a = a, .e = e, .cd = 1024, .cap = 1024 };
    x.d = malloc(x.cd * sizeof *x.d);
    a->objs = malloc(x.cap * sizeof *a->objs);
    int rc = x.d && a->objs ? read_headers(&x) : -1;
    if (rc >= 0 && x.nd == 0) fail(e, &x.bad, 0, "empty", "no element: a stream starts with its root object");
    else if (rc == 0) {
        uint64_t root_id = x.d[0].id;   /* the first element, before check_ranges sorts */
        check_ranges(&x);
        rc = index_objects(&x, root_id);
        if (rc == 0) check_pointers(&x);
    }
    free(x.d);
    if (rc < 0) {
        e->offset = 0;
        e->rule = "io";
        snprintf(e->msg, sizeof e->msg, "out of memory");
        return -1;
    }
    return x.bad ? -1 : 0;
}

int arc_open(arc_file *a, const char *path, arc_error *e)
{
    memset(a, 0, sizeof *a);
    memset(e, 0, sizeof *e);
    e->rule = "io";
    /* O_NONBLOCK: a FIFO would block the open until a writer came. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        snprintf(e->msg, sizeof e->msg, "%s", strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || fcntl(fd, F_SETFL, 0)) {
        close(fd);
        snprintf(e->msg, sizeof e->msg, "not a regular file");
        return -1;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) { close(fd); snprintf(e->msg, sizeof e->msg, "%s", strerror(errno)); return -1; }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) { fclose(f); snprintf(e->msg, sizeof e->msg, "out of memory"); return -1; }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        uint8_t *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) { free(buf); snprintf(e->msg, sizeof e->msg, "read error"); return -1; }
    return arc_parse(a, buf, len, e);
}

void arc_close(arc_file *a)
{
    free(a->buf);
    free(a->objs);
    free(a->by_id);
    memset(a, 0, sizeof *a);
}
