/*
 * maps.c - the modules a process mapped, from /proc/PID/maps: one entry per
 * file (its mappings merged), with the offset-0 mapping that map_files and
 * the ELF header are reached through.
 */
#include "proc.h"
#include "proc_internal.h"
#include "info.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int mlz_proc_is_libc(const char *path)
{
    const char *b = base_name(path);
    return strcmp(b, "libc.so.6") == 0 || (strncmp(b, "libc-2.", 7) == 0 && strstr(b, ".so"));
}

int mlz_proc_is_ldso(const char *path)
{
    return strncmp(base_name(path), "ld-linux", 8) == 0;
}

int mlz_proc_is_payload(const char *path)
{
    static const char memfd[] = "/memfd:" MEMLYZE_MEMFD_NAME;
    return strncmp(path, memfd, sizeof memfd - 1) == 0 ||
           strncmp(base_name(path), MEMLYZE_PAYLOAD_PREFIX, sizeof MEMLYZE_PAYLOAD_PREFIX - 1) == 0;
}

/* One line of maps; 0 when it names a module (a file, or [vdso]). */
typedef struct maps_line {
    uint64_t lo, hi, off, dev, ino;
    char *path;
    int deleted;
} maps_line;

static int parse_line(char *line, maps_line *l)
{
    unsigned long long lo, hi, off, ino;
    unsigned maj, mnr;
    char perms[8];
    int pos = 0;
    if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &lo, &hi, perms, &off, &maj, &mnr, &ino, &pos) < 7 || !pos)
        return -1;
    char *path = line + pos;
    path[strcspn(path, "\n")] = 0;
    char *del = strstr(path, " (deleted)");
    l->deleted = del && del[10] == 0;
    if (l->deleted) *del = 0;
    if (!(*path == '/' && ino) && strcmp(path, "[vdso]")) return -1;
    *l = (maps_line){ lo, hi, off, makedev(maj, mnr), ino, path, l->deleted };
    return 0;
}

static void start_module(mlz_proc_module *m, const maps_line *l)
{
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s", l->path);
    m->deleted = l->deleted;
    m->start = l->lo;
    m->end = l->hi;
    m->dev = l->dev;
    m->ino = l->ino;
}

static void add_mapping(mlz_proc_module *m, const maps_line *l)
{
    if (l->lo < m->start) m->start = l->lo;
    if (l->hi > m->end) m->end = l->hi;
    if (l->off == 0 && !m->first_start) { m->first_start = l->lo; m->first_end = l->hi; }
}

static FILE *open_maps(pid_t pid)
{
    char p[64];
    snprintf(p, sizeof p, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(p, "re");
    if (!f) mlz__proc_fail(MLZ_PROC_EIO, "cannot read %s: %s", p, strerror(errno));
    return f;
}

int mlz_proc_module_find(pid_t pid, int (*match)(const char *path), mlz_proc_module *m)
{
    FILE *f = open_maps(pid);
    if (!f) return MLZ_PROC_EIO;
    char line[4096 + 256];
    int found = 0;
    maps_line l;
    memset(m, 0, sizeof *m);
    while (fgets(line, sizeof line, f)) {
        if (parse_line(line, &l) || !l.ino) continue;
        if (found) {
            if (!strcmp(l.path, m->path) && l.ino == m->ino) add_mapping(m, &l);
        } else if (match(l.path)) {
            found = 1;
            start_module(m, &l);
            add_mapping(m, &l);
        }
    }
    fclose(f);
    if (!found || !m->first_start)
        return mlz__proc_fail(MLZ_PROC_ENOENT, "process %d maps no such module", (int)pid);
    return 0;
}

int mlz_proc_modules(pid_t pid, mlz_proc_module **out, size_t *count)
{
    FILE *f = open_maps(pid);
    if (!f) return MLZ_PROC_EIO;
    mlz_proc_module *v = NULL;
    size_t n = 0, cap = 0;
    char line[4096 + 256];
    maps_line l;
    while (fgets(line, sizeof line, f)) {
        if (parse_line(line, &l)) continue;
        mlz_proc_module *m = NULL;
        for (size_t i = n; i-- > 0 && !m;)
            if (v[i].ino == l.ino && !strcmp(v[i].path, l.path)) m = &v[i];
        if (!m) {
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                mlz_proc_module *nv = realloc(v, cap * sizeof *nv);
                if (!nv) { fclose(f); free(v); return mlz__proc_fail(MLZ_PROC_ENOMEM, "out of memory"); }
                v = nv;
            }
            m = &v[n++];
            start_module(m, &l);
        }
        add_mapping(m, &l);
    }
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (!v[i].ino || !v[i].first_start || mlz_proc_module_load(pid, &v[i])) {
            v[i].bias = v[i].start;          /* no ELF facts: addresses stay absolute */
            v[i].build_id_len = 0;
        }
    mlz__proc_fail(0, "%s", "");
    *out = v;
    *count = n;
    return 0;
}
