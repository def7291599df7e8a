/*
 * symbolize.c - program counters to function, file and line, with libdw,
 * outside the profiled process.
 *
 * Modules are reported to an offline Dwfl at the addresses they had in the
 * target, so libdw applies the load bias (PIE executables, shared
 * libraries) and finds separate debug files itself (.gnu_debuglink and
 * /usr/lib/debug/.build-id). A module whose file is missing or whose
 * build-id differs from the one recorded is not trusted: its frames become
 * "module+0xoffset". Inlined calls expand into one frame each, innermost
 * first. C++ names are demangled. Compressed debug files are inflated by
 * debugfile.c before libdw opens them.
 */
#include "symbolize.h"
#include "debugfile.h"
#include "proc.h"

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <dlfcn.h>
#include <dwarf.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* C++'s demangler, from libstdc++ loaded at the first mangled name: linked,
 * it made every memlyze command load libstdc++, C programs' traces too. */
typedef char *demangle_fn(const char *mangled, char *buf, size_t *len, int *status);
static demangle_fn *cxa_demangle;
static pthread_once_t cxa_once = PTHREAD_ONCE_INIT;

static void load_demangler(void)
{
    void *h = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_LOCAL);
    if (h) *(void **)&cxa_demangle = dlsym(h, "__cxa_demangle");
}

typedef struct sym_module {
    char *path;
    uint64_t start, end, bias;
    Dwfl_Module *mod;         /* NULL: unresolvable */
    int warm;                 /* sym_warm loaded it */
} sym_module;

struct symbolizer {
    Dwfl *dwfl;
    sym_module *mods;
    size_t nmods, cap;
    char **strings;           /* every string we return, freed at the end */
    size_t nstrings, scap;
    char root[64];            /* the target's view of the file system, or "" */
    /* Every pc resolved so far: a trace's stacks share most of their frames
     * (a recursive program's 44k stacks had 60 distinct pcs), and resolving
     * one costs a DWARF scope walk. Open addressing, pc 0 never stored. */
    struct pc_seen { uint64_t pc, rel; uint32_t first, n; int module; } *seen;
    size_t seen_cap, seen_used;
    sym_frame *pool;          /* the frames of seen[], back to back */
    size_t npool, pool_cap;
};

static char hexdigit(unsigned v) { return "0123456789abcdef"[v & 15]; }

/* A module's separate debug file. The one under /usr/lib/debug/.build-id
 * (where Debian's -dbg packages put them, compressed) is opened here and
 * inflated by debugfile.c: libdw's own lookup of it would open it for itself
 * and inflate it with zlib. Everything else (.gnu_debuglink, and dwz's
 * shared files, asked for with no crc) is libdw's standard search. */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                          const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
                          char **debuginfo_file_name)
{
    const unsigned char *id;
    GElf_Addr vaddr;
    int n = debuglink_file && !debuglink_crc ? 0 : dwfl_module_build_id(mod, &id, &vaddr);
    char path[PATH_MAX];
    if (n > 0 && !mlz_proc_build_id_path(id, (size_t)n, path, sizeof path)) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && (*debuginfo_file_name = strdup(path))) return sym_debug_inflated(fd);
        if (fd >= 0) close(fd);
    }
    return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file, debuglink_crc,
                                        debuginfo_file_name);
}

static const Dwfl_Callbacks offline_callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = find_debuginfo,
    .section_address = dwfl_offline_section_address,
};

symbolizer *sym_new(void)
{
    symbolizer *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->dwfl = dwfl_begin(&offline_callbacks);
    if (!s->dwfl) { free(s); return NULL; }
    dwfl_report_begin(s->dwfl);
    return s;
}

static const char *keep(symbolizer *s, char *str)
{
    if (!str) return NULL;
    if (s->nstrings == s->scap) {
        size_t n = s->scap ? s->scap * 2 : 256;
        char **p = realloc(s->strings, n * sizeof *p);
        if (!p) { free(str); return NULL; }
        s->strings = p;
        s->scap = n;
    }
    return s->strings[s->nstrings++] = str;
}

void sym_set_root(symbolizer *s, const char *root)
{
    snprintf(s->root, sizeof s->root, "%s", root ? root : "");
}

int sym_add_module(symbolizer *s, const char *path, uint64_t start, uint64_t size, uint64_t bias,
                   const uint8_t *build_id, size_t blen)
{
    if (s->nmods == s->cap) {
        size_t n = s->cap ? s->cap * 2 : 32;
        sym_module *p = realloc(s->mods, n * sizeof *p);
        if (!p) return -1;
        s->mods = p;
        s->cap = n;
    }
    sym_module *m = &s->mods[s->nmods];
    memset(m, 0, sizeof *m);
    m->path = strdup(path);
    m->start = start;
    m->end = start + size;
    m->bias = bias;
    if (!m->path) return -1;
    s->nmods++;
    /* The vDSO and deleted or unreadable files stay unresolved. */
    if (path[0] != '/') return 0;
    /* The file the target mapped is the one under its root (its own mount
     * namespace: a container's /usr/lib is not ours). Only when that cannot
     * be opened (no permission, the process gone) is the path taken as ours:
     * a file found there but of another build would be no better. */
    char rooted[PATH_MAX + 64];
    const char *file = path;
    if (s->root[0]) {
        snprintf(rooted, sizeof rooted, "%s%s", s->root, path);
        if (access(rooted, R_OK) == 0) file = rooted;
    }
    Dwfl_Module *mod = dwfl_report_elf(s->dwfl, path, file, -1, bias, false);
    if (!mod) return 0;
    const unsigned char *bid;
    GElf_Addr vaddr;
    int n = dwfl_module_build_id(mod, &bid, &vaddr);
    if (blen && (n != (int)blen || memcmp(bid, build_id, blen) != 0)) {
        /* The file on disk is not the one that was loaded. */
        return 0;
    }
    m->mod = mod;
    return 0;
}

void sym_ready(symbolizer *s)
{
    dwfl_report_end(s->dwfl, NULL, NULL);
}

static const sym_module *find_module(const symbolizer *s, uint64_t pc, size_t *index)
{
    for (size_t i = 0; i < s->nmods; i++)
        if (pc >= s->mods[i].start && pc < s->mods[i].end) {
            *index = i;
            return &s->mods[i];
        }
    return NULL;
}

static const char *demangle(symbolizer *s, const char *name)
{
    if (!name) return NULL;
    if (name[0] == '_' && name[1] == 'Z') {
        int status = 0;
        pthread_once(&cxa_once, load_demangler);
        char *d = cxa_demangle ? cxa_demangle(name, NULL, NULL, &status) : NULL;
        if (d && status == 0) return keep(s, d);
        free(d);
    }
    return name;
}

static const char *die_name(symbolizer *s, Dwarf_Die *die)
{
    Dwarf_Attribute a;
    const char *n = NULL;
    if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a) || dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
        n = dwarf_formstring(&a);
    if (!n) n = dwarf_diename(die);
    if (!n && dwarf_attr_integrate(die, DW_AT_name, &a)) n = dwarf_formstring(&a);
    return demangle(s, n);
}

static int resolve(symbolizer *s, uint64_t pc, sym_frame *out, int max, int *module, uint64_t *rel);

static size_t seen_slot(const symbolizer *s, uint64_t pc)
{
    size_t i = (size_t)((pc * 0x9E3779B97F4A7C15ull) >> 20) & (s->seen_cap - 1);
    while (s->seen[i].pc && s->seen[i].pc != pc) i = (i + 1) & (s->seen_cap - 1);
    return i;
}

/* Keeps pc's answer; on failure (memory) it is simply not kept. */
static void remember(symbolizer *s, uint64_t pc, const sym_frame *fr, int n, int module, uint64_t rel)
{
    if (2 * (s->seen_used + 1) > s->seen_cap) {
        size_t cap = s->seen_cap ? 2 * s->seen_cap : 1024;
        struct pc_seen *old = s->seen, *nw = calloc(cap, sizeof *nw);
        if (!nw) return;
        size_t ocap = s->seen_cap;
        s->seen = nw;
        s->seen_cap = cap;
        for (size_t i = 0; i < ocap; i++)
            if (old[i].pc) s->seen[seen_slot(s, old[i].pc)] = old[i];
        free(old);
    }
    if (s->npool + (size_t)n > s->pool_cap) {
        size_t cap = s->pool_cap ? 2 * s->pool_cap : 4096;
        while (cap < s->npool + (size_t)n) cap *= 2;
        sym_frame *np = realloc(s->pool, cap * sizeof *np);
        if (!np) return;
        s->pool = np;
        s->pool_cap = cap;
    }
    memcpy(s->pool + s->npool, fr, (size_t)n * sizeof *fr);
    s->seen[seen_slot(s, pc)] = (struct pc_seen){ pc, rel, (uint32_t)s->npool, (uint32_t)n, module };
    s->npool += (size_t)n;
    s->seen_used++;
}

int sym_resolve(symbolizer *s, uint64_t pc, sym_frame *out, int max, int *module, uint64_t *rel)
{
    if (pc && s->seen_cap) {
        const struct pc_seen *e = &s->seen[seen_slot(s, pc)];
        if (e->pc == pc && (int)e->n <= max) {
            memcpy(out, s->pool + e->first, e->n * sizeof *out);
            *module = e->module;
            *rel = e->rel;
            return (int)e->n;
        }
    }
    int n = resolve(s, pc, out, max, module, rel);
    if (pc && n > 0) remember(s, pc, out, n, *module, *rel);
    return n;
}

static int resolve(symbolizer *s, uint64_t pc, sym_frame *out, int max, int *module, uint64_t *rel)
{
    size_t mi;
    const sym_module *m = find_module(s, pc, &mi);
    *module = m ? (int)mi : -1;
    *rel = m ? pc - m->bias : pc;
    /* Return addresses point after the call; look up the call itself. */
    uint64_t q = pc ? pc - 1 : 0;
    if (!m || !m->mod) {
        char buf[512];
        if (m) {
            const char *base = strrchr(m->path, '/');
            snprintf(buf, sizeof buf, "%s+0x%llx", base ? base + 1 : m->path, (unsigned long long)(pc - m->bias));
        } else {
            snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)pc);
        }
        out[0] = (sym_frame){ keep(s, strdup(buf)), "", 0, 0 };
        return 1;
    }

    /* The outermost function: the ELF symbol (works without debug info). */
    GElf_Sym sym;
    GElf_Off off = 0;
    const char *fn = demangle(s, dwfl_module_addrinfo(m->mod, q, &off, &sym, NULL, NULL, NULL));
    const char *file = "";
    int line = 0;
    Dwfl_Line *ln = dwfl_module_getsrc(m->mod, q);
    if (ln) {
        const char *f = dwfl_lineinfo(ln, NULL, &line, NULL, NULL, NULL);
        if (f) file = f;
    }

    int n = 0;
    Dwarf_Addr bias;
    Dwarf_Die *cu = dwfl_module_addrdie(m->mod, q, &bias);
    Dwarf_Die *scopes = NULL;
    int ns = cu ? dwarf_getscopes(cu, q - bias, &scopes) : 0;
    if (ns > 0) {
        /* scopes[0] is innermost. Each inlined subroutine gives a frame at
         * the current file:line, and passes its call site outward. */
        Dwarf_Files *files = NULL;
        size_t nfiles = 0;
        dwarf_getsrcfiles(cu, &files, &nfiles);
        for (int i = 0; i < ns && n < max - 1; i++) {
            int tag = dwarf_tag(&scopes[i]);
            if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) continue;
            const char *name = die_name(s, &scopes[i]);
            if (tag == DW_TAG_subprogram) {
                if (name) fn = name;
                break;
            }
            out[n++] = (sym_frame){ name ? name : "??", file, (unsigned)line, 1 };
            Dwarf_Attribute a;
            Dwarf_Word cf = 0, cl = 0;
            if (dwarf_attr(&scopes[i], DW_AT_call_file, &a)) dwarf_formudata(&a, &cf);
            if (dwarf_attr(&scopes[i], DW_AT_call_line, &a)) dwarf_formudata(&a, &cl);
            const char *f = files ? dwarf_filesrc(files, cf, NULL, NULL) : NULL;
            file = f ? f : "";
            line = (int)cl;
        }
        free(scopes);
    }
    if (!fn) {
        char buf[512];
        const char *base = strrchr(m->path, '/');
        snprintf(buf, sizeof buf, "%s+0x%llx", base ? base + 1 : m->path, (unsigned long long)(pc - m->bias));
        fn = keep(s, strdup(buf));
    }
    out[n++] = (sym_frame){ fn, file, (unsigned)line, 0 };
    return n;
}

void sym_warm(symbolizer *s, uint64_t pc)
{
    size_t i;
    if (!find_module(s, pc, &i) || !s->mods[i].mod || s->mods[i].warm) return;
    s->mods[i].warm = 1;
    Dwarf_Addr bias;
    dwfl_module_getsymtab(s->mods[i].mod);
    dwfl_module_getdwarf(s->mods[i].mod, &bias);
}

void sym_free(symbolizer *s)
{
    if (!s) return;
    free(s->seen);
    free(s->pool);
    dwfl_end(s->dwfl);
    for (size_t i = 0; i < s->nmods; i++) free(s->mods[i].path);
    free(s->mods);
    for (size_t i = 0; i < s->nstrings; i++) free(s->strings[i]);
    free(s->strings);
    free(s);
}

void sym_hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hexdigit(b[i] >> 4);
        out[2 * i + 1] = hexdigit(b[i]);
    }
    out[2 * n] = 0;
}
