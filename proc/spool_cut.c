/*
 * spool_cut.c - why a spool the payload could not seal stopped growing, as
 * far as can be seen from outside: its file system full, a writer no
 * longer allowed in its directory (a daemon that dropped root), or the
 * file-size limit it reached. memlyze-detach and memlyze run say it.
 */
#include "proc.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

/* The soft RLIMIT_FSIZE of pid (0: ours, which a child inherited); 0 when
 * unlimited or unknown. */
static uint64_t fsize_limit(pid_t pid)
{
    if (!pid) {
        struct rlimit r;
        return getrlimit(RLIMIT_FSIZE, &r) == 0 && r.rlim_cur != RLIM_INFINITY ? (uint64_t)r.rlim_cur : 0;
    }
    char path[64], line[256];
    unsigned long long v = 0;
    snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Max file size %llu", &v) == 1) break;
    fclose(f);
    return v;
}

static long uid_of(pid_t pid)
{
    char path[64], line[256];
    unsigned uid;
    long r = -1;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Uid: %*u %u", &uid) == 1) { r = uid; break; }
    fclose(f);
    return r;
}

const char *mlz_proc_spool_cut(pid_t pid, const char *spool, char *why, size_t cap)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", spool);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    struct statvfs v;
    struct stat st;
    if (statvfs(dir, &v) == 0 && (uint64_t)v.f_bavail * v.f_frsize < (4u << 20)) {
        snprintf(why, cap, "the file system of %s is full", dir);
        return why;
    }
    long uid = pid ? uid_of(pid) : -1;
    if (uid > 0 && stat(dir, &st) == 0 && (uid_t)uid != st.st_uid) {
        snprintf(why, cap, "the process now runs as uid %ld, which may not write in %s", uid, dir);
        return why;
    }
    uint64_t limit = fsize_limit(pid);
    if (limit && stat(spool, &st) == 0 && (uint64_t)st.st_size + (64u << 10) >= limit) {
        snprintf(why, cap, "it reached its file-size limit of %llu bytes", (unsigned long long)limit);
        return why;
    }
    return NULL;
}
