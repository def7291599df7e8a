/*
 * raise_at_rename.c - LD_PRELOAD for the interrupted-output test: the
 * moment a tool puts a finished "*.tmp" file into place (rename or link),
 * it is sent the signal named by MLZ_TEST_SIGNAL (a number) instead (only
 * for names containing MLZ_TEST_MATCH, when that is set). The
 * temporary file exists then, so what is left afterwards shows whether
 * the tool cleans up when a signal ends it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void maybe_raise(const char *from)
{
    const char *sig = getenv("MLZ_TEST_SIGNAL"), *match = getenv("MLZ_TEST_MATCH");
    size_t n = strlen(from);
    if (sig && n > 4 && !strcmp(from + n - 4, ".tmp") && (!match || strstr(from, match))) raise(atoi(sig));
}

int rename(const char *from, const char *to)
{
    maybe_raise(from);
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    return real(from, to);
}

int link(const char *from, const char *to)
{
    maybe_raise(from);
    int (*real)(const char *, const char *) = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "link");
    return real(from, to);
}
