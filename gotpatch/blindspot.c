/*
 * blindspot.c - which allocation calls GOT patching cannot see.
 *
 * A call reaches the hooks only if it goes through a patched slot. Code that
 * calls an allocator with a direct `call rel32` never does: a statically
 * linked allocator, a library built with -Bsymbolic or protected/hidden
 * visibility that defines malloc itself, or code inside the allocator's own
 * library. We find those sites by disassembling the executable segments of
 * every module from memory: a quick byte filter looks for E8/E9/0F 8x rel32
 * whose target is an allocation function (the global real ones, or
 * allocation-named functions the module defines itself), and only modules
 * with a candidate get a capstone linear sweep, which keeps the candidates
 * that are real instruction boundaries.
 *
 * capstone is dlopen'ed for the scan (the payload keeps libc as its only
 * link-time dependency) and, through CS_OPT_MEM, allocates from a private
 * mmap arena that is dropped after the scan: nothing comes from the target's
 * allocator, which may be routed through our hooks. CS_OPT_MEM is global to
 * the capstone library, so afterwards it is set back to libc's functions,
 * capstone's defaults; a target that itself used capstone concurrently with
 * a scan would allocate from our arena meanwhile (and must not free such
 * memory after the scan): an accepted risk for a diagnostic command.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "capstone_dl.h"
#include "got_internal.h"

/* ---- the scan ---------------------------------------------------------- */

#define MAX_TARGETS (2 * MLZ_GOT_MAX_HOOKS)

struct sctx {
    mlz_got_blindspot_report *out;
    mlz__cs *cs;
    size_t idx;
};

/* The rel32 target of a direct call/jmp/jcc instruction, or 0. */
static uintptr_t rel32_target(const uint8_t *b, size_t n, uintptr_t addr)
{
    size_t i = 0;
    while (i < n && (b[i] == 0x66 || b[i] == 0x67 || b[i] == 0xf2 || b[i] == 0xf3 || b[i] == 0x2e ||
                     b[i] == 0x3e || b[i] == 0x26 || b[i] == 0x36 || b[i] == 0x64 || b[i] == 0x65 ||
                     (b[i] & 0xf0) == 0x40))
        i++;
    int ok = (i + 5 == n && (b[i] == 0xe8 || b[i] == 0xe9)) ||
             (i + 6 == n && b[i] == 0x0f && (b[i + 1] & 0xf0) == 0x80);
    if (!ok) return 0;
    int32_t rel;
    memcpy(&rel, b + n - 4, 4);
    return addr + n + (intptr_t)rel;
}

static int target_index(const uintptr_t *t, const uint8_t *th, size_t nt, uintptr_t a)
{
    for (size_t i = 0; i < nt; i++)
        if (t[i] == a) return th[i];
    return -1;
}

uintptr_t mlz__last_rel32_to(uintptr_t s, size_t len, const uintptr_t *t, size_t nt)
{
    const uint8_t *p = (const uint8_t *)s;
    uintptr_t last = 0;
    for (size_t i = 0; i + 5 <= len; i++) {
        uintptr_t tgt = 0;
        if ((p[i] == 0xe8 || p[i] == 0xe9)) {
            int32_t rel;
            memcpy(&rel, p + i + 1, 4);
            tgt = s + i + 5 + (intptr_t)rel;
        } else if (p[i] == 0x0f && i + 6 <= len && (p[i + 1] & 0xf0) == 0x80) {
            int32_t rel;
            memcpy(&rel, p + i + 2, 4);
            tgt = s + i + 6 + (intptr_t)rel;
        }
        if (!tgt) continue;
        for (size_t k = 0; k < nt; k++)
            if (t[k] == tgt) { last = s + i; break; }
    }
    return last;
}

static void scan_segment(struct sctx *c, mlz_got_module_report *mr, uintptr_t s, uintptr_t e,
                         const uintptr_t *t, const uint8_t *th, size_t nt)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t len = e - s;
    uintptr_t last = mlz__last_rel32_to(s, len, t, nt);
    mr->bytes_scanned += len;
    c->out->bytes_scanned += len;
    if (!last) return;
    const uint8_t *code = p;
    size_t size = (last + 16 < e ? last + 16 : e) - s;
    uint64_t addr = s;
    while (size > 0) {
        if (!c->cs->disasm_iter(c->cs->h, &code, &size, &addr, c->cs->insn)) {
            code++, size--, addr++;   /* undecodable byte: step over it */
            continue;
        }
        uintptr_t tgt = rel32_target(c->cs->insn->bytes, c->cs->insn->size, (uintptr_t)c->cs->insn->address);
        int hi = tgt ? target_index(t, th, nt, tgt) : -1;
        if (hi < 0) continue;
        if (mr->nsites < MLZ_GOT_REPORT_SITES) {
            mr->sites[mr->nsites] = (uintptr_t)c->cs->insn->address;
            mr->site_hook[mr->nsites] = (uint8_t)hi;
            mr->nsites++;
        }
        mr->direct_sites++;
    }
}

static int scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct sctx *c = arg;
    size_t k = c->idx++;
    c->out->n = c->idx;
    mlz_got_module_report tmp, *mr = k < c->out->cap ? &c->out->modules[k] : &tmp;
    memset(mr, 0, sizeof *mr);
    mr->path = mlz__strdup_arena(info->dlpi_name ? info->dlpi_name : "");
    mr->base = info->dlpi_addr;
    int skip = mlz__skip_reason(info);
    if (skip) mr->flags |= MLZ_GOT_MOD_SKIPPED;
    mlz__module_counts(info->dlpi_addr, info->dlpi_phdr, mr->slots_patched, &mr->slots_left);
    if (skip == 1) { mr->flags |= MLZ_GOT_MOD_NOTSCANNED; return 0; }
    mlz__dyn d;
    if (mlz__dyn_parse(info, &d) != 0) { mr->flags |= MLZ_GOT_MOD_NOTSCANNED; return 0; }

    uintptr_t t[MAX_TARGETS];
    uint8_t th[MAX_TARGETS];
    size_t nt = 0;
    for (size_t i = 0; i < mlz__got.nhooks; i++) {
        if (!mlz__is_alloc_name(mlz__got.name[i])) continue;
        uintptr_t real = mlz__got.real[i];
        if (real) {
            t[nt] = real, th[nt++] = (uint8_t)i;
            if (mlz__in_module(&d, real)) mr->flags |= MLZ_GOT_MOD_PROVIDER;
        }
        const ElfW(Sym) *s = mlz__dyn_lookup_def(&d, mlz__got.name[i]);
        if (s) {
            mr->own_alloc_mask |= 1ull << i;
            if (d.base + s->st_value != real) t[nt] = d.base + s->st_value, th[nt++] = (uint8_t)i;
        }
    }
    if (mr->own_alloc_mask) mr->flags |= MLZ_GOT_MOD_OWN_ALLOC;
    for (size_t i = 0; i < d.phnum; i++) {
        const ElfW(Phdr) *ph = &d.phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || !(ph->p_flags & PF_R)) continue;
        uintptr_t s = d.base + ph->p_vaddr;
        scan_segment(c, mr, s, s + ph->p_memsz, t, th, nt);
    }
    return 0;
}

int mlz_got_blindspot_scan(mlz_got_blindspot_report *out)
{
    if (!out || (out->cap && !out->modules)) return MLZ_GOT_EINVAL;
    out->n = 0;
    out->bytes_scanned = 0;
    if (!__atomic_load_n(&mlz__got.initialised, __ATOMIC_ACQUIRE)) return MLZ_GOT_ESTATE;
    mlz__cs cs;
    int rc = mlz__cs_load(&cs);   /* outside our lock: capstone's constructors may dlopen */
    if (rc) { mlz__cs_unload(&cs); return rc; }
    rc = mlz__lock();
    if (rc) { mlz__cs_unload(&cs); return rc; }
    rc = mlz__cs_begin(&cs, 0);
    if (rc == 0) {
        struct sctx c = { .out = out, .cs = &cs };
        dl_iterate_phdr(scan_cb, &c);
    }
    mlz__cs_end(&cs);
    mlz__unlock();
    mlz__cs_unload(&cs);
    return rc;
}

/* ---- formatting -------------------------------------------------------- */

struct sbuf { char *b; size_t len, pos; };

__attribute__((format(printf, 2, 3)))
static void sb(struct sbuf *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = s->pos < s->len ? s->len - s->pos : 0;
    int n = vsnprintf(room ? s->b + s->pos : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) s->pos += (size_t)n;
}

int mlz_got_format_report(const mlz_got_blindspot_report *r, char *buf, size_t len)
{
    struct sbuf s = { buf, len, 0 };
    if (buf && len) buf[0] = '\0';
    if (!r) return 0;
    size_t n = r->n < r->cap ? r->n : r->cap;
    sb(&s, "%-44s %5s %5s %5s %5s %7s  %s\n", "module", "JUMP", "GLOB", "ABS64", "left", "direct", "notes");
    for (size_t i = 0; i < n; i++) {
        const mlz_got_module_report *m = &r->modules[i];
        const char *path = m->path && m->path[0] ? m->path : "(main executable)";
        size_t pl = strlen(path);
        if (pl > 44) path += pl - 44;
        sb(&s, "%-44s %5u %5u %5u %5u %7u ", path, m->slots_patched[0], m->slots_patched[1],
           m->slots_patched[2], m->slots_left, m->direct_sites);
        if (m->flags & MLZ_GOT_MOD_SKIPPED) sb(&s, " skipped");
        if (m->flags & MLZ_GOT_MOD_NOTSCANNED) sb(&s, " not-scanned");
        if (m->flags & MLZ_GOT_MOD_PROVIDER) sb(&s, " allocator-provider");
        if (m->own_alloc_mask && !(m->flags & MLZ_GOT_MOD_PROVIDER)) {
            sb(&s, " own-allocator:");
            for (size_t h = 0; h < mlz__got.nhooks && h < 32; h++)
                if (m->own_alloc_mask & (1ull << h)) sb(&s, " %s", mlz__got.name[h]);
        }
        sb(&s, "\n");
        for (uint32_t k = 0; k < m->nsites; k++)
            sb(&s, "    direct call at %#lx (+%#lx) -> %s\n", (unsigned long)m->sites[k],
               (unsigned long)(m->sites[k] - m->base),
               m->site_hook[k] < mlz__got.nhooks ? mlz__got.name[m->site_hook[k]] : "?");
    }
    if (r->n > n) sb(&s, "(%zu more modules not shown)\n", r->n - n);
    size_t room = s.pos < s.len ? s.len - s.pos : 0;
    s.pos += (size_t)mlz__format_inline(room ? s.b + s.pos : NULL, room);
    return (int)s.pos;
}
