/*
 * patch.c - the slot table, the patch/unpatch engine, the lock.
 *
 * Workload: a patch_all at attach (tens of modules, hundreds of slots), a
 * patch_new_modules per dlopen/dlclose (usually "nothing changed", answered
 * from the loader's dlpi_adds/dlpi_subs counters in one callback), one
 * unpatch_all at detach. Tables are small arrays scanned linearly.
 *
 * All reads and writes of a module's slots happen inside the
 * dl_iterate_phdr callback for that module. glibc holds its
 * dl_load_write_lock across the whole iteration and a dlclose takes that
 * lock to unlink the module before unmapping it, so the module cannot
 * disappear while we touch its slots - even if a thread dlcloses it behind
 * our back. Inside the callback we only read memory, parse /proc/self/maps
 * and call mprotect: no dladdr/dlsym (they take dl_load_lock, which a
 * dlopen holds while waiting for the write lock: lock-order inversion).
 *
 * Writes are compare-and-swap on aligned 8-byte words: a concurrent caller
 * sees the old or the new pointer, a value someone else stored after we read
 * it is never overwritten (we then re-read and decide again), and unpatch
 * restores a slot only if it still holds our hook.
 */
#include <errno.h>
#include <stdatomic.h>
#include <sched.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "got_internal.h"

mlz__global mlz__got;

/* ---- the lock ---------------------------------------------------------- */

/*
 * Only the patching entry points take it; allocation hooks never do, so a
 * target thread stopped anywhere in its allocator cannot block us and we
 * cannot block it. The word holds (pid << 32 | tid) of the owner: a child
 * forked while a parent thread held it sees a foreign pid and takes it over
 * (the owner thread does not exist in the child), and re-entry from the
 * owner thread fails with MLZ_GOT_EBUSY instead of deadlocking.
 */
static uint64_t lock_word;

static uint64_t me(void)
{
    return (uint64_t)(uint32_t)getpid() << 32 | (uint32_t)gettid();
}

int mlz__lock(void)
{
    uint64_t self = me();
    for (unsigned spin = 0;; spin++) {
        uint64_t cur = 0;
        if (__atomic_compare_exchange_n(&lock_word, &cur, self, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return 0;
        if (cur == self) return MLZ_GOT_EBUSY;
        if ((cur >> 32) != (self >> 32) &&
            __atomic_compare_exchange_n(&lock_word, &cur, self, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return 0;
        if (spin < 64) {
            sched_yield();
        } else {
            struct timespec ts = { 0, 50 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
}

void mlz__unlock(void)
{
    __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE);
}

/* ---- tables ------------------------------------------------------------ */

enum { MOD_NEW, MOD_PENDING, MOD_DONE };

/* Passes a module may stay "not yet relocated" before its zero slots are
 * taken at face value (a weak reference that never resolved). */
#define MLZ_PENDING_PASSES 3

typedef struct mod {
    uintptr_t base;
    const ElfW(Phdr) *phdr;
    const char *name;
    uint64_t seen_gen;
    uint8_t alive, skip, state, pending_passes;
} mod;

typedef struct slotrec {
    uintptr_t addr, orig;
    uint32_t mod;
    uint8_t kind, state, hook;
} slotrec;

static mod *mods;
static size_t nmods, capmods;
static slotrec *slots;
static size_t nslots, capslots;
static uint64_t gen;
static unsigned long long last_adds, last_subs;
static int have_counters;
static uint64_t passes;
static mlz__maps maps;
static size_t page_size;

/* Scratch list of writes for one module (or one module's unpatch). */
typedef struct wr {
    uintptr_t addr, expect, val;
    uint32_t slot;       /* index into the scratch slot records / table */
    int result;          /* 1 written, 0 value differed, -1 page not writable */
    uintptr_t seen;      /* value found when the CAS failed */
} wr;
static wr *wrs;
static size_t nwrs, capwrs;
static slotrec *news;    /* slot records of the module being patched */
static size_t nnews, capnews;

static int find_mod(uintptr_t base, const ElfW(Phdr) *phdr)
{
    for (size_t i = 0; i < nmods; i++)
        if (mods[i].alive && mods[i].base == base && mods[i].phdr == phdr) return (int)i;
    return -1;
}

static int new_mod(const struct dl_phdr_info *info)
{
    size_t i;
    for (i = 0; i < nmods; i++)
        if (!mods[i].alive) break;
    if (i == nmods) {
        if (mlz__vec_reserve((void **)&mods, &capmods, sizeof *mods, nmods + 1)) return -1;
        nmods++;
    }
    memset(&mods[i], 0, sizeof mods[i]);
    mods[i].base = info->dlpi_addr;
    mods[i].phdr = info->dlpi_phdr;
    mods[i].name = mlz__strdup_arena(info->dlpi_name ? info->dlpi_name : "");
    mods[i].alive = 1;
    mods[i].skip = (uint8_t)mlz__skip_reason(info);
    mods[i].state = MOD_NEW;
    return (int)i;
}

static void drop_slots_of(uint32_t m)
{
    size_t j = 0;
    for (size_t i = 0; i < nslots; i++)
        if (slots[i].mod != m) slots[j++] = slots[i];
    nslots = j;
}

/* First characters of the hooked names: rejects almost every symbol with one load. */
static uint8_t first_char[256 / 8];

static int hook_by_name(const char *name)
{
    unsigned char c0 = (unsigned char)name[0];
    if (!(first_char[c0 / 8] & (1u << (c0 % 8)))) return -1;
    for (size_t i = 0; i < mlz__got.nhooks; i++)
        if (name[0] == mlz__got.name[i][0] && strcmp(name, mlz__got.name[i]) == 0) return (int)i;
    return -1;
}

static void sort_wrs(void)
{
    /* insertion sort: relocation tables are nearly sorted by address */
    for (size_t i = 1; i < nwrs; i++) {
        wr t = wrs[i];
        size_t j = i;
        while (j > 0 && wrs[j - 1].addr > t.addr) { wrs[j] = wrs[j - 1]; j--; }
        wrs[j] = t;
    }
}

/*
 * Apply wrs[] page by page: make a page writable only if it is not, with
 * one mprotect for all its slots, then give it back exactly the protection
 * /proc/self/maps reported.
 */
static int apply_writes(void)
{
    int err = 0;
    if (!maps.loaded && (err = mlz__maps_load(&maps)) != 0) {
        for (size_t i = 0; i < nwrs; i++) wrs[i].result = -1;
        return err;
    }
    for (size_t i = 0; i < nwrs;) {
        uintptr_t page = wrs[i].addr & ~(uintptr_t)(page_size - 1);
        size_t j = i;
        while (j < nwrs && (wrs[j].addr & ~(uintptr_t)(page_size - 1)) == page) j++;
        int prot = mlz__maps_prot(&maps, page);
        int need = prot >= 0 && !(prot & PROT_WRITE);
        if (prot < 0 || (need && mprotect((void *)page, page_size, prot | PROT_WRITE) != 0)) {
            for (size_t k = i; k < j; k++) wrs[k].result = -1;
            err = MLZ_GOT_EPROT;
            i = j;
            continue;
        }
        for (size_t k = i; k < j; k++) {
            uintptr_t exp = wrs[k].expect;
            if (__atomic_compare_exchange_n((uintptr_t *)wrs[k].addr, &exp, wrs[k].val, 0,
                                            __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
                wrs[k].result = 1;
            } else {
                wrs[k].result = 0;
                wrs[k].seen = exp;
            }
        }
        if (need) mprotect((void *)page, page_size, prot);
        i = j;
    }
    return err;
}

/* ---- patching one module ---------------------------------------------- */

struct pctx {
    int only_new;        /* fast path allowed (patch_new_modules) */
    int verify;          /* dlpi_subs changed: re-check DONE modules */
    int first;
    int stopped;         /* iteration stopped early: do not drop unseen modules */
    int patched;         /* slots patched in this pass */
    int err;
    int unrelocated;     /* current module: a slot looks not yet relocated */
    int give_up_pending; /* current module: take zero slots at face value */
};

static void add_news(const mlz__dyn *d, uintptr_t where, uint8_t kind, uint8_t state,
                     int hi, uintptr_t orig, struct pctx *c)
{
    (void)d;
    for (size_t i = 0; i < nnews; i++)
        if (news[i].addr == where) return;   /* listed twice in the tables */
    if (mlz__vec_reserve((void **)&news, &capnews, sizeof *news, nnews + 1)) {
        c->err = MLZ_GOT_ENOMEM;
        return;
    }
    news[nnews++] = (slotrec){ .addr = where, .orig = orig, .kind = kind, .state = state, .hook = (uint8_t)hi };
}

/* What a slot's current value says about it. */
static int classify(const mlz__dyn *d, int kind, int hi, const char *name, uintptr_t v,
                    struct pctx *c)
{
    if (v == mlz__got.real[hi])
        return atomic_load(&mlz__got.inlined[hi]) ? MLZ_GOT_LEFT_INLINE : MLZ_GOT_SLOT_PATCHED;
    if (v == mlz__got.hook[hi]) return MLZ_GOT_SLOT_PATCHED;
    /* A JUMP_SLOT not yet bound points at this module's own PLT stub: the
     * loader would bind it to the global definition on first call, so it is
     * ours to patch (and to put back, unbound, on unpatch). */
    if (kind == MLZ_GOT_JUMP_SLOT && mlz__in_exec(d, v)) {
        const ElfW(Sym) *own = mlz__dyn_lookup_def(d, name);
        if (!own || d->base + own->st_value != v) return MLZ_GOT_SLOT_PATCHED;
    }
    if (!c->give_up_pending && kind != MLZ_GOT_ABS64 &&
        (v == 0 || (d->base && !mlz__in_module(d, v) && mlz__in_module(d, v + d->base)))) {
        c->unrelocated = 1;
        return -1;
    }
    if (mlz__got.canon[hi] && v == mlz__got.canon[hi]) return MLZ_GOT_LEFT_CANON_PLT;
    return MLZ_GOT_LEFT_OTHER_DEF;
}

static void reloc_cb(void *ctx, const mlz__dyn *d, uintptr_t where, uint32_t type,
                     uint32_t sym, int64_t addend)
{
    struct pctx *c = ctx;
    uint8_t kind;
    switch (type) {
    case R_X86_64_JUMP_SLOT: kind = MLZ_GOT_JUMP_SLOT; break;
    case R_X86_64_GLOB_DAT: kind = MLZ_GOT_GLOB_DAT; break;
    case R_X86_64_64: kind = MLZ_GOT_ABS64; break;
    default: return;
    }
    if (sym == 0) return;
    const char *name = mlz__dyn_symname(d, sym);
    if (!name) return;
    int hi = hook_by_name(name);
    if (hi < 0 || !mlz__got.real[hi]) return;
    if (where & 7) { add_news(d, where, kind, MLZ_GOT_LEFT_MISALIGNED, hi, 0, c); return; }
    uintptr_t v = __atomic_load_n((uintptr_t *)where, __ATOMIC_ACQUIRE);
    if (kind == MLZ_GOT_ABS64 && addend != 0) { add_news(d, where, kind, MLZ_GOT_LEFT_ADDEND, hi, v, c); return; }
    int st = classify(d, kind, hi, name, v, c);
    if (st < 0) return;
    /* A slot already holding our hook (a second payload instance, or a
     * table lost to a reset) is restored to the real function. */
    add_news(d, where, kind, (uint8_t)st, hi, v == mlz__got.hook[hi] ? mlz__got.real[hi] : v, c);
}

static int patch_module(int m, const struct dl_phdr_info *info, struct pctx *c)
{
    mlz__dyn d;
    mods[m].state = MOD_DONE;
    if (mods[m].skip || mlz__dyn_parse(info, &d) != 0 || !d.symtab) return 0;
    nnews = 0;
    c->unrelocated = 0;
    c->give_up_pending = mods[m].pending_passes >= MLZ_PENDING_PASSES;
    mlz__dyn_foreach_reloc(&d, reloc_cb, c);
    if (c->err) return c->err;
    if (c->unrelocated) {
        /* Seen between mapping and relocation by a dlopen in another
         * thread: its GOT holds link-time values. Retry on a later pass
         * (that thread's dlopen hook makes one). */
        mods[m].state = MOD_PENDING;
        mods[m].pending_passes++;
        return 0;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        nwrs = 0;
        for (size_t i = 0; i < nnews; i++) {
            if (news[i].state != MLZ_GOT_SLOT_PATCHED) continue;
            uintptr_t cur = __atomic_load_n((uintptr_t *)news[i].addr, __ATOMIC_ACQUIRE);
            if (cur == mlz__got.hook[news[i].hook]) continue;
            if (mlz__vec_reserve((void **)&wrs, &capwrs, sizeof *wrs, nwrs + 1)) return MLZ_GOT_ENOMEM;
            wrs[nwrs++] = (wr){ .addr = news[i].addr, .expect = cur, .val = mlz__got.hook[news[i].hook],
                                .slot = (uint32_t)i };
            if (attempt == 0) news[i].orig = news[i].orig ? news[i].orig : cur;
        }
        if (nwrs == 0) break;
        sort_wrs();
        int e = apply_writes();
        if (e && !c->err) c->err = e;
        int retry = 0;
        for (size_t k = 0; k < nwrs; k++) {
            slotrec *s = &news[wrs[k].slot];
            if (wrs[k].result == 1) { c->patched++; continue; }
            if (wrs[k].result < 0) { s->state = MLZ_GOT_LEFT_PROT; continue; }
            /* Changed under us: the loader bound a lazy slot, or another
             * tool patched it. Decide again from the new value. */
            int st = classify(&d, s->kind, s->hook, mlz__got.name[s->hook], wrs[k].seen, c);
            s->state = (uint8_t)(st < 0 ? MLZ_GOT_LEFT_OTHER_DEF : st);
            s->orig = wrs[k].seen == mlz__got.hook[s->hook] ? s->orig : wrs[k].seen;
            if (s->state == MLZ_GOT_SLOT_PATCHED) retry = 1;
        }
        if (!retry) break;
    }
    /* anything still marked PATCHED but not holding the hook gave up */
    for (size_t i = 0; i < nnews; i++)
        if (news[i].state == MLZ_GOT_SLOT_PATCHED &&
            __atomic_load_n((uintptr_t *)news[i].addr, __ATOMIC_ACQUIRE) != mlz__got.hook[news[i].hook])
            news[i].state = MLZ_GOT_LEFT_OTHER_DEF;
    if (mlz__vec_reserve((void **)&slots, &capslots, sizeof *slots, nslots + nnews)) return MLZ_GOT_ENOMEM;
    for (size_t i = 0; i < nnews; i++) {
        news[i].mod = (uint32_t)m;
        slots[nslots++] = news[i];
    }
    return 0;
}

/* After a dlclose, the same base and program headers may belong to a new
 * copy of a library: if its patched slots no longer hold the hook, redo it. */
static int still_patched(uint32_t m)
{
    for (size_t i = 0; i < nslots; i++)
        if (slots[i].mod == m && slots[i].state == MLZ_GOT_SLOT_PATCHED &&
            __atomic_load_n((uintptr_t *)slots[i].addr, __ATOMIC_ACQUIRE) != mlz__got.hook[slots[i].hook])
            return 0;
    return 1;
}

static int pending_count(void)
{
    int n = 0;
    for (size_t i = 0; i < nmods; i++)
        if (mods[i].alive && mods[i].state == MOD_PENDING) n++;
    return n;
}

static int patch_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct pctx *c = arg;
    if (c->first) {
        c->first = 0;
        if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
            int same = have_counters && info->dlpi_adds == last_adds && info->dlpi_subs == last_subs;
            c->verify = have_counters && info->dlpi_subs != last_subs;
            last_adds = info->dlpi_adds;
            last_subs = info->dlpi_subs;
            have_counters = 1;
            if (c->only_new && same && pending_count() == 0) {
                c->stopped = 1;
                return 1;
            }
        }
    }
    int m = find_mod(info->dlpi_addr, info->dlpi_phdr);
    if (m >= 0) {
        mods[m].seen_gen = gen;
        if (mods[m].state == MOD_DONE) {
            if (!c->verify || mods[m].skip || still_patched((uint32_t)m)) return 0;
            drop_slots_of((uint32_t)m);
        }
    } else {
        m = new_mod(info);
        if (m < 0) { c->err = MLZ_GOT_ENOMEM; c->stopped = 1; return 1; }
        mods[m].seen_gen = gen;
    }
    int e = patch_module(m, info, c);
    if (e == MLZ_GOT_ENOMEM) { c->err = e; c->stopped = 1; return 1; }
    return 0;
}

static void drop_unseen(void)
{
    for (size_t i = 0; i < nmods; i++)
        if (mods[i].alive && mods[i].seen_gen != gen) {
            drop_slots_of((uint32_t)i);
            mods[i].alive = 0;
        }
}

static int pass(int only_new)
{
    struct pctx c = { .only_new = only_new, .first = 1 };
    gen++;
    maps.loaded = 0;
    dl_iterate_phdr(patch_cb, &c);
    if (!c.stopped) {
        drop_unseen();
        passes++;
    }
    return c.err ? c.err : c.patched;
}

/* Between mlz_got_patch_all and mlz_got_unpatch_all, under the lock. A
 * dlopen that entered its hook while patched may finish after the unpatch:
 * it must not patch every module again (they all look new by then). */
static int patching;

int mlz__patch_new_locked(void)
{
    return patching ? pass(1) : 0;
}

int mlz__forget_unloaded_locked(void)
{
    return patching ? pass(1) : 0;
}

/* ---- public: init ------------------------------------------------------ */

int mlz_got_init(mlz_got_hook *hooks, size_t nhooks)
{
    return mlz_got_init_ex(hooks, nhooks, NULL);
}

int mlz_got_init_ex(mlz_got_hook *hooks, size_t nhooks, const mlz_got_options *opt)
{
    if (!hooks || nhooks == 0 || nhooks > MLZ_GOT_MAX_HOOKS) return MLZ_GOT_EINVAL;
    for (size_t i = 0; i < nhooks; i++)
        if (!hooks[i].name || !hooks[i].name[0] || !hooks[i].hook) return MLZ_GOT_EINVAL;
    int e = mlz__lock();
    if (e) return e;
    for (size_t i = 0; i < nslots; i++)
        if (slots[i].state == MLZ_GOT_SLOT_PATCHED) { mlz__unlock(); return MLZ_GOT_ESTATE; }
    page_size = getauxval(AT_PAGESZ);
    if (!page_size) page_size = (size_t)sysconf(_SC_PAGESIZE);
    nslots = 0;
    nmods = 0;
    have_counters = 0;
    /* Readers of hook[] / real[] are lock-free: publish nhooks last. */
    __atomic_store_n(&mlz__got.nhooks, 0, __ATOMIC_RELEASE);
    unsigned flags = opt ? opt->flags : 0;
    if (opt && opt->self) mlz__got.self_addr = (uintptr_t)opt->self;
    else if (flags & MLZ_GOT_PATCH_SELF) mlz__got.self_addr = 0;
    else mlz__got.self_addr = (uintptr_t)&mlz_got_init_ex;
    mlz__got.flags = flags;
    mlz__got.user_hooks = hooks;
    memset(first_char, 0, sizeof first_char);
    for (size_t i = 0; i < nhooks; i++) {
        unsigned char c0 = (unsigned char)hooks[i].name[0];
        first_char[c0 / 8] |= (uint8_t)(1u << (c0 % 8));
        mlz__got.name[i] = hooks[i].name;
        mlz__got.hook[i] = (uintptr_t)hooks[i].hook;
    }
    mlz__got.nhooks = nhooks;
    mlz__resolve_reals();
    mlz__init_search_paths();
    for (size_t i = 0; i < nhooks; i++) hooks[i].real = (void *)mlz__got.real[i];
    __atomic_store_n(&mlz__got.initialised, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&mlz__got.nhooks, nhooks, __ATOMIC_RELEASE);
    mlz__unlock();
    return 0;
}

/* ---- public: patch / unpatch ------------------------------------------ */

int mlz_got_patch_all(void)
{
    if (!__atomic_load_n(&mlz__got.initialised, __ATOMIC_ACQUIRE)) return MLZ_GOT_ESTATE;
    int e = mlz__lock();
    if (e) return e;
    patching = 1;
    int r = pass(0);
    mlz__unlock();
    return r;
}

int mlz_got_patch_new_modules(void)
{
    if (!__atomic_load_n(&mlz__got.initialised, __ATOMIC_ACQUIRE)) return MLZ_GOT_ESTATE;
    int e = mlz__lock();
    if (e) return e;
    int r = mlz__patch_new_locked();
    mlz__unlock();
    return r;
}

static void fill_slot(mlz_got_slot *o, const slotrec *s)
{
    o->addr = (void **)s->addr;
    o->orig = (void *)s->orig;
    o->cur = (s->state == MLZ_GOT_LEFT_MISALIGNED) ? NULL
             : (void *)__atomic_load_n((uintptr_t *)s->addr, __ATOMIC_RELAXED);
    o->name = mlz__got.name[s->hook];
    o->module = mods[s->mod].name;
    o->kind = s->kind;
    o->state = s->state;
    o->hook_index = s->hook;
}

struct uctx {
    mlz_got_unpatch_report *r;
    int err;
};

static int unpatch_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct uctx *c = arg;
    int m = find_mod(info->dlpi_addr, info->dlpi_phdr);
    if (m < 0) return 0;
    mods[m].seen_gen = gen;
    nwrs = 0;
    for (size_t i = 0; i < nslots; i++) {
        if (slots[i].mod != (uint32_t)m || slots[i].state != MLZ_GOT_SLOT_PATCHED) continue;
        if (mlz__vec_reserve((void **)&wrs, &capwrs, sizeof *wrs, nwrs + 1)) { c->err = MLZ_GOT_ENOMEM; return 1; }
        wrs[nwrs++] = (wr){ .addr = slots[i].addr, .expect = mlz__got.hook[slots[i].hook],
                            .val = slots[i].orig, .slot = (uint32_t)i };
    }
    if (nwrs == 0) return 0;
    sort_wrs();
    int e = apply_writes();
    if (e && !c->err) c->err = e;
    for (size_t k = 0; k < nwrs; k++) {
        slotrec *s = &slots[wrs[k].slot];
        if (wrs[k].result == 1) {
            c->r->restored++;
            s->state = MLZ_GOT_NSTATES;        /* done: dropped below */
        } else if (wrs[k].result < 0) {
            c->r->failed++;
        } else {
            if (c->r->left_slots && c->r->left < c->r->left_cap)
                fill_slot(&c->r->left_slots[c->r->left], s);
            c->r->left++;
            s->state = MLZ_GOT_NSTATES;
        }
    }
    return 0;
}

int mlz_got_unpatch_all(mlz_got_unpatch_report *r)
{
    mlz_got_unpatch_report dummy;
    if (!r) { memset(&dummy, 0, sizeof dummy); r = &dummy; }
    r->restored = r->left = r->gone = r->failed = 0;
    if (!__atomic_load_n(&mlz__got.initialised, __ATOMIC_ACQUIRE)) return MLZ_GOT_ESTATE;
    int e = mlz__lock();
    if (e) return e;
    struct uctx c = { .r = r };
    patching = 0;
    gen++;
    maps.loaded = 0;
    dl_iterate_phdr(unpatch_cb, &c);
    for (size_t i = 0; i < nslots; i++)
        if (slots[i].state == MLZ_GOT_SLOT_PATCHED && mods[slots[i].mod].seen_gen != gen) r->gone++;
    /* Keep only slots we failed to restore, so a retry can finish the job. */
    size_t j = 0;
    for (size_t i = 0; i < nslots; i++)
        if (slots[i].state == MLZ_GOT_SLOT_PATCHED && mods[slots[i].mod].seen_gen == gen)
            slots[j++] = slots[i];
    nslots = j;
    if (nslots == 0) nmods = 0;
    have_counters = 0;
    mlz__unlock();
    return c.err;
}

/* ---- public: queries --------------------------------------------------- */

int mlz_got_hook_index(const void *addr)
{
    size_t n = __atomic_load_n(&mlz__got.nhooks, __ATOMIC_ACQUIRE);
    for (size_t i = 0; i < n; i++)
        if (mlz__got.hook[i] == (uintptr_t)addr) return (int)i;
    return -1;
}

void *mlz_got_real(const char *name)
{
    size_t n = __atomic_load_n(&mlz__got.nhooks, __ATOMIC_ACQUIRE);
    if (!name) return NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(mlz__got.name[i], name) == 0) return (void *)mlz__got.real[i];
    return NULL;
}

size_t mlz_got_slots(mlz_got_slot *out, size_t cap)
{
    if (mlz__lock()) return 0;
    for (size_t i = 0; i < nslots && i < cap; i++) fill_slot(&out[i], &slots[i]);
    size_t n = nslots;
    mlz__unlock();
    return n;
}

void mlz_got_get_stats(mlz_got_stats *out)
{
    memset(out, 0, sizeof *out);
    if (mlz__lock()) return;
    for (size_t i = 0; i < nmods; i++) {
        if (!mods[i].alive) continue;
        if (mods[i].skip) { out->modules_skipped++; continue; }
        if (mods[i].state == MOD_PENDING) { out->modules_pending++; continue; }
        out->modules_scanned++;
        for (size_t k = 0; k < nslots; k++)
            if (slots[k].mod == i && slots[k].state == MLZ_GOT_SLOT_PATCHED) {
                out->modules_patched++;
                break;
            }
    }
    for (size_t k = 0; k < nslots; k++) {
        if (slots[k].state == MLZ_GOT_SLOT_PATCHED) out->slots_patched[slots[k].kind]++;
        else if (slots[k].state < MLZ_GOT_NSTATES) out->slots_left[slots[k].state]++;
    }
    out->patch_passes = passes;
    mlz__unlock();
}

int mlz__module_counts(uintptr_t base, const ElfW(Phdr) *phdr, uint32_t *patched, uint32_t *left)
{
    int m = find_mod(base, phdr);
    if (m < 0) return -1;
    for (size_t k = 0; k < nslots; k++) {
        if (slots[k].mod != (uint32_t)m) continue;
        if (slots[k].state == MLZ_GOT_SLOT_PATCHED) patched[slots[k].kind]++;
        else (*left)++;
    }
    return mods[m].skip;
}

int mlz_got_maps_errno(void) { return mlz__maps_errno; }

const char *mlz_got_strerror(int err)
{
    switch (err) {
    case MLZ_GOT_OK: return "ok";
    case MLZ_GOT_EINVAL: return "invalid argument";
    case MLZ_GOT_ENOMEM: return "out of memory (mmap failed)";
    case MLZ_GOT_ESTATE: return "not initialised, or slots still patched";
    case MLZ_GOT_EBUSY: return "re-entered from the thread that is patching";
    case MLZ_GOT_EPROT: return "a slot's page could not be made writable";
    case MLZ_GOT_ENOCAPSTONE: return "libcapstone could not be loaded";
    case MLZ_GOT_EIO: return "cannot read /proc/self/maps";
    default: return err > 0 ? "ok" : "unknown error";
    }
}

const char *mlz_got_kind_name(int kind)
{
    static const char *const n[] = { "JUMP_SLOT", "GLOB_DAT", "R_X86_64_64" };
    return kind >= 0 && kind < MLZ_GOT_NKINDS ? n[kind] : "?";
}

const char *mlz_got_state_name(int state)
{
    static const char *const n[] = { "patched", "other-definition", "canonical-plt", "addend",
                                     "misaligned", "mprotect-failed", "inline-hooked" };
    return state >= 0 && state < MLZ_GOT_NSTATES ? n[state] : "?";
}

static const char *const alloc_names[] = { "malloc", "calloc", "realloc", "free", "posix_memalign",
                                           "aligned_alloc", "memalign", "valloc", "pvalloc",
                                           "reallocarray" };

int mlz__is_alloc_name(const char *name)
{
    for (size_t i = 0; i < sizeof alloc_names / sizeof *alloc_names; i++)
        if (strcmp(name, alloc_names[i]) == 0) return 1;
    return 0;
}
