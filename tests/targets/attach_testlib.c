/*
 * attach_testlib.c - a stand-in payload for the injector's tests: the same
 * entry points as libmemlyze.so, doing small visible things, so the remote
 * call machinery can be tested without the profiler.
 *   memlyze_attach(config): allocates, records the config into
 *     SPOOL.testlib (SPOOL from "spool=..."), returns 0, or -114 (EALREADY)
 *     when already attached;
 *     If the target's environment has MLZT_ATTACH_SLEEP_MS, it first sleeps
 *     that long (a call that outlives the injector's timeout);
 *   memlyze_detach(): -22 when not attached, else 0;
 *   mlzt_getpid(): getpid() as the target sees it.
 */
#include <errno.h>
#include <fcntl.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int attached;
int mlzt_calls;

const char *memlyze_strerror(int code)
{
    return code == -114 ? "already attached" : code == -22 ? "not attached" : "test error";
}

int memlyze_attach(const char *config)
{
    if (attached) return -114;
    const char *sl = getenv("MLZT_ATTACH_SLEEP_MS");
    if (sl) {
        long ms = atol(sl);
        struct timespec d = { ms / 1000, (ms % 1000) * 1000000L };
        while (nanosleep(&d, &d) && errno == EINTR) {}
    }
    char *copy = strdup(config);        /* through malloc, like the real payload */
    const char *sp = strstr(copy, "spool=");
    if (sp) {
        char path[4200];
        size_t n = strcspn(sp + 6, ";");
        memcpy(path, sp + 6, n);
        strcpy(path + n, ".testlib");
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            if (write(fd, config, strlen(config))) {}
            close(fd);
        }
    }
    free(copy);
    attached = 1;
    mlzt_calls++;
    return 0;
}

int memlyze_detach(void)
{
    if (!attached) return -22;
    attached = 0;
    mlzt_calls++;
    return 0;
}

int mlzt_getpid(void) { return getpid(); }
