/*
 * inline.c - write the payload's inline-hook jumps into an attached process.
 *
 * The payload prepared the trampolines (memlyze_attach with inline=remote)
 * and describes each jump (payload/inline_sites.h). A jump replaces whole
 * instructions at a function's entry; a thread whose PC is past the entry
 * but inside those instructions would resume in the middle of the jump. So,
 * after the load session: every thread is stopped again, and while any PC
 * lies in (at, at + len) of a site the threads run for 1 ms and are stopped
 * again; then each jump is written through /proc/PID/mem, only over the
 * bytes the payload read. Undone by the payload's detach (in-process: with
 * the jump in place no thread can be inside the range).
 */
#include "injector.h"
#include "inline_sites.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

int mlz__inline_fetch(mlz_remote *r, const mlz_loaded *l, struct memlyze_inline_site *s, int cap,
                      char (*names)[32])
{
    if (!l->fn_inline) return 0;
    if (cap > MEMLYZE_INLINE_SITES_MAX) cap = MEMLYZE_INLINE_SITES_MAX;
    static const struct memlyze_inline_site zero[MEMLYZE_INLINE_SITES_MAX];
    uint64_t at, ret, a[6] = { 0 };
    int rc = mlz__remote_put(r, 4096, zero, sizeof zero, &at);
    if (rc) return rc;
    a[0] = at;
    a[1] = (uint64_t)cap;
    if ((rc = mlz__remote_call(r, l->fn_inline, a, &ret, 2000))) return rc;
    int n = (int)(int64_t)ret;
    if (n <= 0) return 0;
    if (n > cap) n = cap;
    if ((rc = mlz__mem_read(at, s, (size_t)n * sizeof *s))) return rc;
    for (int i = 0; i < n; i++) {
        if (s[i].jmp_len == 0 || s[i].jmp_len > 16 || s[i].len < s[i].jmp_len || s[i].len > 16) return MLZ_INJ_EIO;
        if (mlz__mem_read_str(s[i].name, names[i], 32)) snprintf(names[i], 32, "?");
    }
    return n;
}

/* A thread whose PC is strictly inside a site's moved instructions. */
static pid_t inside(const mlz_tgroup *g, const struct memlyze_inline_site *s, int n)
{
    for (int i = 0; i < g->n; i++) {
        const mlz_thread *t = &g->t[i];
        if (t->state == MLZ_T_GONE || t->state == MLZ_T_DETACHED || t->state == MLZ_T_RUNNING) continue;
        for (int k = 0; k < n; k++)
            if (t->regs.rip > s[k].at && t->regs.rip < s[k].at + s[k].len) return t->tid;
    }
    return 0;
}

int mlz__inline_write(pid_t pid, const struct memlyze_inline_site *s, int n, int timeout_ms,
                      const char (*names)[32], uint64_t *paused_us)
{
    *paused_us = 0;
    if (n <= 0) return 0;
    sigset_t b, old;
    sigemptyset(&b);
    sigaddset(&b, SIGINT);
    sigaddset(&b, SIGTERM);
    sigaddset(&b, SIGHUP);
    sigaddset(&b, SIGQUIT);
    sigprocmask(SIG_BLOCK, &b, &old);
    mlz_tgroup g;
    memset(&g, 0, sizeof g);
    g.pid = pid;
    int written = 0, rc = mlz__threads_stop_all(&g, timeout_ms);
    uint64_t deadline = mlz__now_us() + (uint64_t)timeout_ms * 1000u;
    pid_t in = 0;
    while (rc == 0 && (in = inside(&g, s, n)) && mlz__now_us() < deadline) rc = mlz__threads_run(&g, 1);
    if (rc) {
        mlz__err("inline hooks not written: cannot stop every thread of %d", (int)pid);
    } else if (in) {
        mlz__err("inline hooks not written: thread %d stayed inside an allocator's first bytes", (int)in);
    } else if ((rc = mlz__mem_open(pid)) == 0) {
        for (int i = 0; i < n; i++) {
            uint8_t cur[16];
            if (mlz__mem_peek(s[i].at, cur, s[i].jmp_len) || memcmp(cur, s[i].orig, s[i].jmp_len)) {
                mlz__note("inline hook %s at 0x%llx: bytes changed since they were read, not written", names[i],
                          (unsigned long long)s[i].at);
                continue;
            }
            if (mlz__mem_write(s[i].at, s[i].jmp, s[i].jmp_len) == 0) {
                written++;
                mlz__note("inline hook %s at 0x%llx: %u-byte jump over %u bytes of instructions, written with %d threads stopped",
                          names[i], (unsigned long long)s[i].at, s[i].jmp_len, s[i].len, g.n);
            }
        }
        mlz__mem_close();
    }
    mlz__undo_eintr(&g);
    mlz__threads_detach_all(&g, 0);
    *paused_us = g.paused_us;
    mlz__threads_free(&g);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return written;
}
