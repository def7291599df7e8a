/*
 * state.c - the record attach leaves for detach, and the finalize step.
 *
 * Per target a private directory /tmp/memlyze-PID (mode 0700, owned by the
 * target's user: the payload writes its spool there as that user). It is
 * reached through /proc/PID/root, so a target with its own /tmp (PrivateTmp,
 * a container) writes where we can read. A file `state` in it names the
 * spool and the output, so detach needs nothing from the attaching process,
 * which may be long gone. A predictable name in /tmp is only trusted if it
 * is a real directory, mode 0700, owned by the target's user or root.
 */
#include "injector.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void dir_paths(pid_t pid, mlz_state *s)
{
    snprintf(s->dir_ours, sizeof s->dir_ours, "/proc/%d/root/tmp/memlyze-%d", (int)pid, (int)pid);
}

static int check_dir(const char *path, uid_t uid)
{
    struct stat st;
    if (lstat(path, &st)) return -1;
    if (!S_ISDIR(st.st_mode) || (st.st_uid != uid && st.st_uid != 0) || (st.st_mode & 077)) {
        mlz__err("%s exists but is not a private directory of uid %u (mode 0700): remove it", path, (unsigned)uid);
        return MLZ_INJ_EREFUSE;
    }
    return 0;
}

int mlz__state_prepare(pid_t pid, uid_t uid, mlz_state *s)
{
    dir_paths(pid, s);
    if (mkdir(s->dir_ours, 0700) && errno != EEXIST) {
        mlz__err("cannot create %s: %s", s->dir_ours, strerror(errno));
        return MLZ_INJ_EIO;
    }
    if (geteuid() == 0 && uid != 0) {
        struct stat st;
        if (lstat(s->dir_ours, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 && lchown(s->dir_ours, uid, (gid_t)-1)) {
            mlz__err("cannot give %s to uid %u: %s", s->dir_ours, (unsigned)uid, strerror(errno));
            return MLZ_INJ_EIO;
        }
    }
    int rc = check_dir(s->dir_ours, uid);
    if (rc) return rc < 0 && rc != MLZ_INJ_EREFUSE ? MLZ_INJ_EIO : rc;
    /* One attach at a time: the directory stays locked until we exit. A
     * second attach that ran on would share state.new with the first, and
     * its refusal drop the first one's record: the first then failed at its
     * commit with the profiler started, and its trace was lost. */
    int lock = open(s->dir_ours, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st, held;
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) || fstat(lock, &held) || lstat(s->dir_ours, &st) ||
        st.st_dev != held.st_dev || st.st_ino != held.st_ino) {
        int busy = lock >= 0;
        if (lock >= 0) close(lock);
        if (busy) mlz__err("another memlyze-attach is running on process %d", (int)pid);
        else mlz__err("cannot open %s: %s", s->dir_ours, strerror(errno));
        s->dir_ours[0] = 0;            /* not ours to clean up */
        return busy ? MLZ_INJ_EREFUSE : MLZ_INJ_EIO;
    }
    s->dir_dev = (uint64_t)st.st_dev, s->dir_ino = (uint64_t)st.st_ino;
    s->attached_at = (long long)time(NULL);
    snprintf(s->spool, sizeof s->spool, "/tmp/memlyze-%d/spool.%lld", (int)pid, s->attached_at);
    snprintf(s->spool_ours, sizeof s->spool_ours, "%s/spool.%lld", s->dir_ours, s->attached_at);
    return 0;
}

int mlz__state_write(pid_t pid, const mlz_state *s)
{
    char path[300], tmp[320];
    /* "state.new" until the payload has started (mlz__state_commit): a
     * refused second attach must not replace the record of the first. */
    snprintf(path, sizeof path, "%s/state.new", s->dir_ours);
    snprintf(tmp, sizeof tmp, "%s/state.tmp", s->dir_ours);
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) { mlz__err("cannot write %s: %s", tmp, strerror(errno)); return MLZ_INJ_EIO; }
    FILE *f = fdopen(fd, "w");
    fprintf(f, "output=%s\nspool=%s\nrate=%llu\nattached_at=%lld\nstart_ticks=%llu\n", s->output, s->spool,
            (unsigned long long)s->rate, s->attached_at, mlz_proc_start_ticks(pid));
    if (fclose(f) || rename(tmp, path)) { mlz__err("cannot write %s: %s", path, strerror(errno)); return MLZ_INJ_EIO; }
    return 0;
}

int mlz__state_commit(const mlz_state *s)
{
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/state.new", s->dir_ours);
    snprintf(b, sizeof b, "%s/state", s->dir_ours);
    if (rename(a, b)) { mlz__err("cannot rename %s: %s", a, strerror(errno)); return MLZ_INJ_EIO; }
    return 0;
}

void mlz__state_abort(pid_t pid, const mlz_state *s)
{
    char dir[200], a[300];
    snprintf(dir, sizeof dir, "%s", s->dir_ours);
    if (access(dir, F_OK)) {
        /* The process exited meanwhile: /proc/PID/root went with it. The
         * directory is reached through our own /tmp if that is where it is
         * (the same one: a process with its own /tmp keeps it there). */
        struct stat st;
        snprintf(dir, sizeof dir, "/tmp/memlyze-%d", (int)pid);
        if (!s->dir_ino || lstat(dir, &st) || !S_ISDIR(st.st_mode) || (uint64_t)st.st_dev != s->dir_dev ||
            (uint64_t)st.st_ino != s->dir_ino)
            return;
    }
    snprintf(a, sizeof a, "%s/state.new", dir);
    unlink(a);
    if (s->spool_ours[0]) {
        const char *base = strrchr(s->spool_ours, '/');
        snprintf(a, sizeof a, "%s%s", dir, base ? base : "");
        if (base) unlink(a);
    }
    rmdir(dir);                        /* only when empty */
}

/* Reads the record in s->dir_ours into s; its start_ticks in *ticks. */
static int read_record(mlz_state *s, unsigned long long *ticks)
{
    char path[300], line[4200];
    snprintf(path, sizeof path, "%s/state", s->dir_ours);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        /* The attacher died between starting the payload and committing. */
        snprintf(path, sizeof path, "%s/state.new", s->dir_ours);
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) return MLZ_INJ_ESTATE;
    FILE *f = fdopen(fd, "r");
    *ticks = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        size_t n = strlen(line);
        if (n >= sizeof s->output) continue;
        if (!strncmp(line, "output=", 7)) memcpy(s->output, line + 7, n - 6);
        else if (!strncmp(line, "spool=", 6)) memcpy(s->spool, line + 6, n - 5);
        else if (!strncmp(line, "rate=", 5)) s->rate = strtoull(line + 5, NULL, 10);
        else if (!strncmp(line, "attached_at=", 12)) s->attached_at = atoll(line + 12);
        else if (!strncmp(line, "start_ticks=", 12)) *ticks = strtoull(line + 12, NULL, 10);
    }
    fclose(f);
    return s->spool[0] ? 0 : MLZ_INJ_ESTATE;
}

int mlz__state_read(pid_t pid, mlz_state *s)
{
    unsigned long long ticks;
    memset(s, 0, sizeof *s);
    dir_paths(pid, s);
    if (read_record(s, &ticks)) return MLZ_INJ_ESTATE;
    if (ticks && ticks != mlz_proc_start_ticks(pid)) {
        /* An earlier process's, with the same pid: it exited while
         * attached, and its spool is its recording (mlz__state_stale). */
        memset(s, 0, sizeof *s);
        dir_paths(pid, s);
        return MLZ_INJ_ESTATE;
    }
    snprintf(s->spool_ours, sizeof s->spool_ours, "/proc/%d/root%s", (int)pid, s->spool);
    return 0;
}

int mlz__state_stale(pid_t pid)
{
    mlz_state s;
    unsigned long long ticks, now = mlz_proc_start_ticks(pid);
    memset(&s, 0, sizeof s);
    dir_paths(pid, &s);
    return read_record(&s, &ticks) == 0 && ticks && now && ticks != now;
}

int mlz__state_read_exited(pid_t pid, mlz_state *s, uid_t *owner)
{
    unsigned long long ticks;
    struct stat st;
    memset(s, 0, sizeof *s);
    snprintf(s->dir_ours, sizeof s->dir_ours, "/tmp/memlyze-%d", (int)pid);
    /* A predictable name: only a private directory (mode 0700, not a link)
     * of root or of the user running us, if we are not root, is believed. */
    if (lstat(s->dir_ours, &st) || !S_ISDIR(st.st_mode) || (st.st_mode & 077) ||
        (geteuid() != 0 && st.st_uid != geteuid()))
        return MLZ_INJ_ESTATE;
    *owner = st.st_uid;
    if (read_record(s, &ticks)) return MLZ_INJ_ESTATE;
    /* The spool must be the directory's own, and the output absolute. */
    size_t dl = strlen(s->dir_ours);
    if (strncmp(s->spool, s->dir_ours, dl) || s->spool[dl] != '/' || strchr(s->spool + dl + 1, '/') ||
        s->output[0] != '/')
        return MLZ_INJ_ESTATE;
    snprintf(s->spool_ours, sizeof s->spool_ours, "%s", s->spool);
    return 0;
}

int mlz__state_spool_left(pid_t pid, const mlz_state *s, char *out, size_t cap)
{
    /* Sealed by a detach, or still "<spool>.PID.tmp": its writer is gone
     * (the process exec'd) and it is readable up to its last whole event. */
    snprintf(out, cap, "%s", s->spool_ours);
    if (access(out, F_OK) == 0) return 0;
    snprintf(out, cap, "%s.%d.tmp", s->spool_ours, (int)pid);
    return access(out, F_OK) == 0 ? 0 : -1;
}

void mlz__state_remove(pid_t pid, const mlz_state *s, int keep_spool)
{
    char path[300];
    (void)pid;
    snprintf(path, sizeof path, "%s/state", s->dir_ours);
    unlink(path);
    snprintf(path, sizeof path, "%s/state.new", s->dir_ours);
    unlink(path);
    if (!keep_spool && s->spool_ours[0]) unlink(s->spool_ours);
    rmdir(s->dir_ours);                /* only when empty */
}

int mlz__abspath(const char *p, char *out, size_t cap)
{
    char cwd[PATH_MAX];
    int n;
    if (p[0] == '/') n = snprintf(out, cap, "%s", p);
    else if (!getcwd(cwd, sizeof cwd)) n = -1;
    else n = snprintf(out, cap, "%s/%s", cwd, p);
    if (n < 0 || (size_t)n >= cap) { mlz__err("path too long: %s", p); return MLZ_INJ_EIO; }
    return 0;
}

static int exe_dir(char *buf, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *sl = strrchr(buf, '/');
    if (!sl) return -1;
    *sl = 0;
    return 0;
}

int mlz__default_payload(char *buf, size_t cap)
{
    const char *env = getenv("MEMLYZE_PAYLOAD");
    char dir[PATH_MAX];
    if (env && *env) { snprintf(buf, cap, "%s", env); return 0; }
    if (exe_dir(dir, sizeof dir)) return -1;
    static const char *const rel[] = { "/../lib/libmemlyze.so", "/../lib/memlyze/libmemlyze.so" };
    for (int i = 0; i < 2; i++) {
        snprintf(buf, cap, "%s%s", dir, rel[i]);
        if (access(buf, R_OK) == 0) return 0;
    }
    snprintf(buf, cap, "%s%s", dir, rel[0]);
    return 0;
}

int mlz__finalize(const char *spool, const char *out, pid_t pid)
{
    char dir[PATH_MAX], tool[PATH_MAX + 16], pidarg[24];
    snprintf(pidarg, sizeof pidarg, "%d", (int)pid);
    if (exe_dir(dir, sizeof dir) == 0) snprintf(tool, sizeof tool, "%s/memlyze", dir);
    else tool[0] = 0;
    pid_t p = fork();
    if (p < 0) { mlz__err("fork: %s", strerror(errno)); return MLZ_INJ_EIO; }
    if (p == 0) {
        if (tool[0] && access(tool, X_OK) == 0) execl(tool, "memlyze", "finalize", "--pid", pidarg, "-o", out, spool, (char *)NULL);
        execlp("memlyze", "memlyze", "finalize", "--pid", pidarg, "-o", out, spool, (char *)NULL);
        fprintf(stderr, "memlyze: cannot run memlyze finalize: %s\n", strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(p, &st, 0) < 0)
        if (errno != EINTR) break;
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
        mlz__err("memlyze finalize failed; the spool is kept at %s", spool);
        return MLZ_INJ_EIO;
    }
    return 0;
}
