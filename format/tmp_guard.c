/*
 * tmp_guard.c - unlink unfinished outputs when a signal ends the tool.
 *
 * A handful of slots hold pointers to the paths (the callers' buffers,
 * so nothing is allocated or copied); the handler only calls unlink(2),
 * signal(2) and raise(3), all async-signal-safe, and the signal then ends
 * the process with its usual status, so shells see "interrupted".
 */
#include "tmp_guard.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#define GUARD_SLOTS 8   /* a tool has at most a file and its index open at once */

static _Atomic(const char *) slots[GUARD_SLOTS];
static _Atomic(const char *) last_words;
static atomic_int installed;

static void on_fatal_signal(int sig)
{
    int saved = errno;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        const char *p = atomic_load(&slots[i]);
        if (p) unlink(p);
    }
    const char *w = atomic_load(&last_words);
    if (w && write(2, w, strlen(w))) {}
    signal(sig, SIG_DFL);
    raise(sig);     /* blocked while we run: delivered, fatally, on return */
    errno = saved;
}

void mlz_tmp_guard_signals(void)
{
    static const int fatal[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE };
    struct sigaction sa = { .sa_handler = on_fatal_signal };
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) {
        struct sigaction old;
        /* An ignored signal (nohup, a shell's background job) stays so. */
        if (!sigaction(fatal[i], NULL, &old) && old.sa_handler == SIG_DFL)
            sigaction(fatal[i], &sa, NULL);
    }
    /* A file past RLIMIT_FSIZE: the write fails with EFBIG and the tool
     * reports it, instead of the default of dying with a core. */
    struct sigaction old;
    if (!sigaction(SIGXFSZ, NULL, &old) && old.sa_handler == SIG_DFL) signal(SIGXFSZ, SIG_IGN);
    atomic_store(&installed, 1);
}

void mlz_tmp_guard_add(const char *path)
{
    if (!atomic_load(&installed)) return;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        const char *expected = NULL;
        if (atomic_compare_exchange_strong(&slots[i], &expected, path)) return;
    }
    /* Full: this file is simply not guarded (it keeps its .tmp name). */
}

void mlz_tmp_guard_drop(const char *path)
{
    for (int i = 0; i < GUARD_SLOTS; i++) {
        const char *expected = path;
        if (atomic_compare_exchange_strong(&slots[i], &expected, NULL)) return;
    }
}

void mlz_tmp_guard_note(const char *line)
{
    atomic_store(&last_words, line);
}
