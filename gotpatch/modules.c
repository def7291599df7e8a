/*
 * modules.c - following dlopen and dlclose.
 *
 * A library dlopen'ed after attach must be patched before any of its code
 * runs after dlopen returns, so the payload hooks dlopen itself and calls
 * mlz_got_dlopen(), which calls the real dlopen and then patches whatever
 * the loader added (mlz_got_patch_new_modules: dlpi_adds tells).
 *
 * The catch (memray #525, libTAS #399, renderdoc #3403): glibc's dlopen
 * takes the caller from its own return address (RETURN_ADDRESS(0) in
 * dlfcn/dlopen.c, mapped to a link_map in dl_open_worker, elf/dl-open.c)
 * and uses that object for three things: the directories searched for a
 * bare name (its DT_RPATH chain when it has no DT_RUNPATH, LD_LIBRARY_PATH,
 * its DT_RUNPATH), the expansion of $ORIGIN in a name, and the namespace the
 * library goes into. Once the hook sits in between, the payload is the
 * caller and all three are wrong. memray answered by hooking dlsym instead
 * (too late for us: the library's code would already have run unpatched).
 *
 * Our design: the hook is told the real caller's return address, and we
 * make the real dlopen's answer independent of who calls it, by computing
 * what the caller would have loaded and passing that:
 *  - the caller's link_map: dladdr1(RTLD_DL_LINKMAP) on its return address
 *    (the same lookup _dl_find_dso_for_object does; main program if none);
 *  - a name with '/' and '$': $ORIGIN, $LIB, $PLATFORM expanded for the
 *    caller ($ORIGIN from dlinfo(RTLD_DI_ORIGIN), i.e. glibc's own l_origin);
 *  - a bare name: unless some loaded object already answers to it (glibc
 *    then returns that object whoever asks), walk the caller's search list
 *    as glibc itself computes it - dlinfo(RTLD_DI_SERINFO) on the caller's
 *    link_map gives the RPATH chain, LD_LIBRARY_PATH and RUNPATH with DSTs
 *    expanded relative to each owning object - trying in each directory the
 *    glibc-hwcaps and legacy hwcap subdirectories glibc 2.36 tries, and
 *    accepting a file only if it is an x86_64 ELF64 (glibc skips others and
 *    goes on). The first hit is passed as an absolute path, which the loader
 *    opens without searching. The list stops where the default directories
 *    start, because glibc consults ld.so.cache before them: with no hit the
 *    plain name is passed and the cache and default directories, which do
 *    not depend on the caller, are searched as usual;
 *  - a caller in another namespace: dlmopen into that namespace.
 * Residual differences, all needing unusual setups: a name that matches a
 * loaded object only through an earlier dlopen's request string (glibc keeps
 * those in l_libname, which is private), a name found nowhere in the
 * caller's directories but present in a DT_RPATH directory of the payload's
 * own loader chain, and a caller with DF_1_NODEFLIB. In secure-execution
 * (setuid) processes names are passed unchanged.
 *
 * What cannot be fixed by any hook: constructors of the new library run
 * inside the real dlopen, before we can patch it; their allocations through
 * the library's own GOT are not seen (through libc, e.g. strdup, they are).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "got_internal.h"

/* Debian's multiarch value of glibc's DL_DST_LIB. */
#define MLZ_DST_LIB "lib/x86_64-linux-gnu"

static size_t append(char *out, size_t pos, size_t len, const char *s, size_t n)
{
    if (pos >= len) return pos;
    size_t room = len - pos - 1;
    size_t k = n < room ? n : room;
    memcpy(out + pos, s, k);
    out[pos + k] = '\0';
    return pos + n;   /* may exceed len: the caller checks for truncation */
}

/* Returns 1 if any DST was expanded, 0 if none, -1 on overflow/unknown origin. */
static int expand_dst(const char *file, struct link_map *lm, char *out, size_t len)
{
    char origin[PATH_MAX + 1];
    int have_origin = -1, any = 0;
    size_t pos = 0;
    out[0] = '\0';
    for (const char *p = file; *p;) {
        if (*p != '$') {
            const char *q = strchr(p, '$');
            size_t n = q ? (size_t)(q - p) : strlen(p);
            pos = append(out, pos, len, p, n);
            p += n;
            continue;
        }
        static const char *const names[] = { "ORIGIN", "PLATFORM", "LIB" };
        size_t k, nl = 0;
        int braced = p[1] == '{';
        for (k = 0; k < 3; k++) {
            nl = strlen(names[k]);
            const char *n = p + 1 + braced;
            if (strncmp(n, names[k], nl) != 0) continue;
            char after = n[nl];
            if (braced ? after == '}' : !(after == '_' || (after >= 'A' && after <= 'Z') ||
                                          (after >= 'a' && after <= 'z') || (after >= '0' && after <= '9')))
                break;
        }
        if (k == 3) {   /* not a DST glibc knows: kept literally */
            pos = append(out, pos, len, p, 1);
            p++;
            continue;
        }
        const char *val;
        if (k == 0) {
            if (have_origin < 0)
                have_origin = dlinfo(lm, RTLD_DI_ORIGIN, origin) == 0 && origin[0] == '/';
            if (!have_origin) return -1;
            val = origin;
        } else if (k == 1) {
            val = (const char *)getauxval(AT_PLATFORM);
            if (!val) return -1;
        } else {
            val = MLZ_DST_LIB;
        }
        pos = append(out, pos, len, val, strlen(val));
        p += 1 + braced + nl + braced;
        any = 1;
    }
    if (pos >= len) return -1;
    return any;
}

/* The subdirectories glibc 2.36 tries under every search directory, best
 * first (see `ld.so --help`): glibc-hwcaps levels the CPU supports, then the
 * legacy tls/platform/x86_64 combinations, then the directory itself. */
static const char *hwcap_sub[16];
static size_t nhwcap_sub;

/* Called by mlz_got_init (under the patch lock), before any dlopen hook runs. */
void mlz__init_search_paths(void)
{
    if (nhwcap_sub) return;
    static char legacy[6][64];
    size_t n = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4")) hwcap_sub[n++] = "glibc-hwcaps/x86-64-v4/";
    if (__builtin_cpu_supports("x86-64-v3")) hwcap_sub[n++] = "glibc-hwcaps/x86-64-v3/";
    if (__builtin_cpu_supports("x86-64-v2")) hwcap_sub[n++] = "glibc-hwcaps/x86-64-v2/";
    const char *plat = (const char *)getauxval(AT_PLATFORM);
    if (plat && strlen(plat) < 20) {
        static const char *const fmt[6][3] = {
            { "tls/", "P", "/x86_64/" }, { "tls/", "P", "/" }, { "tls/x86_64/", "", "" },
            { "tls/", "", "" }, { "", "P", "/x86_64/" }, { "", "P", "/" } };
        for (size_t i = 0; i < 6; i++) {
            size_t pos = 0;
            for (size_t j = 0; j < 3; j++) {
                const char *s = fmt[i][j][0] == 'P' ? plat : fmt[i][j];
                pos = append(legacy[i], pos, sizeof legacy[i], s, strlen(s));
            }
            hwcap_sub[n++] = legacy[i];
        }
    }
    hwcap_sub[n++] = "x86_64/";
    hwcap_sub[n++] = "";
    __atomic_store_n(&nhwcap_sub, n, __ATOMIC_RELEASE);
}

/* What glibc's open_verify would accept for an x86_64 process. */
static int usable_elf(const char *path)
{
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) return 0;
    ElfW(Ehdr) eh;
    ssize_t n = pread(fd, &eh, sizeof eh, 0);
    close(fd);
    return n == (ssize_t)sizeof eh && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 &&
           eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_ident[EI_DATA] == ELFDATA2LSB &&
           eh.e_machine == EM_X86_64 && eh.e_ident[EI_VERSION] == EV_CURRENT;
}

struct loaded_ctx { const char *name; int found; };

static int loaded_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct loaded_ctx *c = arg;
    if (info->dlpi_name && strcmp(info->dlpi_name, c->name) == 0) { c->found = 1; return 1; }
    mlz__dyn d;
    if (mlz__dyn_parse(info, &d) == 0 && d.soname && strcmp(d.soname, c->name) == 0) {
        c->found = 1;
        return 1;
    }
    return 0;
}

static int search_caller_path(const char *file, struct link_map *lm, char *out, size_t len)
{
    Dl_serinfo sz;
    if (dlinfo(lm, RTLD_DI_SERINFOSIZE, &sz) != 0 || sz.dls_cnt == 0) return 0;
    /* Normally a few hundred bytes; the stack buffer covers all but absurd
     * RUNPATHs, which get an mmap. */
    union { Dl_serinfo si; char raw[8192]; } stackbuf;
    Dl_serinfo *si = &stackbuf.si;
    size_t need = sz.dls_size;
    void *mapped = NULL;
    if (need > sizeof stackbuf) {
        mapped = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (mapped == MAP_FAILED) return 0;
        si = mapped;
    }
    *si = sz;
    int hit = 0;
    if (dlinfo(lm, RTLD_DI_SERINFO, si) == 0) {
        size_t nsub = __atomic_load_n(&nhwcap_sub, __ATOMIC_ACQUIRE);
        for (unsigned i = 0; i < si->dls_cnt && !hit; i++) {
            /* glibc reads ld.so.cache before its default directories */
            if (si->dls_serpath[i].dls_flags & LA_SER_DEFAULT) break;
            const char *dir = si->dls_serpath[i].dls_name;
            if (!dir || !dir[0]) continue;
            for (size_t s = 0; s < nsub && !hit; s++) {
                size_t pos = append(out, 0, len, dir, strlen(dir));
                pos = append(out, pos, len, "/", 1);
                pos = append(out, pos, len, hwcap_sub[s], strlen(hwcap_sub[s]));
                pos = append(out, pos, len, file, strlen(file));
                if (pos < len && usable_elf(out)) hit = 1;
            }
        }
    }
    if (mapped) munmap(mapped, need);
    return hit;
}

static struct link_map *caller_map(void *caller)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (caller && dladdr1(caller, &info, (void **)&lm, RTLD_DL_LINKMAP) && lm) return lm;
    return _r_debug.r_map;   /* glibc's default: the main program */
}

static int resolve(const char *file, void *caller, char *out, size_t len, Lmid_t *ns)
{
    *ns = LM_ID_BASE;
    if (!file || !len) return 0;
    out[0] = '\0';
    struct link_map *lm = caller_map(caller);
    if (!lm) return 0;
    Lmid_t id;
    if (dlinfo(lm, RTLD_DI_LMID, &id) == 0) *ns = id;
    if (getauxval(AT_SECURE)) return 0;
    if (strchr(file, '/')) {
        if (!strchr(file, '$')) return 0;      /* relative to the cwd or absolute: same for everyone */
        return expand_dst(file, lm, out, len) == 1;
    }
    struct loaded_ctx lc = { .name = file };
    dl_iterate_phdr(loaded_cb, &lc);
    if (lc.found) return 0;
    return search_caller_path(file, lm, out, len);
}

int mlz_got_dlopen_path(const char *file, void *caller_ret_addr, char *out, size_t len)
{
    Lmid_t ns;
    if (!out) return MLZ_GOT_EINVAL;
    return resolve(file, caller_ret_addr, out, len, &ns);
}

void *mlz_got_dlopen(const char *file, int mode, void *caller_ret_addr)
{
    if (!mlz__got.real_dlopen) return NULL;
    char path[PATH_MAX];
    Lmid_t ns = LM_ID_BASE;
    const char *use = file;
    if (file && resolve(file, caller_ret_addr, path, sizeof path, &ns) == 1) use = path;
    void *h;
    if (ns != LM_ID_BASE && mlz__got.real_dlmopen)
        h = mlz__got.real_dlmopen(ns, use, mode);
    else
        h = mlz__got.real_dlopen(use, mode);
    if (h) {
        int saved = errno;
        if (mlz__lock() == 0) {
            mlz__patch_new_locked();
            mlz__unlock();
        }
        errno = saved;
    }
    return h;
}

int mlz_got_dlclose(void *handle)
{
    if (!mlz__got.real_dlclose) return -1;
    int r = mlz__got.real_dlclose(handle);
    int saved = errno;
    if (__atomic_load_n(&mlz__got.initialised, __ATOMIC_ACQUIRE) && mlz__lock() == 0) {
        mlz__forget_unloaded_locked();
        mlz__unlock();
    }
    errno = saved;
    return r;
}
