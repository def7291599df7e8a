/*
 * arena.c - the only memory gotpatch uses besides its static state.
 *
 * The library runs inside the target process, often while the target's
 * allocator is being rerouted through us: calling malloc here could recurse
 * into the hooks or take the allocator's locks at the worst moment. So
 * growable tables come straight from mmap/mremap, and strings that reports
 * hand out (module paths) go to a bump arena that is never freed, keeping
 * every pointer we returned valid for the life of the process. Each
 * distinct path is stored once, so the arena grows with the modules a
 * process ever loaded, not with attach/detach cycles or dlopen loops.
 */
#include <string.h>
#include <sys/mman.h>

#include "got_internal.h"

int mlz__vec_reserve(void **p, size_t *cap, size_t elem, size_t need)
{
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 64;
    while (ncap < need) ncap *= 2;
    size_t obytes = *cap * elem, nbytes = ncap * elem;
    void *np;
    if (*p == NULL)
        np = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    else
        np = mremap(*p, obytes, nbytes, MREMAP_MAYMOVE);
    if (np == MAP_FAILED) return MLZ_GOT_ENOMEM;
    *p = np;
    *cap = ncap;
    return 0;
}

#define ARENA_CHUNK (64u * 1024u)

static char *arena_cur;
static size_t arena_left;

/* Every string handed out, so a path seen again (a module re-examined at
 * each attach after a detach emptied the module table) is the same copy:
 * the arena grows with the distinct paths, not with the attaches. */
static const char **interned;
static size_t ninterned, capinterned;

/* Callers hold the patch lock, which serialises the bump pointer. */
const char *mlz__strdup_arena(const char *s)
{
    for (size_t i = 0; i < ninterned; i++)
        if (!strcmp(interned[i], s)) return interned[i];
    size_t n = strlen(s) + 1;
    if (n > arena_left) {
        size_t sz = n > ARENA_CHUNK ? (n + 4095) & ~(size_t)4095 : ARENA_CHUNK;
        void *p = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return "";
        arena_cur = p;
        arena_left = sz;
    }
    char *r = arena_cur;
    memcpy(r, s, n);
    arena_cur += n;
    arena_left -= n;
    if (mlz__vec_reserve((void **)&interned, &capinterned, sizeof *interned, ninterned + 1) == 0)
        interned[ninterned++] = r;
    return r;
}
