/*
 * modtab.c - the module table behind modtab.h.
 *
 * A snapshot is one anonymous mapping: a header, the mlz_module array sorted
 * by start address, then a pool for the path strings. Building it runs
 * dl_iterate_phdr twice (count, then fill); if modules were loaded between
 * the passes the fill overflows and we retry with room to spare. Readers
 * reach the snapshot through one atomic pointer and never write to it, so
 * a lookup is a load-acquire plus a binary search, safe in a signal handler.
 *
 * Refreshes are serialised by a try-lock flag rather than a mutex. A
 * refresh asked for while another runs waits until one that began after the
 * request is published (the running one may have walked the modules before
 * the dlopen that asked finished: the new library would stay unknown until
 * the drain's next round, and its first allocations lose their callers).
 * The retired list is touched only by the flag holder.
 *
 * Fork: glibc's fork resets ld.so's load lock in the child but not the one
 * dl_iterate_phdr takes. A fork while any thread walks leaves the child a
 * lock that nobody will release. So a fork waits for our own walks to end,
 * and none starts until it is done (mlz_modtab_fork_prepare/_parent): the
 * program's child never inherits that lock from us. Our fork child cannot
 * know whether one of the program's threads was walking: if it profiles, it
 * does not walk (the table it inherited holds the same mappings) until the
 * program shows the lock free by a dlopen that loaded a library
 * (mlz_modtab_lock_seen).
 */
#include "modtab.h"

#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define MODTAB_FILL_TRIES 4
#define MODTAB_SLACK_MODULES 16          /* room for dlopens racing the refresh */
#define MODTAB_SLACK_NAMES (16 * 1024)
#define EH_PE_OMIT 0xff
#define EH_PE_DATAREL_SDATA4 0x3b        /* the only table encoding we binary-search */

typedef struct snap {
    struct snap *retired_next;
    size_t map_size;
    uint64_t generation, stamp_ns;
    unsigned long long adds, subs;
    unsigned count;
    mlz_module mods[];
} snap;

static _Atomic(snap *) g_cur;
/* Retired snapshots, newest first: only the g_busy holder adds, but the
 * drain reads the chain (mlz_modtab_modules_of), so the head is published
 * with release after the node's link is set. */
static _Atomic(snap *) g_retired;
static uint64_t g_generation;              /* owned by the g_busy holder */
static atomic_flag g_busy = ATOMIC_FLAG_INIT;
static uint64_t (*_Atomic g_now_ns)(void);
/* Refreshes asked for, and the count the latest published snapshot covers. */
static _Atomic uint64_t g_asked, g_served;
/* Fork safety (above): our threads inside dl_iterate_phdr, a fork between
 * its prepare and parent handlers, a fork child not walking yet. */
static _Atomic int g_walkers, g_forking, g_walk_unsafe;

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* 1 if this thread may walk the modules now (then walk_end after), else 0. */
static int walk_begin(void)
{
    if (atomic_load(&g_walk_unsafe)) return 0;
    atomic_fetch_add(&g_walkers, 1);       /* seq_cst with g_forking: one of */
    if (atomic_load(&g_forking)) {          /* the two sides sees the other */
        atomic_fetch_sub(&g_walkers, 1);
        return 0;
    }
    return 1;
}

static void walk_end(void) { atomic_fetch_sub(&g_walkers, 1); }

/* A fork waits this long at most for a walk to end (a walk is microseconds;
 * it only waits longer for the lock itself, held by a dlopen finishing). */
#define FORK_WAIT_NS (500ull * 1000 * 1000)

void mlz_modtab_fork_prepare(void)
{
    atomic_store(&g_forking, 1);
    uint64_t t0 = mono_ns();
    while (atomic_load(&g_walkers)) {
        sched_yield();
        if (mono_ns() - t0 > FORK_WAIT_NS) break;   /* a fork from a signal handler that interrupted our walk */
    }
}

void mlz_modtab_fork_parent(void) { atomic_store(&g_forking, 0); }

void mlz_modtab_fork_child(int profiled)
{
    /* The only thread: whatever a parent thread held of ours is void. */
    atomic_store(&g_walkers, 0);
    atomic_store(&g_forking, 0);
    atomic_store(&g_walk_unsafe, profiled);
    atomic_flag_clear(&g_busy);
}

void mlz_modtab_lock_seen(void) { atomic_store(&g_walk_unsafe, 0); }

int mlz_modtab_walk_unsafe(void) { return atomic_load_explicit(&g_walk_unsafe, memory_order_relaxed); }

typedef struct fill_ctx {
    snap *s;                 /* NULL in the counting pass */
    unsigned cap;
    char *pool, *pool_end;
    unsigned n;              /* modules seen */
    size_t names;            /* pool bytes they need */
    int overflow;
    int have_counts;
    unsigned long long adds, subs;
} fill_ctx;

/* Decodes the few encodings .eh_frame_hdr uses for its two header fields. */
static int hdr_decode(const uint8_t **pp, const uint8_t *end, uint8_t enc,
                      uint64_t hdr, uint64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t v;
    unsigned n;

    switch (enc & 0x0f) {
    case 0x00: case 0x04: case 0x0c: n = 8; break;   /* absptr, (s|u)data8 */
    case 0x03: case 0x0b: n = 4; break;              /* (s|u)data4 */
    default: return -1;
    }
    if ((size_t)(end - p) < n)
        return -1;
    if (n == 8) {
        memcpy(&v, p, 8);
    } else if (enc & 0x08) {
        int32_t s;
        memcpy(&s, p, 4);
        v = (uint64_t)(int64_t)s;
    } else {
        uint32_t u;
        memcpy(&u, p, 4);
        v = u;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += (uint64_t)(uintptr_t)p; break;
    case 0x30: v += hdr; break;
    default: return -1;
    }
    *pp = p + n;
    *out = v;
    return 0;
}

/* Validate .eh_frame_hdr once here so the unwinder can trust eh_table. */
static void parse_eh_hdr(mlz_module *m)
{
    const uint8_t *p = (const uint8_t *)(uintptr_t)m->eh_frame_hdr;
    const uint8_t *end = p + m->eh_frame_hdr_size;
    uint64_t eh_frame, count;

    if (m->eh_frame_hdr_size < 4 || p[0] != 1)
        return;
    uint8_t ptr_enc = p[1], count_enc = p[2], table_enc = p[3];
    p += 4;
    if (ptr_enc != EH_PE_OMIT && hdr_decode(&p, end, ptr_enc, m->eh_frame_hdr, &eh_frame) < 0)
        return;
    if (count_enc == EH_PE_OMIT || table_enc != EH_PE_DATAREL_SDATA4 ||
        hdr_decode(&p, end, count_enc, m->eh_frame_hdr, &count) < 0)
        return;
    if (count == 0 || count > (uint64_t)(end - p) / 8 || count > UINT32_MAX)
        return;
    m->eh_table = (uint64_t)(uintptr_t)p;
    m->eh_count = (uint32_t)count;
}

/* NT_GNU_BUILD_ID from a PT_NOTE segment that lies inside loaded memory.
 * The descriptor and the next note start at multiples of the segment's
 * alignment (4, or 8 for .note.gnu.property), counted from the note start. */
static void parse_build_id(mlz_module *m, uint64_t addr, uint64_t size, uint64_t align)
{
    const uint8_t *p = (const uint8_t *)(uintptr_t)addr;
    uint64_t a = align == 8 ? 8 : 4, off = 0;

    while (off < size && size - off >= sizeof(Elf64_Nhdr)) {
        Elf64_Nhdr nh;
        memcpy(&nh, p + off, sizeof nh);
        uint64_t name = off + sizeof nh;
        uint64_t desc = (name + nh.n_namesz + a - 1) & ~(a - 1);
        uint64_t next = (desc + nh.n_descsz + a - 1) & ~(a - 1);
        if (desc > size || nh.n_descsz > size - desc)
            return;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(p + name, "GNU", 4) == 0) {
            unsigned n = nh.n_descsz < MLZ_BUILD_ID_MAX ? nh.n_descsz : MLZ_BUILD_ID_MAX;
            memcpy(m->build_id, p + desc, n);
            m->build_id_len = (uint8_t)n;
            return;
        }
        off = next;
    }
}

static int inside_load(const struct dl_phdr_info *info, uint64_t vaddr, uint64_t size,
                       uint64_t *seg_lo, uint64_t *seg_hi)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_R))
            continue;
        if (vaddr >= ph->p_vaddr && vaddr + size <= ph->p_vaddr + ph->p_memsz) {
            if (seg_lo) {
                *seg_lo = info->dlpi_addr + ph->p_vaddr;
                *seg_hi = *seg_lo + ph->p_memsz;
            }
            return 1;
        }
    }
    return 0;
}

static int fill_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    fill_ctx *c = arg;
    uint64_t lo = UINT64_MAX, hi = 0, xlo = UINT64_MAX, xhi = 0, xoff = 0;
    unsigned nexec = 0;

    if (!c->have_counts &&
        size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c->adds = info->dlpi_adds;
        c->subs = info->dlpi_subs;
        c->have_counts = 1;
    }
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || ph->p_memsz == 0)
            continue;
        if (ph->p_vaddr < lo) lo = ph->p_vaddr;
        if (ph->p_vaddr + ph->p_memsz > hi) hi = ph->p_vaddr + ph->p_memsz;
        if (ph->p_flags & PF_X) {
            if (ph->p_vaddr < xlo) { xlo = ph->p_vaddr; xoff = ph->p_offset; }
            if (ph->p_vaddr + ph->p_memsz > xhi) xhi = ph->p_vaddr + ph->p_memsz;
            nexec++;
        }
    }
    if (hi == 0)
        return 0;                       /* nothing mapped: not a module we can see */

    const char *name = info->dlpi_name;
    int is_exe = !name || !*name;
    size_t need = is_exe ? PATH_MAX + 1 : strlen(name) + 1;
    c->n++;
    c->names += need;
    if (!c->s)
        return 0;
    if (c->s->count >= c->cap || need > (size_t)(c->pool_end - c->pool)) {
        c->overflow = 1;
        return 1;
    }

    mlz_module *m = &c->s->mods[c->s->count++];
    memset(m, 0, sizeof *m);
    m->load_bias = info->dlpi_addr;
    m->start = info->dlpi_addr + lo;
    m->end = info->dlpi_addr + hi;
    if (nexec) {
        m->exec_start = info->dlpi_addr + xlo;
        m->exec_end = info->dlpi_addr + xhi;
        m->exec_offset = xoff;
    }
    m->nexec = (uint16_t)nexec;

    if (is_exe) {
        ssize_t k = readlink("/proc/self/exe", c->pool, PATH_MAX);
        if (k < 0) k = 0;
        c->pool[k] = 0;
        m->path = c->pool;
        c->pool += k + 1;
    } else {
        memcpy(c->pool, name, need);
        m->path = c->pool;
        c->pool += need;
    }

    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_GNU_EH_FRAME && ph->p_memsz &&
            inside_load(info, ph->p_vaddr, ph->p_memsz, &m->eh_seg_lo, &m->eh_seg_hi)) {
            m->eh_frame_hdr = info->dlpi_addr + ph->p_vaddr;
            m->eh_frame_hdr_size = ph->p_memsz;
            parse_eh_hdr(m);
            mlz__unwind_classify(m);
        } else if (ph->p_type == PT_NOTE && !m->build_id_len &&
                   inside_load(info, ph->p_vaddr, ph->p_filesz, NULL, NULL)) {
            parse_build_id(m, info->dlpi_addr + ph->p_vaddr, ph->p_filesz, ph->p_align);
        }
    }
    return 0;
}

static void sort_modules(mlz_module *a, unsigned n)
{
    for (unsigned i = 1; i < n; i++) {
        mlz_module t = a[i];
        unsigned j = i;
        for (; j > 0 && a[j - 1].start > t.start; j--)
            a[j] = a[j - 1];
        a[j] = t;
    }
}

static snap *build_snapshot(void)
{
    fill_ctx c;

    memset(&c, 0, sizeof c);
    dl_iterate_phdr(fill_cb, &c);
    for (int attempt = 0; attempt < MODTAB_FILL_TRIES; attempt++) {
        unsigned cap = (c.n + MODTAB_SLACK_MODULES) << attempt;
        size_t pool = (c.names + MODTAB_SLACK_NAMES) << attempt;
        size_t bytes = sizeof(snap) + (size_t)cap * sizeof(mlz_module) + pool;
        long page = sysconf(_SC_PAGESIZE);
        bytes = (bytes + (size_t)page - 1) & ~((size_t)page - 1);

        void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mem == MAP_FAILED)
            return NULL;
        snap *s = mem;
        s->map_size = bytes;
        memset(&c, 0, sizeof c);
        c.s = s;
        c.cap = cap;
        c.pool = (char *)&s->mods[cap];
        c.pool_end = (char *)mem + bytes;
        dl_iterate_phdr(fill_cb, &c);
        if (!c.overflow) {
            s->adds = c.adds;
            s->subs = c.subs;
            sort_modules(s->mods, s->count);
            return s;
        }
        munmap(mem, bytes);             /* c.n, c.names now count this pass */
    }
    return NULL;
}

/* How long a refresh waits for the running one (it is microseconds; longer
 * only if its thread is descheduled, or stuck behind the loader's lock held
 * by the very thread that waits, inside a dl_iterate_phdr callback). */
#define REFRESH_WAIT_NS (20ull * 1000 * 1000)

int mlz_modtab_refresh(void)
{
    uint64_t ticket = atomic_fetch_add(&g_asked, 1) + 1, t0 = 0;
    for (;;) {
        if (!walk_begin()) return -EAGAIN;
        if (!atomic_flag_test_and_set_explicit(&g_busy, memory_order_acquire)) break;
        walk_end();
        if (atomic_load(&g_served) >= ticket) return 0;   /* one begun after the ask is out */
        if (!t0) t0 = mono_ns();
        else if (mono_ns() - t0 > REFRESH_WAIT_NS) return -EBUSY;
        sched_yield();
    }
    uint64_t covers = atomic_load(&g_asked);   /* every ask so far: the walk begins after them */
    snap *s = build_snapshot();
    walk_end();
    if (!s) {
        atomic_flag_clear_explicit(&g_busy, memory_order_release);
        return -ENOMEM;
    }
    s->generation = ++g_generation;
    uint64_t (*now)(void) = atomic_load(&g_now_ns);
    s->stamp_ns = now ? now() : 0;      /* after the walk: it saw the unloads before this */
    snap *old = atomic_exchange_explicit(&g_cur, s, memory_order_acq_rel);
    if (old) {
        old->retired_next = atomic_load_explicit(&g_retired, memory_order_relaxed);
        atomic_store_explicit(&g_retired, old, memory_order_release);
    }
    atomic_store(&g_served, covers);
    atomic_flag_clear_explicit(&g_busy, memory_order_release);
    return 0;
}

const mlz_module *mlz_modtab_find(uint64_t pc)
{
    const snap *s = atomic_load_explicit(&g_cur, memory_order_acquire);
    if (!s)
        return NULL;
    unsigned lo = 0, hi = s->count;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        const mlz_module *m = &s->mods[mid];
        if (pc < m->start)
            hi = mid;
        else if (pc >= m->end)
            lo = mid + 1;
        else
            return m;
    }
    return NULL;
}

static int counts_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    fill_ctx *c = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c->adds = info->dlpi_adds;
        c->subs = info->dlpi_subs;
        c->have_counts = 1;
    }
    return 1;                           /* the first module carries the counters */
}

int mlz_modtab_changed(void)
{
    const snap *s = atomic_load_explicit(&g_cur, memory_order_acquire);
    fill_ctx c;

    memset(&c, 0, sizeof c);
    if (!walk_begin())
        return 0;                       /* not now (a fork, or a fork child) */
    dl_iterate_phdr(counts_cb, &c);
    walk_end();
    if (!s || !c.have_counts)
        return 1;
    return c.adds != s->adds || c.subs != s->subs;
}

const mlz_module *mlz_modtab_modules_of(uint64_t generation, unsigned *count, uint64_t *stamp_ns)
{
    const snap *s = atomic_load_explicit(&g_cur, memory_order_acquire);
    if (s && s->generation != generation)
        for (s = atomic_load_explicit(&g_retired, memory_order_acquire); s && s->generation > generation;)
            s = s->retired_next;
    if (!s || s->generation != generation) return NULL;
    *count = s->count;
    if (stamp_ns) *stamp_ns = s->stamp_ns;
    return s->mods;
}

void mlz_modtab_set_clock(uint64_t (*now_ns)(void))
{
    atomic_store(&g_now_ns, now_ns);
}

const mlz_module *mlz_modtab_modules(unsigned *count, uint64_t *generation, uint64_t *stamp_ns)
{
    const snap *s = atomic_load_explicit(&g_cur, memory_order_acquire);
    if (generation)
        *generation = s ? s->generation : 0;
    if (stamp_ns)
        *stamp_ns = s ? s->stamp_ns : 0;
    *count = s ? s->count : 0;
    return s ? s->mods : NULL;
}

uint64_t mlz_modtab_generation(void)
{
    const snap *s = atomic_load_explicit(&g_cur, memory_order_acquire);
    return s ? s->generation : 0;
}

void mlz_modtab_release_all(void)
{
    while (atomic_flag_test_and_set_explicit(&g_busy, memory_order_acquire))
        ;                               /* a refresh is finishing; shutdown only */
    snap *s = atomic_exchange_explicit(&g_cur, NULL, memory_order_acq_rel);
    if (s)
        munmap(s, s->map_size);
    snap *r = atomic_exchange_explicit(&g_retired, NULL, memory_order_acq_rel);
    while (r) {
        snap *next = r->retired_next;
        munmap(r, r->map_size);
        r = next;
    }
    atomic_flag_clear_explicit(&g_busy, memory_order_release);
}
