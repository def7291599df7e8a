/*
 * exec.c - one process, several images: keeping the profile going across
 * execve, and telling descendants of `memlyze run`'s process apart.
 *
 * execve keeps the pid and runs no destructor: the old image's spool stays
 * behind unsealed (<path>.PID.tmp), and the new image loads the payload
 * again through LD_PRELOAD. Each image therefore writes its own *segment*:
 * image 0 writes PATH, image N writes PATH.execN. A new image finds N by
 * looking for the segments already there (sealed or not); memlyze finalize
 * stitches them into one trace (FORMAT.md, "Spools").
 *
 * In the LD_PRELOAD build, exec_hooks.c calls mlz__exec_before just before
 * the real exec: the old image's events are drained and flushed to disk,
 * with an EXEC record saying what is being run and whether the new image
 * can load the payload at all (static binary, setuid). No allocation here:
 * stack buffers and raw system calls only.
 */
#include "payload.h"
#include "jsonw.h"
#include "mlz_format.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned exec_seq;          /* this image's segment number */

/* Appends sep and the decimal n to the spool path; -1 when it does not fit. */
static int append_num(char *dst, size_t cap, const char *sep, unsigned long n)
{
    char num[24];
    int k = 0;
    size_t len = strlen(dst), sl = strlen(sep);
    do { num[k++] = (char)('0' + n % 10); n /= 10; } while (n);
    if (len + sl + (size_t)k + 1 > cap) return -1;
    memcpy(dst + len, sep, sl);
    len += sl;
    while (k) dst[len++] = num[--k];
    dst[len] = 0;
    return 0;
}

static unsigned long parse_ulong(const char *s)
{
    unsigned long v = 0;
    for (; s && *s >= '0' && *s <= '9'; s++) v = v * 10 + (unsigned long)(*s - '0');
    return v;
}

/* Process start time in clock ticks (field 22 of /proc/self/stat): with the
 * pid it names one process, whatever it execs, and never a later one that
 * got the same pid. */
static unsigned long long start_ticks(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')');      /* the command name may hold spaces */
    if (!p) return 0;
    for (int field = 2; field < 22 && *p; p++)
        if (*p == ' ') field++;
    unsigned long long v = 0;
    for (; *p >= '0' && *p <= '9'; p++) v = v * 10 + (unsigned long long)(*p - '0');
    return v;
}

/* The number after "key": in a spool's metadata (a key, never text inside
 * a string: there its quotes are escaped); ULLONG_MAX when absent. */
static unsigned long long meta_num(const char *meta, size_t len, const char *key)
{
    const char *p = memmem(meta, len, key, strlen(key));
    if (!p) return ~0ull;
    p += strlen(key);
    unsigned long long v = 0;
    for (; p < meta + len && *p >= '0' && *p <= '9'; p++) v = v * 10 + (unsigned long long)(*p - '0');
    return v;
}

enum { SEG_NONE, SEG_OURS, SEG_OTHER };

/* Is segment PATH there (sealed, or PATH.PID.tmp still being or left
 * written), and written by this process (same pid and start time)? */
static int segment_owner(const char *path, pid_t pid, unsigned long long ticks)
{
    char tmp[sizeof mlz__g.spool_path + 32];
    static char meta[12288];
    size_t n = strlen(path);
    if (n + 1 > sizeof tmp) return SEG_NONE;
    memcpy(tmp, path, n + 1);
    if (append_num(tmp, sizeof tmp, ".", (unsigned long)pid)) return SEG_NONE;
    n = strlen(tmp);
    if (n + 5 > sizeof tmp) return SEG_NONE;
    memcpy(tmp + n, ".tmp", 5);
    int unsealed = 1, fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { unsealed = 0; fd = open(path, O_RDONLY | O_CLOEXEC); }
    if (fd < 0) return SEG_NONE;
    ssize_t k = read(fd, meta, sizeof meta);
    close(fd);
    if (k <= 0 || meta_num(meta, (size_t)k, "\"pid\":") != (unsigned long long)pid ||
        meta_num(meta, (size_t)k, "\"start_ticks\":") != ticks)
        return SEG_OTHER;
    /* Our earlier image's, left unsealed by its exec: its writer is gone,
     * so it gets its final name (readers take it up to its last event). */
    if (unsealed) rename(tmp, path);
    return SEG_OURS;
}

int mlz__exec_choose_spool(int fork_child)
{
    pid_t pid = (pid_t)syscall(SYS_getpid);
    mlz__g.pid = pid;
    exec_seq = 0;
    if (!mlz__g.spool_path[0]) {
        mlz__default_spool_path();    /* memlyze.PID.spool: already per process */
    } else {
        /* `memlyze run` names its own process; anyone else is a descendant,
         * profiled into PATH.PID with --follow-fork and not at all without. */
        const char *root = getenv("MEMLYZE_ROOT_PID");
        int descendant = fork_child || (root && parse_ulong(root) != (unsigned long)pid);
        if (descendant && !mlz__g.follow_fork) return -1;
        if (descendant && append_num(mlz__g.spool_path, sizeof mlz__g.spool_path, ".", (unsigned long)pid))
            return -1;
    }
    /* Our images' segments come first (PATH, PATH.exec1, ...): this image
     * writes the one after the last of them. A segment of another process
     * (the same pid before, or an earlier run) is replaced when it is where
     * our first image goes, unless memlyze run collects both (its directory
     * is fresh, so it only holds such a file after a pid was reused). */
    size_t base = strlen(mlz__g.spool_path);
    unsigned long long ticks = start_ticks();
    int keep_others = getenv("MEMLYZE_ROOT_PID") != NULL;
    unsigned next = 0, first_free = ~0u;
    for (unsigned k = 0; k < 100000; k++) {
        mlz__g.spool_path[base] = 0;
        if (k && append_num(mlz__g.spool_path, sizeof mlz__g.spool_path, ".exec", k)) return -1;
        int o = segment_owner(mlz__g.spool_path, pid, ticks);
        if (o == SEG_OURS) next = k + 1;
        if (o == SEG_NONE) { first_free = k; break; }
    }
    if (!next && keep_others) next = first_free;
    if (next == ~0u) return -1;
    exec_seq = next;
    mlz__g.spool_path[base] = 0;
    if (next && append_num(mlz__g.spool_path, sizeof mlz__g.spool_path, ".exec", next)) return -1;
    return 0;
}

void mlz__exec_meta(struct mlz_jw *w)
{
    mlz_jw_u64(w, "exec_seq", exec_seq);
    mlz_jw_u64(w, "start_ticks", start_ticks());
}

/* --------------------------------------------------- before a real exec */

/* PATH lookup as execvp does it, into out; file itself when it has a slash. */
static int resolve(const char *file, int search, char *out, size_t cap)
{
    size_t fl = strlen(file);
    if (!search || strchr(file, '/')) {
        if (fl + 1 > cap) return -1;
        memcpy(out, file, fl + 1);
        return 0;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/bin:/usr/bin";
    for (const char *p = path;; ) {
        const char *e = strchr(p, ':');
        size_t dl = e ? (size_t)(e - p) : strlen(p);
        if (dl + 1 + fl + 1 <= cap) {
            memcpy(out, dl ? p : ".", dl ? dl : 1);
            size_t n = dl ? dl : 1;
            out[n++] = '/';
            memcpy(out + n, file, fl + 1);
            if (access(out, X_OK) == 0) return 0;
        }
        if (!e) return -1;
        p = e + 1;
    }
}

/* Why the image in path will not load the payload, or NULL if it should. */
static const char *why_unprofiled(const char *path, char *const envp[])
{
    int preload = 0;
    for (size_t i = 0; envp && envp[i]; i++)
        if (!strncmp(envp[i], "LD_PRELOAD=", 11) && strstr(envp[i], "memlyze")) preload = 1;
    struct stat st;
    if (stat(path, &st)) return NULL;   /* the exec will fail: nothing to say */
    /* The loader runs in secure mode and ignores LD_PRELOAD paths. */
    if ((st.st_mode & S_ISUID) && st.st_uid != getuid()) return "setuid program";
    if ((st.st_mode & S_ISGID) && st.st_gid != getgid()) return "setgid program";
    if (!preload) return "LD_PRELOAD removed from its environment";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    Elf64_Ehdr eh;
    const char *why = NULL;
    if (pread(fd, &eh, sizeof eh, 0) == (ssize_t)sizeof eh && !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
        eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr)) {
        why = "static binary (no dynamic loader)";
        for (unsigned i = 0; i < eh.e_phnum && i < 256; i++) {
            Elf64_Phdr ph;
            if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph) break;
            if (ph.p_type == PT_INTERP) { why = NULL; break; }
        }
    }
    close(fd);
    return why;
}

static _Atomic int exec_pending;

static void put(char *buf, size_t cap, size_t *n, const char *s)
{
    size_t l = strlen(s);
    if (*n + l > cap) l = cap - *n;
    memcpy(buf + *n, s, l);
    *n += l;
}

void mlz__exec_before(const char *file, int search, char *const argv[], char *const envp[])
{
    /* Only the process that owns the spool: not a vfork child borrowing our
     * memory, not a fork child that runs unprofiled. */
    if (!mlz__g.ready || (pid_t)syscall(SYS_getpid) != mlz__g.pid || !atomic_load(&mlz__g.active_free))
        return;
    static char path[4096], rec[8192];
    const char *why = NULL;
    path[0] = 0;
    if (file) {
        /* A shell searching PATH tries execve in every directory: the ones
         * that must fail cost nothing here (no record, no flush). */
        if (resolve(file, search, path, sizeof path) || access(path, X_OK)) return;
        why = why_unprofiled(path, envp);
    }
    /* "E" reason TAB path TAB argv joined by spaces (FORMAT.md, EXEC). */
    size_t n = 0;
    put(rec, sizeof rec, &n, "E");
    put(rec, sizeof rec, &n, why ? why : "");
    put(rec, sizeof rec, &n, "\t");
    put(rec, sizeof rec, &n, path);
    put(rec, sizeof rec, &n, "\t");
    for (size_t i = 0; argv && argv[i]; i++) {
        if (i) put(rec, sizeof rec, &n, " ");
        put(rec, sizeof rec, &n, argv[i]);
    }
    mlz__spool_note(MLZ_EV_EXEC, rec, n);
    mlz__drain_flush();
    atomic_store(&exec_pending, 1);
}

void mlz__exec_failed(void)
{
    /* Still this image: the EXEC record did not happen after all. */
    if (atomic_exchange(&exec_pending, 0) && (pid_t)syscall(SYS_getpid) == mlz__g.pid)
        mlz__spool_note(MLZ_EV_EXEC, "F", 1);
}
