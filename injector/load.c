/*
 * load.c - put the payload into the target and find its entry points.
 *
 * The target may not see our file system (containers, another mount
 * namespace, noexec /tmp), so the payload travels through a memfd:
 *   1. remote memfd_create(MEMLYZE_MEMFD_NAME, MFD_CLOEXEC|MFD_ALLOW_SEALING);
 *   2. we write the payload's bytes into /proc/PID/fd/N from outside;
 *   3. remote fcntl F_ADD_SEALS: nobody can change the code after our check;
 *   4. remote dlopen("/proc/PID/fd/N", RTLD_NOW|RTLD_LOCAL) with the dlopen
 *      of the target's own libc; dlerror() on failure;
 *   5. remote close(N) (the mapping keeps the file alive);
 *   6. remote dlsym for the entry points.
 * A payload already mapped (an earlier attach: detach keeps the code mapped
 * as a pass-through) is reused: its entry points are read from the mapped
 * file or image (proc/elfimage.c), so no second copy is ever loaded.
 */
#include "injector.h"
#include "info.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *const entry_names[] = { MEMLYZE_ENTRY_ATTACH, MEMLYZE_ENTRY_DETACH, MEMLYZE_ENTRY_STRERROR,
                                           MEMLYZE_ENTRY_ATTACH_STATS, MEMLYZE_ENTRY_INLINE_SITES };
#define NENTRY 5

/* Data-area offsets for the arguments of one step. */
#define D_NAME 0
#define D_SYM  4096
#define D_ARG  8192

static int open_payload(const char *path, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { mlz__err("cannot open the payload %s: %s", path, strerror(errno)); return -1; }
    /* Checked on the descriptor we read from: no window for a swap. */
    if (fstat(fd, st) || !S_ISREG(st->st_mode)) {
        mlz__err("the payload %s is not a regular file", path);
        close(fd);
        return -1;
    }
    if (st->st_uid != 0 && st->st_uid != geteuid()) {
        mlz__err("refusing the payload %s: owned by uid %u, neither root nor you", path, (unsigned)st->st_uid);
        close(fd);
        return -1;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        mlz__err("refusing the payload %s: writable by %s (chmod go-w)", path,
                 st->st_mode & S_IWOTH ? "everyone" : "its group");
        close(fd);
        return -1;
    }
    return fd;
}

int mlz__check_payload_file(const char *path)
{
    struct stat st;
    int fd = open_payload(path, &st);
    if (fd < 0) return MLZ_INJ_EREFUSE;
    close(fd);
    return 0;
}

static int sys(mlz_remote *r, long nr, uint64_t a0, uint64_t a1, uint64_t a2, int64_t *ret, const char *what)
{
    uint64_t a[6] = { a0, a1, a2, 0, 0, 0 };
    int rc = mlz__remote_syscall(r, nr, a, ret);
    if (rc) return rc;
    if (*ret < 0 && *ret > -4096) {
        mlz__err("%s in the target failed: %s", what, strerror((int)-*ret));
        return MLZ_INJ_EREMOTE;
    }
    return 0;
}

static int call(mlz_remote *r, uint64_t fn, uint64_t a0, uint64_t a1, uint64_t *ret)
{
    uint64_t a[6] = { a0, a1, 0, 0, 0, 0 };
    return mlz__remote_call(r, fn, a, ret, r->timeout_ms);
}

static int remote_dlsym(mlz_remote *r, uint64_t fn_dlsym, uint64_t handle, mlz_loaded *out)
{
    uint64_t *dst[NENTRY] = { &out->fn_attach, &out->fn_detach, &out->fn_strerror, &out->fn_stats,
                              &out->fn_inline };
    for (int i = 0; i < NENTRY; i++) {
        uint64_t at;
        int rc = mlz__remote_put(r, D_SYM, entry_names[i], strlen(entry_names[i]) + 1, &at);
        if (!rc) rc = call(r, fn_dlsym, handle, at, dst[i]);
        if (rc) return rc;
    }
    if (!out->fn_attach || !out->fn_detach) {
        mlz__err("the payload does not export memlyze_attach/memlyze_detach (wrong library?)");
        return MLZ_INJ_EELF;
    }
    return 0;
}

static int copy_into_memfd(pid_t pid, int64_t fd, int src, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd);
    int dst = open(path, O_WRONLY | O_CLOEXEC);
    if (dst < 0) { mlz__err("cannot open the target's memfd %s: %s", path, strerror(errno)); return MLZ_INJ_EIO; }
    off_t off = 0;
    while ((size_t)off < size) {
        ssize_t n = sendfile(dst, src, &off, size - (size_t)off);
        if (n <= 0) {
            mlz__err("cannot write the payload into the target's memfd: %s", n < 0 ? strerror(errno) : "short write");
            close(dst);
            return MLZ_INJ_EIO;
        }
    }
    close(dst);
    return 0;
}

int mlz__find_loaded(mlz_remote *r, mlz_loaded *out)
{
    mlz_proc_module m;
    mlz_proc_sym syms[NENTRY];
    int rc = mlz_proc_payload_find(r->pid, &m);
    if (rc == MLZ_PROC_ENOENT) {
        mlz__err("process %d has no memlyze payload loaded", (int)r->pid);
        return MLZ_INJ_ESTATE;
    }
    if (rc) return mlz__proc_err(rc);
    int n = mlz_proc_syms(r->pid, &m, entry_names, syms, NENTRY);
    if (n < 0) return mlz__proc_err(n);
    out->fn_attach = syms[0].addr;
    out->fn_detach = syms[1].addr;
    out->fn_strerror = syms[2].addr;
    out->fn_stats = syms[3].addr;
    out->fn_inline = syms[4].addr;
    out->reused = 1;
    if (!out->fn_attach || !out->fn_detach) {
        mlz__err("the library mapped as the payload in %d lacks memlyze_attach/memlyze_detach", (int)r->pid);
        return MLZ_INJ_EELF;
    }
    return 0;
}

/* Where the target's descriptors of ours go: 3/4 of its open-file limit,
 * and of 1024 at most (a bigger table would cost it memory). As the
 * payload's writer does for its files (format/writer.c). */
static int high_fd_base(pid_t pid)
{
    char path[64], line[256];
    unsigned long soft = 1024;
    snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
    FILE *f = fopen(path, "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "Max open files %lu", &soft) == 1) break;
        fclose(f);
    }
    if (soft > 1024) soft = 1024;
    return (int)(soft / 4 * 3);
}

int mlz__load_payload(mlz_remote *r, const char *payload_path, mlz_loaded *out)
{
    static const char *const libc_names[] = { "dlopen", "dlsym", "dlerror" };
    mlz_proc_module libc, pm;
    mlz_proc_sym fns[3];
    uint64_t at, handle = 0;
    int64_t fd = -1, ret;
    struct stat st;
    int rc, src = -1;

    memset(out, 0, sizeof *out);
    if (mlz_proc_payload_find(r->pid, &pm) == 0) return mlz__find_loaded(r, out);

    if (mlz_proc_module_find(r->pid, mlz_proc_is_libc, &libc)) { mlz__err("no libc.so.6 in the target"); return MLZ_INJ_EELF; }
    rc = mlz_proc_syms(r->pid, &libc, libc_names, fns, 3);
    if (rc < 0) return mlz__proc_err(rc);
    if (rc < 3) { mlz__err("the target's libc (%s) lacks dlopen/dlsym/dlerror (glibc < 2.34?)", libc.path); return MLZ_INJ_EELF; }

    if ((src = open_payload(payload_path, &st)) < 0) return MLZ_INJ_EREFUSE;

    static const char memfd_name[] = MEMLYZE_MEMFD_NAME;
    if ((rc = mlz__remote_put(r, D_NAME, memfd_name, sizeof memfd_name, &at))) goto out;
    if ((rc = sys(r, SYS_memfd_create, at, MFD_CLOEXEC | MFD_ALLOW_SEALING, 0, &fd, "memfd_create"))) { fd = -1; goto out; }
    mlz__note("memfd %d created", (int)fd);
    if ((rc = copy_into_memfd(r->pid, fd, src, (size_t)st.st_size))) goto out;
    mlz__note("payload written into the memfd");
    if ((rc = sys(r, SYS_fcntl, (uint64_t)fd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE,
                  &ret, "sealing the memfd")))
        goto out;
    /* Moved up, out of the numbers the program picks: a dup2() onto a low
     * one (`exec 3>file`) would take the name by which debuggers read the
     * payload. Where it cannot move, it stays. */
    int base = high_fd_base(r->pid);
    int64_t hi = -1;
    uint64_t dup_args[6] = { (uint64_t)fd, F_DUPFD_CLOEXEC, (uint64_t)base, 0, 0, 0 };
    if (base > fd && mlz__remote_syscall(r, SYS_fcntl, dup_args, &hi) == 0 && hi > 0) {
        if ((rc = sys(r, SYS_close, (uint64_t)fd, 0, 0, &ret, "close"))) { fd = hi; goto out; }
        fd = hi;
        mlz__note("memfd moved to %d", (int)fd);
    }

    /* Not /proc/self/...: the name stays in the loader's list, and a
     * debugger or tool that later opens it would open its OWN fd N (gdb hung
     * reading one). /proc/PID/fd/N, with the pid as the target sees it (its
     * PID namespace), names the memfd for the target and for tools outside
     * sharing its namespace. */
    snprintf(out->name, sizeof out->name, "/proc/%d/fd/%d", (int)mlz__ns_tid(r->pid, r->pid), (int)fd);
    if ((rc = mlz__remote_put(r, D_NAME, out->name, strlen(out->name) + 1, &at))) goto out;
    if ((rc = call(r, fns[0].addr, at, RTLD_NOW | RTLD_LOCAL, &handle))) goto out;
    if (!handle) {
        uint64_t msg = 0;
        char text[512] = "no message";
        if (call(r, fns[2].addr, 0, 0, &msg) == 0 && msg) mlz__mem_read_str(msg, text, sizeof text);
        mlz__err("dlopen in the target failed: %s", text);
        rc = MLZ_INJ_EREMOTE;
        goto out;
    }
    out->handle = handle;
    mlz__note("dlopen returned");
    rc = remote_dlsym(r, fns[1].addr, handle, out);
out:
    /* On success the memfd stays open (close-on-exec): the loader's name for
     * the payload, /proc/PID/fd/N, must keep naming it, so that debuggers and
     * tools can read its symbols. One descriptor, for the process's life. */
    if (fd >= 0 && rc) {
        int rc2 = sys(r, SYS_close, (uint64_t)fd, 0, 0, &ret, "close");
        (void)rc2;
    }
    if (src >= 0) close(src);
    return rc;
}

int mlz__call_entry(mlz_remote *r, uint64_t fn, const char *arg, int *ret, int timeout_ms)
{
    uint64_t a[6] = { 0 }, v;
    int rc;
    if (arg && (rc = mlz__remote_put(r, D_ARG, arg, strlen(arg) + 1, &a[0]))) return rc;
    if ((rc = mlz__remote_call(r, fn, a, &v, timeout_ms))) return rc;
    *ret = (int)(uint32_t)v;
    return 0;
}

void mlz__payload_strerror(mlz_remote *r, const mlz_loaded *l, int code, char *buf, size_t cap)
{
    uint64_t a[6] = { (uint64_t)(int64_t)code, 0, 0, 0, 0, 0 }, p = 0;
    snprintf(buf, cap, "error %d", code);
    if (!l->fn_strerror || mlz__remote_call(r, l->fn_strerror, a, &p, 2000) || !p) return;
    if (mlz__mem_read_str(p, buf, cap)) snprintf(buf, cap, "error %d", code);
}

void mlz__payload_stats(mlz_remote *r, const mlz_loaded *l, int *modules, int *slots)
{
    int32_t v[2] = { -1, -1 };
    uint64_t at, ret, a[6] = { 0 };
    *modules = *slots = -1;
    if (!l->fn_stats || mlz__remote_put(r, D_SYM, v, sizeof v, &at)) return;
    a[0] = at;
    a[1] = at + 4;
    if (mlz__remote_call(r, l->fn_stats, a, &ret, 2000) || mlz__mem_peek(at, v, sizeof v)) return;
    *modules = v[0];
    *slots = v[1];
}

int mlz__remote_prepare(mlz_remote *r)
{
    static const char *const names[] = { "__errno_location" };
    int (*const where[])(const char *) = { mlz_proc_is_libc, mlz_proc_is_ldso };
    mlz_proc_module libc, m;
    mlz_proc_sym fn;
    uint64_t cave = 0;
    size_t cave_len = 0;
    int rc;
    if (mlz_proc_module_find(r->pid, mlz_proc_is_libc, &libc)) { mlz__err("no libc.so.6 in the target"); return MLZ_INJ_EELF; }
    /* The first syscall needs a cave of ~300 bytes: libc's and ld.so's have
     * kilobytes on the distributions we know. */
    for (size_t i = 0; i < sizeof where / sizeof where[0] && cave_len < 512; i++)
        if (mlz_proc_module_find(r->pid, where[i], &m) == 0 && mlz_proc_cave(r->pid, &m, &cave, &cave_len)) cave_len = 0;
    if ((rc = mlz__remote_map_scratch(r, cave, cave_len))) return rc;
    if (mlz_proc_syms(r->pid, &libc, names, &fn, 1) == 1 && (rc = mlz__remote_save_errno(r, fn.addr))) return rc;
    return 0;
}
