/*
 * payload.c - the memlyze payload in a process: its module and the
 * memlyze_info descriptor it exports (payload/info.h). Every tool finds it
 * here, with one rule (mlz_proc_is_payload) and one way to read its symbol
 * (elfimage.c: the mapped file, the memfd the process holds, or memory).
 */
#include "proc.h"
#include "proc_internal.h"
#include "info.h"

#include <string.h>

int mlz_proc_payload_find(pid_t pid, mlz_proc_module *m)
{
    int rc = mlz_proc_module_find(pid, mlz_proc_is_payload, m);
    if (rc == MLZ_PROC_ENOENT) mlz__proc_fail(rc, "memlyze is not loaded in process %d", (int)pid);
    return rc;
}

int mlz_proc_payload_info(pid_t pid, const mlz_proc_module *m, struct memlyze_info *in, uint64_t *addr)
{
    static const char *const names[] = { MEMLYZE_INFO_SYMBOL };
    mlz_proc_sym s;
    int rc = mlz_proc_syms(pid, m, names, &s, 1);
    if (rc == 0)
        return mlz__proc_fail(MLZ_PROC_ENOENT, "%s in process %d has no %s (an older payload?)", m->path, (int)pid,
                              MEMLYZE_INFO_SYMBOL);
    if (rc < 0) return rc;
    memset(in, 0, sizeof *in);
    /* An older descriptor may be shorter: read its header first. */
    if ((rc = mlz_proc_read(pid, s.addr, in, 16))) return rc;
    if (memcmp(in->magic, MEMLYZE_INFO_MAGIC, 8))
        return mlz__proc_fail(MLZ_PROC_EELF, "%s in process %d: %s has another magic", m->path, (int)pid,
                              MEMLYZE_INFO_SYMBOL);
    size_t n = in->size < sizeof *in ? in->size : sizeof *in;
    if (n > 16 && (rc = mlz_proc_read(pid, s.addr + 16, (char *)in + 16, n - 16))) return rc;
    *addr = s.addr;
    return 0;
}
