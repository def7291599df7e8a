/*
 * capstone_dl.c - libcapstone on demand, with a private mmap arena
 * (see capstone_dl.h for why).
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "capstone_dl.h"
#include "got_internal.h"

#define CS_ARENA_SIZE ((size_t)64 << 20)   /* reserved, touched on demand */

/* One arena at a time: users hold the gotpatch lock between begin and end. */
static char *cs_arena;
static size_t cs_used;

static void *ca_malloc(size_t n)
{
    size_t need = ((n + 15) & ~(size_t)15) + 16;
    if (!cs_arena || need > CS_ARENA_SIZE - cs_used) return NULL;
    char *p = cs_arena + cs_used;
    cs_used += need;
    *(size_t *)p = n;
    return p + 16;
}

static void *ca_calloc(size_t a, size_t b)
{
    if (b && a > SIZE_MAX / b) return NULL;
    return ca_malloc(a * b);   /* fresh mmap pages are zero, and nothing is reused */
}

static void ca_free(void *p) { (void)p; }

static void *ca_realloc(void *p, size_t n)
{
    void *q = ca_malloc(n);
    if (q && p) {
        size_t old = *(size_t *)((char *)p - 16);
        memcpy(q, p, old < n ? old : n);
    }
    return q;
}

int mlz__cs_load(mlz__cs *c)
{
    static const char *const names[] = { "libcapstone.so.4", "libcapstone.so.5", "libcapstone.so" };
    memset(c, 0, sizeof *c);
    void *(*dl)(const char *, int) = mlz__got.real_dlopen ? mlz__got.real_dlopen : dlopen;
    for (size_t i = 0; i < 3 && !c->lib; i++) c->lib = dl(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!c->lib) return MLZ_GOT_ENOCAPSTONE;
    *(void **)&c->open = dlsym(c->lib, "cs_open");
    *(void **)&c->option = dlsym(c->lib, "cs_option");
    *(void **)&c->malloc_insn = dlsym(c->lib, "cs_malloc");
    *(void **)&c->free = dlsym(c->lib, "cs_free");
    *(void **)&c->disasm_iter = dlsym(c->lib, "cs_disasm_iter");
    *(void **)&c->close = dlsym(c->lib, "cs_close");
    if (!c->open || !c->option || !c->malloc_insn || !c->free || !c->disasm_iter || !c->close)
        return MLZ_GOT_ENOCAPSTONE;
    return 0;
}

void mlz__cs_unload(mlz__cs *c)
{
    if (!c->lib) return;
    int (*dc)(void *) = mlz__got.real_dlclose ? mlz__got.real_dlclose : dlclose;
    dc(c->lib);
    c->lib = NULL;
}

int mlz__cs_begin(mlz__cs *c, int detail)
{
    c->h = 0;
    c->insn = NULL;
    cs_arena = mmap(NULL, CS_ARENA_SIZE, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (cs_arena == MAP_FAILED) { cs_arena = NULL; return MLZ_GOT_ENOMEM; }
    cs_used = 0;
    cs_opt_mem mem = { ca_malloc, ca_calloc, ca_realloc, ca_free, vsnprintf };
    if (c->option(0, CS_OPT_MEM, (size_t)&mem) != CS_ERR_OK ||
        c->open(CS_ARCH_X86, CS_MODE_64, &c->h) != CS_ERR_OK) {
        c->h = 0;
        return MLZ_GOT_ENOCAPSTONE;
    }
    c->option(c->h, CS_OPT_DETAIL, detail ? CS_OPT_ON : CS_OPT_OFF);
    c->insn = c->malloc_insn(c->h);
    return c->insn ? 0 : MLZ_GOT_ENOMEM;
}

void mlz__cs_end(mlz__cs *c)
{
    if (c->insn) c->free(c->insn, 1);
    if (c->h) c->close(&c->h);
    c->insn = NULL;
    c->h = 0;
    if (cs_arena) {
        cs_opt_mem dflt = { malloc, calloc, realloc, free, vsnprintf };
        c->option(0, CS_OPT_MEM, (size_t)&dflt);
        munmap(cs_arena, CS_ARENA_SIZE);
        cs_arena = NULL;
    }
}
