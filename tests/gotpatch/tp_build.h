/*
 * tp_build.h - compile the test payload and targets at run time.
 * Shared by tests/gotpatch/test_gotpatch_targets.c and bench/bench_gotpatch.c.
 * The payload is built from the gotpatch sources (not from a build/ archive)
 * without sanitizers, so the same children run under the plain and the
 * ASan/UBSan test binaries.
 */
#ifndef TP_BUILD_H
#define TP_BUILD_H

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tp_root[PATH_MAX];   /* repository root */
static char tp_dir[PATH_MAX];    /* temp dir of this run */

/* The repository root: walk up from the executable until tests/gotpatch exists. */
static int tp_find_root(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = '\0';
    for (char *slash; (slash = strrchr(exe, '/')) != NULL;) {
        *slash = '\0';
        char probe[PATH_MAX + 32];
        snprintf(probe, sizeof probe, "%s/tests/gotpatch/tp_payload.c", exe[0] ? exe : "/");
        if (access(probe, R_OK) == 0) {
            snprintf(tp_root, sizeof tp_root, "%s", exe);
            return 0;
        }
    }
    return -1;
}

__attribute__((format(printf, 1, 2)))
static int tp_sh(const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "  command failed (%d): %s\n", rc, cmd);
    return rc;
}

static int tp_mktemp(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(tp_dir, sizeof tp_dir, "%s/mlzgot.XXXXXX", t && t[0] ? t : "/tmp");
    return mkdtemp(tp_dir) ? 0 : -1;
}

static void tp_cleanup(void)
{
    if (tp_dir[0] && !getenv("MLZ_KEEP_TMP")) tp_sh("rm -rf '%s'", tp_dir);
}

/* libtp.so: gotpatch + the counting payload, into tp_dir. */
static int tp_build_payload(void)
{
    return tp_sh("cd '%s' && cc -std=c11 -O2 -g -D_GNU_SOURCE -fPIC -fvisibility=hidden -shared "
                 "-Wl,-z,now -Igotpatch -Itests/gotpatch -o '%s/libtp.so' gotpatch/*.c "
                 "tests/gotpatch/tp_payload.c -ldl",
                 tp_root, tp_dir);
}

#endif
