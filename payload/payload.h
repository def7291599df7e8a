/*
 * payload.h - what the files of the injected library share.
 *
 * The payload is one global state (mlz__g), one small thread-local block
 * per thread (mlz__tls, initial-exec so access is a single %fs-relative
 * load even when we are dlopen'ed into a running process), the hooks, and
 * the event path from the hooks to the drain thread that writes the spool.
 */
#ifndef MLZ_PAYLOAD_H
#define MLZ_PAYLOAD_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bloom.h"
#include "clock.h"
#include "heapmap.h"
#include "sampler.h"
#include "stacktab.h"
#include "unwind.h"

/* The allocator functions the hooks forward to. */
typedef struct mlz_real_fns {
    void *(*malloc)(size_t);
    void  (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    int   (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    /* No reallocarray: its hook calls realloc (hooks.c). */
} mlz_real_fns;

/* Per-thread state: small, so it fits glibc's static TLS surplus. */
/* What the thread is doing in the payload (mlz_tls.s.in_hook): its
 * allocations pass through in both cases, but only our own code that may
 * allocate (a thread's start-up, the drain thread) runs as MLZ_HOOK_OWN,
 * so an allocation that finds MLZ_HOOK_SAMPLING is a signal handler's
 * (counted in exact mode). Frees are handled alike in both
 * (hooks.c: interrupted_free). */
enum { MLZ_HOOK_OUT = 0, MLZ_HOOK_SAMPLING = 1, MLZ_HOOK_OWN = 2 };

typedef struct mlz_tls {
    mlz_sampler_tls s;        /* countdown, PRNG, recursion guard */
    struct mlz_ring *ring;    /* this thread's event ring, claimed lazily */
    mlz_stack_cache stack;    /* stack bounds for the unwinders */
    int32_t tid;
    uint64_t births;          /* this thread's samples so far: entries' seq */
    uint32_t in_named;        /* inside a named allocator (hooks_named.c): its own
                               * allocations from the allocator below are not samples */
    uint32_t in_real;         /* inside the real call of a sample path (hooks.c) */
    uintptr_t named_frame;    /* the frame of the operator new hook that set in_named:
                               * an exception thrown through it leaves in_named set
                               * until it is caught (hooks_named.c: mlz__cxx_catch) */
} mlz_tls;

extern __thread mlz_tls mlz__tls __attribute__((tls_model("initial-exec")));

enum mlz_unwinder { MLZ_UNWIND_DWARF = 0, MLZ_UNWIND_FP = 1 };

/* What a record says (mlz_rec.type). */
enum mlz_rec_kind { MLZ_REC_ALLOC = 0, MLZ_REC_FREE = 1 };

/* Event records, as the hooks push them (drain thread turns them into
 * .mlyze events). 32 bytes. */
typedef struct mlz_rec {
    uint64_t ts_ns;           /* CLOCK_MONOTONIC */
    uint64_t addr;
    uint64_t size;
    uint32_t stack_id;
    uint8_t  type;            /* enum mlz_rec_kind */
    uint8_t  rate_shift;      /* ALLOC: sampled at rate << rate_shift */
    uint8_t  pad[2];
} mlz_rec;

/* Statistics the tools read (memlyze status, the spool's counters). */
typedef struct mlz_counters {
    _Atomic uint64_t samples;        /* allocations sampled (summed by the drain thread) */
    _Atomic uint64_t frees_tracked;  /* sampled allocations seen freed (likewise) */
    _Atomic uint64_t ring_drops;     /* samples given up: ring full (no ALLOC, no FREE) */
    _Atomic uint64_t no_ring;        /* samples given up: no ring left */
    _Atomic uint64_t reentrant;      /* hook entered from our own code */
    _Atomic uint64_t handler_allocs; /* exact mode: allocations by signal handlers that
                                      * interrupted a sample path, not recorded */
    _Atomic uint64_t events_written;
    _Atomic uint64_t spool_errors;
    _Atomic uint64_t in_flight;      /* sample paths running in threads without a ring
                                      * (the others count in their ring: events.c) */
    _Atomic uint64_t frees_lost;     /* FREEs not recorded (ring full past the wait, or
                                      * no ring): each leaves a phantom live object */
    _Atomic uint64_t disk_low_stops; /* 1 once new allocations stopped being recorded
                                      * because the spool's file system was almost full */
    _Atomic uint64_t ring_waits;     /* pushes that found their ring full and waited
                                      * for the drain thread */
    /* Overload (events.c): the drain thread doubles the rate, for the rest
     * of the session, each time events come faster than it writes them.
     * Threads move to rate << rate_shift at their next sample (hooks.c). */
    _Atomic uint64_t rate_shift;
} mlz_counters;

/* Free space the spool leaves on its file system (MEMLYZE_MIN_FREE_MB):
 * below it, new allocations stop being recorded (events.c). */
#define MLZ_DEFAULT_MIN_FREE (512ull << 20)

typedef struct mlz_global {
    mlz_real_fns real;
    _Atomic int active_alloc;        /* sample new allocations */
    _Atomic int active_free;         /* track frees of sampled ones */
    int ready;                       /* data structures exist */
    pid_t pid;                       /* to notice fork/vfork children */
    uint64_t rate;                   /* raised under overload: see c.rate_shift */
    uint64_t seed;                   /* 0 = from entropy */
    uint64_t min_free;               /* bytes to leave free where the spool is; 0 = no floor */
    int min_free_set;                /* by MEMLYZE_MIN_FREE_MB (else at most 5% of the file system) */
    int unwinder;
    unsigned map_log2;               /* the heap map's size asked for (memlyze-attach --max-live), or 0 */
    int follow_fork;
    int coverage;                    /* GOT mode: write the blind-spot report */
    int drain_nice, drain_nice_set;  /* attached: the borrowed thread's own nice (else inherited) */
    uint64_t self_lo, self_hi;       /* our own text: frames to drop */
    mlz_clock clock;                 /* every event's time (core/clock.h) */
    uint64_t mono_to_real_ns;        /* realtime = monotonic + this */
    uint64_t session;                /* realtime ns when this map was made */
    mlz_heapmap map;
    mlz_bloom bloom;
    mlz_stacktab stacks;
    mlz_counters c;
    char spool_path[4096];
} mlz_global;

extern mlz_global mlz__g;

/* state.c */
void mlz__config_from_env(void);
void mlz__default_spool_path(void);
int  mlz__init(void);                /* data structures, config; idempotent */
void mlz__release(void);             /* gives the data structures back (detach) */
void mlz__bloom_keep(uint64_t p);    /* p's free always takes the slow path (boot arena) */
static inline uint64_t mlz__now_ns(void) { return mlz_clock_now(&mlz__g.clock); }

/* preload.c, in the LD_PRELOAD build only (weak: NULL otherwise): whether
 * p is a block of the boot arena. */
int  mlz__boot_block(const void *p) __attribute__((weak));

/* hooks.c: the functions GOT slots point at. */
void *mlz_hook_malloc(size_t n);
void  mlz_hook_free(void *p);
void *mlz_hook_calloc(size_t n, size_t m);
void *mlz_hook_realloc(void *p, size_t n);
int   mlz_hook_posix_memalign(void **out, size_t align, size_t n);
void *mlz_hook_aligned_alloc(size_t align, size_t n);
void *mlz_hook_memalign(size_t align, size_t n);
void *mlz_hook_valloc(size_t n);
void *mlz_hook_pvalloc(size_t n);
void *mlz_hook_reallocarray(void *p, size_t n, size_t m);
/* The cold halves every hook shares (hooks.c), for hooks_named.c. */
void  mlz__sample_slow(void *p, size_t n, uint64_t ts);
void  mlz__sample_pass(mlz_tls *t);          /* a sample point not ours to record: drawn afresh */
void  mlz__free_slow(void *p);
void *mlz__sample_malloc(size_t n);          /* the real malloc, then the sample */
void  mlz__free_then_real(void *p);          /* the rest of the filter's test, the sample's free, the real free */
void *mlz__realloc_common(void *p, size_t n, size_t m, void *(*call)(const void *, void *, size_t, size_t),
                          const void *ctx);

/*
 * The hot halves of malloc's and free's hooks: a thread-local countdown
 * and a branch for allocations, the Bloom filter's first cell for frees
 * (free(NULL) reads the cell of hash 0 like any pointer; the cold half
 * looks at p). Both ways out are tail calls, so the hooks need no stack
 * frame: no register saved and restored on every allocation (that
 * prologue and epilogue were 14 of the 22 instructions malloc's hook ran
 * when it did both in one function). Inlined into each entry point:
 * mlz_hook_malloc/free for GOT slots, malloc/free themselves in the
 * preload library, where a wrapper jumping to the hook cost 4% of a
 * malloc/free loop (one more jump per call; measured on this machine).
 */
#define MLZ_SAMPLES(n) mlz_unlikely(mlz_sampler_should_sample(&mlz__tls.s, (n)))

static inline __attribute__((always_inline)) void *mlz__malloc_hot(size_t n)
{
    if (MLZ_SAMPLES(n)) return mlz__sample_malloc(n);
    return mlz__g.real.malloc(n);
}

static inline __attribute__((always_inline)) void mlz__free_hot(void *p)
{
    if (mlz_unlikely(mlz_bloom_first_default(&mlz__g.bloom, (uint64_t)(uintptr_t)p))) {
        mlz__free_then_real(p);
        return;
    }
    mlz__g.real.free(p);
}

/* hooks_named.c: allocators known by name at run time (prefixed families
 * next to glibc's malloc, --hook SYMBOL=KIND), each forwarding to its own
 * original: slot k calls first[k].real of the table given to bind. */
enum mlz_alloc_kind { MLZ_KIND_MALLOC, MLZ_KIND_FREE, MLZ_KIND_CALLOC, MLZ_KIND_REALLOC, MLZ_KIND_MEMALIGN,
                      MLZ_KIND_POSIX_MEMALIGN, MLZ_KIND_NEW, MLZ_KIND_DELETE, MLZ_KIND_CATCH, MLZ_NKINDS };
/* Slots: up to MEMLYZE_NAMED_HOOKS_MAX --hook symbols, the prefixed
 * families and C++'s operators of a replacement allocator (families.c). */
#define MLZ_NAMED_HOOKS 48
struct mlz_got_hook;
int   mlz__kind_of(const char *word, size_t len);   /* "malloc", "aligned_alloc", "new"... -> kind, or -1 */
void *mlz__named_hook(int slot, int kind);
void  mlz__named_bind(struct mlz_got_hook *first);
/* C++'s operator new and delete of an allocator that replaces them
 * (kinds "new", "delete"): whatever arguments follow the size or the
 * pointer (alignment, nothrow tag, size) are passed on as they came. */
void *mlz__cxx_new(void *real, size_t n, uintptr_t a, uintptr_t b);
void  mlz__cxx_delete(void *real, void *p, uintptr_t a, uintptr_t b);
void *mlz__cxx_catch(void *real, void *exception);   /* __cxa_begin_catch (kind "catch") */

/* attach.c: the injector's entry points (exported) */
int memlyze_attach(const char *config);
int memlyze_detach(void);

/* control.c */
int  mlz__start(void);
void mlz__stop(void);
void mlz__err_line(const char *msg);     /* the one line the payload may write to stderr */
void mlz__shutdown(void);
void mlz__atfork_child(void);        /* pthread_atfork child handler */

/* events.c */
/* The calling thread's ring, claimed on first use; NULL when none is left.
 * A sample path looks it up once and passes it on: the ring stays this
 * thread's until the path leaves (detach waits for that, mlz__quiescent),
 * and the functions below accept NULL. */
typedef struct mlz_ring mlz_ring;
mlz_ring *mlz__ring(void);
/* 1 = recorded. 0 = not recorded (counted): the caller must act as if the
 * event had not happened to the profile (an ALLOC's sample is given up). */
int  mlz__push(mlz_ring *r, enum mlz_rec_kind kind, uint64_t ts_ns, uint64_t addr, uint64_t size,
               uint32_t stack_id);
int  mlz__drain_start(void);         /* opens the spool (else -1), starts the thread (else -2) */
void mlz__drain_stop(void);          /* final drain, seals the spool */
void mlz__drain_assist(void);        /* on the drain thread: a round now (a detach waiting) */
void mlz__drain_forget(void);        /* fork child: the thread is gone */
void mlz__drain_release(void);       /* unmaps the rings (detach, quiescent) */
/* The module map retaken after a dlopen, and around a dlclose (both
 * fronts): see events.c. */
void mlz__modules_refresh(void);
int mlz__dlopen_loads_new(void *(*open_fn)(const char *, int), int (*close_fn)(void *), const char *file);
int  mlz__dlclose_between(int (*close)(void *), void *handle);
mlz_unwind_cache *mlz__unwind_cache(mlz_ring *r);   /* the ring's thread's, or NULL */
/* Per-thread counters, kept in the thread's ring so no line shared by
 * threads is written per event. */
_Atomic uint64_t *mlz__in_flight_slot(mlz_ring *r); /* what enter/leave count in */
void mlz__count_sample(mlz_ring *r);
void mlz__count_free(mlz_ring *r);
/* A signal handler's FREE, kept in the ring's stash until the sample path
 * it interrupted pushes its own record or ends (hooks.c: interrupted_free).
 * 0 if there is no room (no ring, stash full). */
int  mlz__stash_free(mlz_ring *r, uint64_t ts_ns, uint64_t addr);
int  mlz__stash_pending(const mlz_ring *r);
void mlz__stash_flush(mlz_ring *r);  /* pushes the stash; the thread's own path only */
int  mlz__quiescent(void);           /* 1: no thread is inside a sample path */
void mlz__spool_note(unsigned type, const char *text, size_t len); /* written by the drain thread */
int  mlz__drain_flush(void);         /* waits (bounded) until what is pushed is on disk */

/* exec.c: one process, several images (execve) */
struct mlz_jw;
int  mlz__exec_choose_spool(int fork_child); /* this image's segment; -1 = do not profile */
void mlz__exec_meta(struct mlz_jw *w);       /* exec_seq, start_ticks in the spool metadata */
void mlz__exec_before(const char *file, int search, char *const argv[], char *const envp[]);
void mlz__exec_failed(void);

#endif
