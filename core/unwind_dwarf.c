/*
 * unwind_dwarf.c - stack unwinding from .eh_frame CFI, for code built without
 * frame pointers.
 *
 * Why hand-written: Debian's libunwind.a is not PIC, a shared libunwind would
 * have to exist in the target's mount namespace, and both libunwind and
 * libgcc find CFI through dl_iterate_phdr (the loader lock) and may allocate.
 * Here every module's .eh_frame_hdr search table was validated once by
 * mlz_modtab_refresh(), so a step is:
 *
 *   1. find the module holding the pc (lookups use pc-1 for return addresses,
 *      whose call may be a function's last instruction; the frame right after
 *      a signal frame holds an exact, interrupted pc);
 *   2. binary-search .eh_frame_hdr for the FDE, parse its CIE (cached: most
 *      frames share one) and run the CIE's initial instructions once per CIE;
 *   3. run the FDE's CFA program up to the pc, giving a row of rules;
 *   4. compute the CFA, then the caller's registers, reading saved values
 *      only inside [lo, hi) of the current thread stack.
 *
 * Cached walks step frames of modules built with frame pointers (decided
 * once per module from its CFI, see mlz__unwind_classify) by rbp instead:
 * two loads, none of the above.
 *
 * A frame must move strictly up the stack (the caller's sp above ours), so
 * walks end even on cyclic or corrupted data; any validation failure ends the
 * walk and bumps a counter. Without an FDE we recognise glibc's/musl's
 * __restore_rt by its code bytes (mov $15,%rax; syscall) and restore from
 * the ucontext, else follow rbp if it looks like a frame record.
 *
 * Supported: CIE versions 1, 3, 4; augmentations z, R, P, L, S (B and G are
 * accepted and ignored); pointer encodings absptr, uleb128, udata2/4/8,
 * sleb128, sdata2/4/8, with pcrel and indirect (indirect only where the value
 * is skipped: personality); every DW_CFA op of DWARF 5 except
 * DW_CFA_GNU_window_save (SPARC); DW_OP expressions needed for signal frames,
 * PLT stubs and stack realignment (breg*, bregx, lit*, const*, deref,
 * deref_size, arithmetic, logic, comparisons, stack ops, skip, bra,
 * call_frame_cfa). Not supported: 64-bit DWARF CIE ids in .eh_frame beyond
 * parsing lengths, textrel/datarel/funcrel/aligned in .eh_frame, DW_OP_reg*
 * location ops, piece ops, vector registers (rules for them are ignored).
 * .eh_frame_hdr tables in any encoding but datarel|sdata4 are ignored (the
 * module then falls back to frame pointers).
 */
#include "unwind.h"
#include "modtab.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#include <ucontext.h>

#define CFA_STATE_DEPTH 4       /* remember_state nesting; GCC emits 1 */
#define EXPR_STACK 16
#define EXPR_MAX_OPS 256        /* bounds loops through DW_OP_skip/bra */
#define USER_VA_END (1ull << 47)
#define MIN_PC 4096
#define REG_BIT(r) (1u << (r))
#define CALLEE_SAVED (REG_BIT(MLZ_REG_RBX) | REG_BIT(MLZ_REG_RBP) | REG_BIT(MLZ_REG_R12) | \
                      REG_BIT(MLZ_REG_R13) | REG_BIT(MLZ_REG_R14) | REG_BIT(MLZ_REG_R15))

/* ---- counters ---- */

static struct {
    _Atomic uint64_t walks, outermost, full, no_module, no_fde, bad_frame,
        stack_switch, unsupported, fp_fallback, signal_frames;
} g_stats;

#define COUNT(f) atomic_fetch_add_explicit(&g_stats.f, 1, memory_order_relaxed)
/* The outcomes of every walk are not counted for cached walks (the hooks'):
 * one shared counter bumped by every thread on every sample cost more than
 * the walk itself at 8 threads. Failures stay counted: they are rare. */
#define COUNT_USUAL(f) do { if (!cache) COUNT(f); } while (0)

void mlz_unwind_get_stats(mlz_unwind_stats *o)
{
#define LD(f) o->f = atomic_load_explicit(&g_stats.f, memory_order_relaxed)
    LD(walks); LD(outermost); LD(full); LD(no_module); LD(no_fde); LD(bad_frame);
    LD(stack_switch); LD(unsupported); LD(fp_fallback); LD(signal_frames);
#undef LD
}

/* ---- bounded byte reader for CFI (module memory) ---- */

typedef struct cursor {
    const uint8_t *p, *end;
    int bad;
} cursor;

static uint64_t rd_fixed(cursor *c, unsigned n)
{
    uint64_t v = 0;
    if ((size_t)(c->end - c->p) < n) {
        c->bad = 1;
        c->p = c->end;
        return 0;
    }
    memcpy(&v, c->p, n);                /* little-endian */
    c->p += n;
    return v;
}

static uint64_t rd_uleb(cursor *c)
{
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (c->p >= c->end || shift > 63) {
            c->bad = 1;
            return 0;
        }
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
}

static int64_t rd_sleb(cursor *c)
{
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (c->p >= c->end || shift > 63) {
            c->bad = 1;
            return 0;
        }
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            if (shift + 7 < 64 && (b & 0x40))
                v |= ~0ull << (shift + 7);
            return (int64_t)v;
        }
    }
}

static void rd_skip(cursor *c, uint64_t n)
{
    if (n > (size_t)(c->end - c->p)) {
        c->bad = 1;
        c->p = c->end;
    } else {
        c->p += n;
    }
}

/* A DW_EH_PE-encoded value. *indirect reports the 0x80 bit (the value is then
 * the address of the pointer; we never dereference it). */
static uint64_t rd_encoded(cursor *c, uint8_t enc, int *indirect)
{
    uint64_t pos = (uint64_t)(uintptr_t)c->p, v;

    if (enc == 0x1b && (size_t)(c->end - c->p) >= 4) {     /* pcrel|sdata4: nearly all */
        int32_t s;
        memcpy(&s, c->p, 4);
        c->p += 4;
        if (indirect)
            *indirect = 0;
        return pos + (uint64_t)(int64_t)s;
    }
    if (enc == 0xff)                    /* DW_EH_PE_omit */
        return 0;
    switch (enc & 0x0f) {
    case 0x00: case 0x04: case 0x0c: v = rd_fixed(c, 8); break;
    case 0x01: v = rd_uleb(c); break;
    case 0x02: v = rd_fixed(c, 2); break;
    case 0x03: v = rd_fixed(c, 4); break;
    case 0x09: v = (uint64_t)rd_sleb(c); break;
    case 0x0a: v = (uint64_t)(int64_t)(int16_t)rd_fixed(c, 2); break;
    case 0x0b: v = (uint64_t)(int64_t)(int32_t)rd_fixed(c, 4); break;
    default: c->bad = 1; return 0;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += pos; break;
    default: c->bad = 1; return 0;      /* textrel, datarel, funcrel, aligned */
    }
    if (indirect)
        *indirect = !!(enc & 0x80);
    return v;
}

/* ---- CFA rows ---- */

enum { RULE_DEFAULT, RULE_UNDEF, RULE_SAME, RULE_OFFSET, RULE_VAL_OFFSET, RULE_REG,
       RULE_EXPR, RULE_VAL_EXPR };
#define REG_NONE 0xff

/* One row of the CFA table. Only registers in `set` have a rule of their
 * own, so applying a row costs one step per saved register, not per
 * register; rows are small because remember_state copies them. */
typedef struct row {
    uint32_t set;                       /* bit r: how[r] is not RULE_DEFAULT */
    uint8_t how[MLZ_UNWIND_NREGS];
    uint8_t src[MLZ_UNWIND_NREGS];      /* RULE_REG: the register holding the value */
    uint8_t cfa_how, cfa_reg;           /* RULE_OFFSET (cfa_reg + cfa_v) or RULE_EXPR */
    int64_t cfa_v;
    int64_t v[MLZ_UNWIND_NREGS];        /* offset, or address of a uleb-length-prefixed expression */
} row;

typedef struct cie {
    const uint8_t *addr;                /* cache key, NULL if empty */
    uint64_t code_align;
    int64_t data_align;
    unsigned ra;
    uint8_t fde_enc, has_z, signal;
    row init;                           /* after the initial instructions */
} cie;

static void set_rule(row *rw, uint64_t reg, uint8_t how, int64_t v, uint64_t src)
{
    if (reg >= MLZ_UNWIND_NREGS)
        return;                         /* vector and x87 registers: not tracked */
    if (how == RULE_REG && src >= MLZ_UNWIND_NREGS)
        how = RULE_UNDEF;
    rw->how[reg] = how;
    rw->v[reg] = v;
    rw->src[reg] = (uint8_t)(src < MLZ_UNWIND_NREGS ? src : REG_NONE);
    rw->set |= REG_BIT(reg);
}

/* DW_CFA_restore: back to the CIE's rule (init is NULL inside the CIE). */
static void restore_rule(row *rw, const row *init, uint64_t reg)
{
    if (reg >= MLZ_UNWIND_NREGS)
        return;
    if (init && (init->set & REG_BIT(reg))) {
        rw->how[reg] = init->how[reg];
        rw->v[reg] = init->v[reg];
        rw->src[reg] = init->src[reg];
        rw->set |= REG_BIT(reg);
    } else {
        rw->how[reg] = RULE_DEFAULT;
        rw->set &= ~REG_BIT(reg);
    }
}

static void set_cfa(row *rw, uint8_t how, uint64_t reg, int64_t v)
{
    rw->cfa_how = how;
    rw->cfa_reg = (uint8_t)(reg < MLZ_UNWIND_NREGS ? reg : REG_NONE);
    rw->cfa_v = v;
}

static int64_t factored(uint64_t off, int64_t align)
{
    return (int64_t)(off * (uint64_t)align);    /* wraps instead of UB on garbage */
}

typedef struct fp_scan fp_scan;
static void fp_scan_row(fp_scan *sc, const row *rw, uint64_t lo, uint64_t hi);

/* Run a CFA program until the row for `target` is complete. init is the
 * CIE's row (for DW_CFA_restore), NULL while running the CIE itself. With
 * scan (module classification, not walks), every row is shown to it with
 * the addresses it covers before the program moves past it. */
static int run_cfa(const uint8_t *p, const uint8_t *end, uint64_t loc, uint64_t target,
                   const cie *ci, row *rw, const row *init, fp_scan *scan)
{
    row saved[CFA_STATE_DEPTH];
    unsigned nsaved = 0;
    cursor c = { p, end, 0 };
    uint64_t next;

#define ADVANCE_TO(to) do { next = (to); \
        if (scan) fp_scan_row(scan, rw, loc, next); \
        loc = next; \
        if (loc > target) return 0; } while (0)
    while (c.p < c.end && !c.bad) {
        uint8_t op = (uint8_t)rd_fixed(&c, 1);
        uint64_t reg, off;
        const uint8_t *blk;
        int ind = 0;

        switch (op >> 6) {
        case 1:                                         /* advance_loc */
            ADVANCE_TO(loc + (op & 0x3f) * ci->code_align);
            continue;
        case 2:                                         /* offset */
            off = rd_uleb(&c);
            set_rule(rw, op & 0x3f, RULE_OFFSET, factored(off, ci->data_align), 0);
            continue;
        case 3:                                         /* restore */
            restore_rule(rw, init, op & 0x3f);
            continue;
        }
        switch (op) {
        case 0x00:                                      /* nop */
            break;
        case 0x01:                                      /* set_loc */
            next = rd_encoded(&c, ci->fde_enc, &ind);
            if (ind)
                return -1;
            ADVANCE_TO(next);
            break;
        case 0x02: case 0x03: case 0x04:                /* advance_loc1/2/4 */
            ADVANCE_TO(loc + rd_fixed(&c, op == 0x02 ? 1 : op == 0x03 ? 2 : 4) * ci->code_align);
            break;
        case 0x05:                                      /* offset_extended */
            reg = rd_uleb(&c);
            off = rd_uleb(&c);
            set_rule(rw, reg, RULE_OFFSET, factored(off, ci->data_align), 0);
            break;
        case 0x06:                                      /* restore_extended */
            restore_rule(rw, init, rd_uleb(&c));
            break;
        case 0x07:                                      /* undefined */
            set_rule(rw, rd_uleb(&c), RULE_UNDEF, 0, 0);
            break;
        case 0x08:                                      /* same_value */
            set_rule(rw, rd_uleb(&c), RULE_SAME, 0, 0);
            break;
        case 0x09:                                      /* register */
            reg = rd_uleb(&c);
            off = rd_uleb(&c);
            set_rule(rw, reg, RULE_REG, 0, off);
            break;
        case 0x0a:                                      /* remember_state */
            if (nsaved == CFA_STATE_DEPTH)
                return -1;
            saved[nsaved++] = *rw;
            break;
        case 0x0b:                                      /* restore_state */
            if (nsaved == 0)
                return -1;
            *rw = saved[--nsaved];
            break;
        case 0x0c:                                      /* def_cfa */
            reg = rd_uleb(&c);
            set_cfa(rw, RULE_OFFSET, reg, (int64_t)rd_uleb(&c));
            break;
        case 0x0d:                                      /* def_cfa_register */
            reg = rd_uleb(&c);
            set_cfa(rw, RULE_OFFSET, reg, rw->cfa_how == RULE_OFFSET ? rw->cfa_v : 0);
            break;
        case 0x0e:                                      /* def_cfa_offset */
            rw->cfa_v = (int64_t)rd_uleb(&c);
            break;
        case 0x0f:                                      /* def_cfa_expression */
            blk = c.p;
            rd_skip(&c, rd_uleb(&c));
            set_cfa(rw, RULE_EXPR, 0, (int64_t)(uintptr_t)blk);
            break;
        case 0x10: case 0x16:                           /* expression, val_expression */
            reg = rd_uleb(&c);
            blk = c.p;
            rd_skip(&c, rd_uleb(&c));
            set_rule(rw, reg, op == 0x10 ? RULE_EXPR : RULE_VAL_EXPR, (int64_t)(uintptr_t)blk, 0);
            break;
        case 0x11:                                      /* offset_extended_sf */
            reg = rd_uleb(&c);
            set_rule(rw, reg, RULE_OFFSET, factored((uint64_t)rd_sleb(&c), ci->data_align), 0);
            break;
        case 0x12:                                      /* def_cfa_sf */
            reg = rd_uleb(&c);
            set_cfa(rw, RULE_OFFSET, reg, factored((uint64_t)rd_sleb(&c), ci->data_align));
            break;
        case 0x13:                                      /* def_cfa_offset_sf */
            rw->cfa_v = factored((uint64_t)rd_sleb(&c), ci->data_align);
            break;
        case 0x14: case 0x15:                           /* val_offset, val_offset_sf */
            reg = rd_uleb(&c);
            off = op == 0x14 ? rd_uleb(&c) : (uint64_t)rd_sleb(&c);
            set_rule(rw, reg, RULE_VAL_OFFSET, factored(off, ci->data_align), 0);
            break;
        case 0x2e:                                      /* GNU_args_size */
            rd_uleb(&c);
            break;
        case 0x2f:                                      /* GNU_negative_offset_extended */
            reg = rd_uleb(&c);
            off = rd_uleb(&c);
            set_rule(rw, reg, RULE_OFFSET, factored(0 - off, ci->data_align), 0);
            break;
        default:                                        /* GNU_window_save, user ops */
            return -1;
        }
    }
#undef ADVANCE_TO
    return c.bad ? -1 : 0;
}

/* ---- CIE / FDE ---- */

/* Parse the CIE at `at` into *ci, including its initial row. */
static int parse_cie(const uint8_t *at, const mlz_module *m, cie *ci)
{
    cursor c = { at, (const uint8_t *)(uintptr_t)m->eh_seg_hi, 0 };
    unsigned idsize = 4;

    ci->addr = NULL;
    if ((uint64_t)(uintptr_t)at < m->eh_seg_lo)
        return -1;
    uint64_t len = rd_fixed(&c, 4);
    if (len == 0xffffffff) {
        len = rd_fixed(&c, 8);
        idsize = 8;
    }
    if (c.bad || len == 0 || len > (size_t)(c.end - c.p))
        return -1;
    c.end = c.p + len;
    if (rd_fixed(&c, idsize) != 0)
        return -1;                      /* an FDE, not a CIE */
    uint8_t version = (uint8_t)rd_fixed(&c, 1);
    if (version != 1 && version != 3 && version != 4)
        return -1;
    const uint8_t *aug = c.p;
    while (c.p < c.end && *c.p)
        c.p++;
    rd_skip(&c, 1);
    if (version == 4 && (rd_fixed(&c, 1) != 8 || rd_fixed(&c, 1) != 0))
        return -1;                      /* address size 8, no segments */
    ci->code_align = rd_uleb(&c);
    ci->data_align = rd_sleb(&c);
    ci->ra = version == 1 ? (unsigned)rd_fixed(&c, 1) : (unsigned)rd_uleb(&c);
    ci->fde_enc = 0;
    ci->has_z = ci->signal = 0;
    if (c.bad || ci->ra >= MLZ_UNWIND_NREGS)
        return -1;
    if (*aug == 'z') {
        ci->has_z = 1;
        uint64_t alen = rd_uleb(&c);
        const uint8_t *astart = c.p;
        rd_skip(&c, alen);
        if (c.bad)
            return -1;
        cursor a = { astart, c.p, 0 };
        for (const uint8_t *s = aug + 1; *s; s++) {
            uint8_t enc;
            switch (*s) {
            case 'R': ci->fde_enc = (uint8_t)rd_fixed(&a, 1); break;
            case 'L': rd_fixed(&a, 1); break;
            case 'P':
                enc = (uint8_t)rd_fixed(&a, 1);
                if ((enc & 0x70) == 0x50)
                    return -1;          /* aligned: padding we do not model */
                rd_encoded(&a, enc & 0x0f, NULL);
                break;
            case 'S': ci->signal = 1; break;
            case 'B': case 'G': break;
            default: return -1;
            }
            if (a.bad)
                return -1;
        }
    } else if (*aug) {
        return -1;                      /* pre-"z" augmentations ("eh") */
    }
    memset(&ci->init, 0, sizeof ci->init);
    ci->init.cfa_how = RULE_UNDEF;
    if (run_cfa(c.p, c.end, 0, 0, ci, &ci->init, NULL, NULL) < 0)
        return -1;
    ci->addr = at;
    return 0;
}

enum { FDE_FOUND, FDE_NONE, FDE_BAD };

typedef struct fde {
    uint64_t pc_begin, range;
    const uint8_t *insn, *end;
} fde;

/* The FDE of entry i of the module's search table: its CIE into *ci (kept
 * if it is the last one parsed), its code range and program into *fd. */
static int read_fde(const mlz_module *m, uint32_t i, cie *ci, fde *fd)
{
    int32_t off;
    memcpy(&off, (const uint8_t *)(uintptr_t)m->eh_table + (size_t)i * 8 + 4, 4);
    uint64_t at = m->eh_frame_hdr + (uint64_t)(int64_t)off;
    if (at < m->eh_seg_lo || at >= m->eh_seg_hi)
        return FDE_BAD;
    cursor c = { (const uint8_t *)(uintptr_t)at, (const uint8_t *)(uintptr_t)m->eh_seg_hi, 0 };
    unsigned idsize = 4;
    uint64_t len = rd_fixed(&c, 4);
    if (len == 0xffffffff) {
        len = rd_fixed(&c, 8);
        idsize = 8;
    }
    if (c.bad || len == 0 || len > (size_t)(c.end - c.p))
        return FDE_BAD;
    c.end = c.p + len;
    const uint8_t *idp = c.p;
    uint64_t cie_off = rd_fixed(&c, idsize);
    if (c.bad || cie_off == 0 || cie_off > (uint64_t)(uintptr_t)idp)
        return FDE_BAD;
    const uint8_t *cie_at = idp - cie_off;
    if (ci->addr != cie_at && parse_cie(cie_at, m, ci) < 0)
        return FDE_BAD;

    int ind = 0;
    fd->pc_begin = rd_encoded(&c, ci->fde_enc, &ind);
    fd->range = rd_encoded(&c, ci->fde_enc & 0x0f, NULL);
    if (c.bad || ind)
        return FDE_BAD;
    if (ci->has_z)
        rd_skip(&c, rd_uleb(&c));
    if (c.bad)
        return FDE_BAD;
    fd->insn = c.p;
    fd->end = c.end;
    return FDE_FOUND;
}

static int find_fde(const mlz_module *m, uint64_t pc, cie *ci, fde *fd)
{
    if (!m->eh_table)
        return FDE_NONE;
    const uint8_t *tab = (const uint8_t *)(uintptr_t)m->eh_table;
    int64_t rel = (int64_t)(pc - m->eh_frame_hdr);
    int32_t loc;
    uint32_t lo = 0, hi = m->eh_count;

    memcpy(&loc, tab, 4);
    if (rel < loc)
        return FDE_NONE;
    while (hi - lo > 1) {               /* last entry with initial_loc <= pc */
        uint32_t mid = lo + (hi - lo) / 2;
        memcpy(&loc, tab + (size_t)mid * 8, 4);
        if (loc <= rel)
            lo = mid;
        else
            hi = mid;
    }
    int rc = read_fde(m, lo, ci, fd);
    if (rc == FDE_FOUND && (pc < fd->pc_begin || pc - fd->pc_begin >= fd->range))
        return FDE_NONE;                /* a gap between FDEs */
    return rc;
}

/* ---- modules built with frame pointers ---- */

/* Whether a frame-pointer step ({saved rbp, return address} at rbp, the
 * caller's sp at rbp + 16) gives what the CFI gives at every return address
 * of an FDE. It does if each of its rows is one of:
 *   - frameless: CFA = rsp + 8 (no call can happen there: the ABI wants rsp
 *     16-aligned at a call, so a function that calls has moved rsp);
 *   - the frame: CFA = rbp + 16, rbp saved at CFA - 16;
 *   - the prologue, from push %rbp up to and including mov %rsp,%rbp
 *     (CFA = rsp + 16, rbp saved at CFA - 16, the row ends with that mov):
 *     compilers schedule a few other instructions in between (GCC: up to
 *     about 30 bytes), never a call, which needs the frame first; code that
 *     saves rbp to use it for data has no such mov;
 * with the return address at CFA - 8. A module built with frame pointers
 * still has a few FDEs that are not (the PLT, whose CFA is an expression;
 * _start, whose return address is undefined; a function that realigns its
 * stack; code from a static library built without): their code is noted
 * as spans where walks keep using the CFI. A module that needs more than
 * MLZ_MODULE_CFI_SPANS spans is not built with frame pointers (the scan of
 * such a module stops there). */
struct fp_scan {
    const mlz_module *m;
    int bad;                        /* this FDE has a row a frame-pointer step gets wrong */
    int framed;                     /* rows with CFA = rbp + 16 seen */
    uint64_t last;                  /* where the next row starts */
};

#define FP_PROLOGUE_MAX 64           /* bytes from push %rbp to the end of mov %rsp,%rbp */

static int saved_at(const row *rw, unsigned reg, int64_t off)
{
    return (rw->set & REG_BIT(reg)) && rw->how[reg] == RULE_OFFSET && rw->v[reg] == off;
}

/* The 3 bytes before hi are mov %rsp,%rbp (either encoding). */
static int mov_rsp_rbp_before(const mlz_module *m, uint64_t hi)
{
    if (hi < m->exec_start + 3 || hi > m->exec_end)
        return 0;
    const uint8_t *p = (const uint8_t *)(uintptr_t)(hi - 3);
    return p[0] == 0x48 && ((p[1] == 0x89 && p[2] == 0xe5) || (p[1] == 0x8b && p[2] == 0xec));
}

static void fp_scan_row(fp_scan *sc, const row *rw, uint64_t lo, uint64_t hi)
{
    sc->last = hi;
    if (hi <= lo || sc->bad)
        return;
    if (!saved_at(rw, MLZ_REG_RIP, -8) || rw->cfa_how != RULE_OFFSET)
        sc->bad = 1;
    else if (rw->cfa_reg == MLZ_REG_RSP && rw->cfa_v == 8)
        return;
    else if (!saved_at(rw, MLZ_REG_RBP, -16))
        sc->bad = 1;
    else if (rw->cfa_reg == MLZ_REG_RBP && rw->cfa_v == 16)
        sc->framed = 1;
    else if (!(rw->cfa_reg == MLZ_REG_RSP && rw->cfa_v == 16 && hi - lo <= FP_PROLOGUE_MAX &&
               mov_rsp_rbp_before(sc->m, hi)))
        sc->bad = 1;
}

/* Modules with more FDEs are left to the CFI: the scan runs under the
 * loader lock (modtab.c), at about 0.11 us per FDE of a frame-pointer
 * module (a module without frame pointers is told in a few us), so
 * 50000 FDEs take about 6 ms. */
#define FP_SCAN_MAX_FDES 50000

void mlz__unwind_classify(mlz_module *m)
{
    m->frame_pointers = 0;
    m->ncfi = 0;
    if (!m->eh_table || !m->eh_count || m->eh_count > FP_SCAN_MAX_FDES || m->nexec != 1)
        return;
    fp_scan sc = { m, 0, 0, 0 };
    unsigned n = 0;
    cie ci;
    fde fd;
    ci.addr = NULL;
    for (uint32_t i = 0; i < m->eh_count; i++) {
        if (read_fde(m, i, &ci, &fd) != FDE_FOUND || fd.pc_begin < m->exec_start ||
            fd.range > m->exec_end - fd.pc_begin)
            return;
        row rw = ci.init;
        sc.bad = 0;
        sc.last = fd.pc_begin;
        if (run_cfa(fd.insn, fd.end, fd.pc_begin, UINT64_MAX, &ci, &rw, &ci.init, &sc) < 0)
            sc.bad = 1;
        fp_scan_row(&sc, &rw, sc.last, fd.pc_begin + fd.range);
        if (!sc.bad || !fd.range)
            continue;
        /* The table is sorted: extend the last span over padding, or start one. */
        if (n && fd.pc_begin >= m->cfi[n - 1][0] && fd.pc_begin - m->cfi[n - 1][1] < 64) {
            if (fd.pc_begin + fd.range > m->cfi[n - 1][1])
                m->cfi[n - 1][1] = fd.pc_begin + fd.range;
            continue;
        }
        if (n == MLZ_MODULE_CFI_SPANS)
            return;
        m->cfi[n][0] = fd.pc_begin;
        m->cfi[n++][1] = fd.pc_begin + fd.range;
    }
    if (!sc.framed)
        return;
    m->ncfi = (uint8_t)n;
    m->frame_pointers = 1;
}

/* ---- stack reads and expressions ---- */

typedef struct bounds {
    uint64_t lo, hi;
} bounds;

__attribute__((no_sanitize_address)) static int rd_stack(const bounds *b, uint64_t addr,
                                                         unsigned size, uint64_t *v)
{
    if (addr < b->lo || addr > b->hi - size)
        return -1;
    *v = 0;
    memcpy(v, (const void *)(uintptr_t)addr, size);
    return 0;
}

/* Evaluate a DWARF expression (blk: uleb length, then ops). push_cfa: start
 * with the CFA on the stack (DW_CFA_expression and val_expression). Returns
 * 0, EXPR_BAD (unknown register, read outside the stack) or EXPR_UNSUPPORTED. */
#define EXPR_BAD (-2)
#define EXPR_UNSUPPORTED (-1)
static int eval_expr(const uint8_t *blk, const mlz_unwind_regs *rs, const bounds *b,
                     int push_cfa, uint64_t cfa, uint64_t *out)
{
    cursor c = { blk, blk + 10, 0 };
    uint64_t st[EXPR_STACK], a, x;
    unsigned sp = 0, budget = EXPR_MAX_OPS;

    uint64_t len = rd_uleb(&c);         /* bounds checked when the CFI was parsed */
    const uint8_t *start = c.p;
    c.end = c.p + len;
    if (push_cfa)
        st[sp++] = cfa;

#define NEED(k) do { if (sp < (k)) return -1; } while (0)
#define PUSH(v) do { uint64_t v_ = (v); if (sp == EXPR_STACK) return -1; st[sp++] = v_; } while (0)
    while (c.p < c.end) {
        if (!budget--)
            return -1;
        uint8_t op = (uint8_t)rd_fixed(&c, 1);
        if (op >= 0x30 && op <= 0x4f) {                 /* lit0..31 */
            PUSH((uint64_t)(op - 0x30));
            continue;
        }
        if ((op >= 0x70 && op <= 0x8f) || op == 0x92) { /* breg0..31, bregx */
            uint64_t r = op == 0x92 ? rd_uleb(&c) : (uint64_t)(op - 0x70);
            int64_t off = rd_sleb(&c);
            if (r >= MLZ_UNWIND_NREGS || !(rs->valid & REG_BIT(r)))
                return EXPR_BAD;
            PUSH(rs->reg[r] + (uint64_t)off);
            continue;
        }
        switch (op) {
        case 0x03: PUSH(rd_fixed(&c, 8)); break;                        /* addr */
        case 0x06: case 0x94: {                                         /* deref, deref_size */
            unsigned n = op == 0x06 ? 8 : (unsigned)rd_fixed(&c, 1);
            NEED(1);
            if (n == 0 || n > 8)
                return EXPR_UNSUPPORTED;
            if (rd_stack(b, st[sp - 1], n, &st[sp - 1]) < 0)
                return EXPR_BAD;
            break;
        }
        case 0x08: PUSH(rd_fixed(&c, 1)); break;                        /* const1u */
        case 0x09: PUSH((uint64_t)(int64_t)(int8_t)rd_fixed(&c, 1)); break;
        case 0x0a: PUSH(rd_fixed(&c, 2)); break;
        case 0x0b: PUSH((uint64_t)(int64_t)(int16_t)rd_fixed(&c, 2)); break;
        case 0x0c: PUSH(rd_fixed(&c, 4)); break;
        case 0x0d: PUSH((uint64_t)(int64_t)(int32_t)rd_fixed(&c, 4)); break;
        case 0x0e: case 0x0f: PUSH(rd_fixed(&c, 8)); break;
        case 0x10: PUSH(rd_uleb(&c)); break;                            /* constu */
        case 0x11: PUSH((uint64_t)rd_sleb(&c)); break;                  /* consts */
        case 0x12: NEED(1); PUSH(st[sp - 1]); break;                    /* dup */
        case 0x13: NEED(1); sp--; break;                                /* drop */
        case 0x14: NEED(2); PUSH(st[sp - 2]); break;                    /* over */
        case 0x15: a = rd_fixed(&c, 1); NEED(a + 1); PUSH(st[sp - 1 - a]); break; /* pick */
        case 0x16: NEED(2); x = st[sp - 1]; st[sp - 1] = st[sp - 2]; st[sp - 2] = x; break;
        case 0x17: NEED(3); x = st[sp - 1]; st[sp - 1] = st[sp - 2];    /* rot */
                   st[sp - 2] = st[sp - 3]; st[sp - 3] = x; break;
        case 0x19: NEED(1); if ((int64_t)st[sp - 1] < 0) st[sp - 1] = -st[sp - 1]; break;
        case 0x1f: NEED(1); st[sp - 1] = -st[sp - 1]; break;            /* neg */
        case 0x20: NEED(1); st[sp - 1] = ~st[sp - 1]; break;            /* not */
        case 0x23: NEED(1); st[sp - 1] += rd_uleb(&c); break;           /* plus_uconst */
        case 0x1a: case 0x1b: case 0x1c: case 0x1d: case 0x1e: case 0x21: case 0x22:
        case 0x24: case 0x25: case 0x26: case 0x27: case 0x29: case 0x2a: case 0x2b:
        case 0x2c: case 0x2d: case 0x2e: {
            NEED(2);
            uint64_t t = st[sp - 1], s = st[sp - 2];            /* s op t */
            int64_t si = (int64_t)s, ti = (int64_t)t;
            sp--;
            switch (op) {
            case 0x1a: x = s & t; break;
            case 0x1b: if (ti == 0 || (ti == -1 && si == INT64_MIN)) return -1;
                       x = (uint64_t)(si / ti); break;
            case 0x1c: x = s - t; break;
            case 0x1d: if (t == 0) return -1; x = s % t; break;
            case 0x1e: x = s * t; break;
            case 0x21: x = s | t; break;
            case 0x22: x = s + t; break;
            case 0x24: x = t < 64 ? s << t : 0; break;
            case 0x25: x = t < 64 ? s >> t : 0; break;
            case 0x26: x = t < 64 ? (uint64_t)(si >> t) : (si < 0 ? ~0ull : 0); break;
            case 0x27: x = s ^ t; break;
            case 0x29: x = si == ti; break;
            case 0x2a: x = si >= ti; break;
            case 0x2b: x = si > ti; break;
            case 0x2c: x = si <= ti; break;
            case 0x2d: x = si < ti; break;
            default:   x = si != ti; break;
            }
            st[sp - 1] = x;
            break;
        }
        case 0x28: case 0x2f: {                                         /* bra, skip */
            int16_t d = (int16_t)rd_fixed(&c, 2);
            if (op == 0x28) {
                NEED(1);
                if (st[--sp] == 0)
                    break;
            }
            if (d < 0 ? (size_t)(c.p - start) < (size_t)-d : (size_t)(c.end - c.p) < (size_t)d)
                return -1;
            c.p += d;
            break;
        }
        case 0x96: break;                                               /* nop */
        case 0x9c: PUSH(cfa); break;                                    /* call_frame_cfa */
        default: return -1;
        }
        if (c.bad)
            return -1;
    }
#undef NEED
#undef PUSH
    if (sp == 0)
        return -1;
    *out = st[sp - 1];
    return 0;
}

/* ---- one step ---- */

enum { STEP_OK, STEP_END, STEP_BAD, STEP_UNSUPPORTED };

/* Apply a row: the caller's registers from the callee's. */
static int apply_row(const row *rw, const cie *ci, const mlz_unwind_regs *cur,
                     const bounds *b, mlz_unwind_regs *nx, uint64_t *bp_at)
{
    uint64_t cfa;
    int e;

    *bp_at = MLZ_UNWIND_BP_ELSEWHERE;
    if (rw->cfa_how == RULE_OFFSET) {
        unsigned r = rw->cfa_reg;
        if (r >= MLZ_UNWIND_NREGS || !(cur->valid & REG_BIT(r)))
            return STEP_BAD;
        cfa = cur->reg[r] + (uint64_t)rw->cfa_v;
    } else if (rw->cfa_how == RULE_EXPR) {
        e = eval_expr((const uint8_t *)(uintptr_t)rw->cfa_v, cur, b, 0, 0, &cfa);
        if (e < 0)
            return e == EXPR_BAD ? STEP_BAD : STEP_UNSUPPORTED;
    } else {
        return STEP_UNSUPPORTED;
    }

    /* Registers without a rule: callee-saved ones keep their value, caller-
     * saved ones were clobbered by the call. */
    memcpy(nx->reg, cur->reg, sizeof nx->reg);
    nx->valid = cur->valid & CALLEE_SAVED & ~rw->set;
    if (nx->valid & REG_BIT(MLZ_REG_RBP))
        *bp_at = MLZ_UNWIND_BP_KEPT;
    for (uint32_t m = rw->set; m; m &= m - 1) {
        unsigned r = (unsigned)__builtin_ctz(m);
        uint64_t v, addr;
        switch (rw->how[r]) {
        case RULE_SAME:
            if (!(cur->valid & REG_BIT(r)))
                continue;
            v = cur->reg[r];
            if (r == MLZ_REG_RBP)
                *bp_at = MLZ_UNWIND_BP_KEPT;
            break;
        case RULE_OFFSET:
            if (rd_stack(b, cfa + (uint64_t)rw->v[r], 8, &v) < 0)
                return STEP_BAD;
            if (r == MLZ_REG_RBP)
                *bp_at = cfa + (uint64_t)rw->v[r];
            break;
        case RULE_VAL_OFFSET:
            v = cfa + (uint64_t)rw->v[r];
            break;
        case RULE_REG:
            if (rw->src[r] >= MLZ_UNWIND_NREGS || !(cur->valid & REG_BIT(rw->src[r])))
                continue;
            v = cur->reg[rw->src[r]];
            break;
        case RULE_EXPR:
        case RULE_VAL_EXPR:
            e = eval_expr((const uint8_t *)(uintptr_t)rw->v[r], cur, b, 1, cfa, &addr);
            if (e < 0)
                return e == EXPR_BAD ? STEP_BAD : STEP_UNSUPPORTED;
            if (rw->how[r] == RULE_VAL_EXPR)
                v = addr;
            else if (rd_stack(b, addr, 8, &v) < 0)
                return STEP_BAD;
            break;
        default:                        /* RULE_UNDEF */
            continue;
        }
        nx->reg[r] = v;
        nx->valid |= REG_BIT(r);
    }
    if (!(rw->set & REG_BIT(MLZ_REG_RSP)) || rw->how[MLZ_REG_RSP] == RULE_SAME) {
        nx->reg[MLZ_REG_RSP] = cfa;     /* the CFA is the caller's sp, by definition */
        nx->valid |= REG_BIT(MLZ_REG_RSP);
    }
    if (!(nx->valid & REG_BIT(ci->ra)))
        return STEP_END;                /* undefined return address: outermost frame */
    nx->reg[MLZ_REG_RIP] = nx->reg[ci->ra];
    nx->valid |= REG_BIT(MLZ_REG_RIP);
    return STEP_OK;
}

/* DWARF register -> index in mcontext gregs. */
static const unsigned char greg_of[MLZ_UNWIND_NREGS] = {
    REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI, REG_RBP, REG_RSP,
    REG_R8, REG_R9, REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP,
};

void mlz_unwind_regs_from_ucontext(mlz_unwind_regs *r, const void *uc)
{
    const ucontext_t *u = uc;
    for (unsigned i = 0; i < MLZ_UNWIND_NREGS; i++)
        r->reg[i] = (uint64_t)u->uc_mcontext.gregs[greg_of[i]];
    r->valid = (1u << MLZ_UNWIND_NREGS) - 1;
}

/* mov $__NR_rt_sigreturn,%rax; syscall: __restore_rt in glibc and musl. */
static const uint8_t sigreturn_code[9] = { 0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05 };

static int sigreturn_step(const mlz_module *m, const mlz_unwind_regs *cur, const bounds *b,
                          mlz_unwind_regs *nx)
{
    uint64_t pc = cur->reg[MLZ_REG_RIP];

    /* Read code only inside a single executable segment. */
    if (m->nexec != 1 || pc < m->exec_start || pc > m->exec_end - sizeof sigreturn_code ||
        memcmp((const void *)(uintptr_t)pc, sigreturn_code, sizeof sigreturn_code) != 0)
        return STEP_UNSUPPORTED;
    /* The handler's return popped the restorer address: sp is the ucontext. */
    uint64_t gregs = cur->reg[MLZ_REG_RSP] + offsetof(ucontext_t, uc_mcontext.gregs);
    nx->valid = 0;
    for (unsigned i = 0; i < MLZ_UNWIND_NREGS; i++) {
        if (rd_stack(b, gregs + 8u * greg_of[i], 8, &nx->reg[i]) < 0)
            return STEP_BAD;
        nx->valid |= REG_BIT(i);
    }
    return STEP_OK;
}

/* A step by rbp: the frame record {saved rbp, return address} at rbp, the
 * caller's sp at rbp + 16. For frame-pointer modules, and where there is no
 * CFI if rbp looks like a record above sp. One bounds check covers the
 * record: sp is inside the bounds, so rbp at or above it and 16 bytes
 * below the top is too. */
static inline __attribute__((always_inline, no_sanitize_address)) int
fp_step(const mlz_unwind_regs *cur, const bounds *b, mlz_unwind_regs *nx)
{
    uint64_t fp = cur->reg[MLZ_REG_RBP], sp = cur->reg[MLZ_REG_RSP];

    if (!(cur->valid & REG_BIT(MLZ_REG_RBP)) || fp < sp || fp > b->hi - 16 || (fp & 7) ||
        fp - sp > MLZ_UNWIND_FP_MAX_GAP)
        return STEP_BAD;
    memcpy(&nx->reg[MLZ_REG_RBP], (const void *)(uintptr_t)fp, 8);
    memcpy(&nx->reg[MLZ_REG_RIP], (const void *)(uintptr_t)(fp + 8), 8);
    nx->reg[MLZ_REG_RSP] = fp + 16;
    nx->valid = REG_BIT(MLZ_REG_RBP) | REG_BIT(MLZ_REG_RIP) | REG_BIT(MLZ_REG_RSP);
    return STEP_OK;
}

static int pc_plausible(uint64_t pc)
{
    return pc >= MIN_PC && pc < USER_VA_END;
}

/* ---- the rule cache ---- */

_Static_assert((MLZ_UNWIND_CACHE_ENTRIES & (MLZ_UNWIND_CACHE_ENTRIES - 1)) == 0,
               "MLZ_UNWIND_CACHE_ENTRIES must be a power of two");

static const uint8_t cached_regs[6] = {
    MLZ_REG_RBX, MLZ_REG_RBP, MLZ_REG_R12, MLZ_REG_R13, MLZ_REG_R14, MLZ_REG_R15,
};

static mlz_unwind_cache_entry *cache_slot(mlz_unwind_cache *c, uint64_t pc)
{
    uint64_t h = (pc * 0x9e3779b97f4a7c15ull) >> (64 - __builtin_ctz(MLZ_UNWIND_CACHE_ENTRIES));
    return &c->e[h];
}

static int fits16(int64_t v)
{
    return v >= INT16_MIN && v <= INT16_MAX;
}

/* Store the row if it has the simple shape the entry can express. */
static void cache_fill(mlz_unwind_cache_entry *e, uint64_t look, const row *rw, const cie *ci)
{
    if (ci->ra != MLZ_REG_RIP || ci->signal || rw->cfa_how != RULE_OFFSET ||
        (rw->cfa_reg != MLZ_REG_RSP && rw->cfa_reg != MLZ_REG_RBP) ||
        rw->cfa_v < INT32_MIN || rw->cfa_v > INT32_MAX ||
        (rw->set & ~(CALLEE_SAVED | REG_BIT(MLZ_REG_RIP))) ||
        !(rw->set & REG_BIT(MLZ_REG_RIP)) || rw->how[MLZ_REG_RIP] != RULE_OFFSET ||
        !fits16(rw->v[MLZ_REG_RIP]))
        return;
    mlz_unwind_cache_entry t;
    memset(&t, 0, sizeof t);
    for (unsigned i = 0; i < 6; i++) {
        unsigned r = cached_regs[i];
        if (!(rw->set & REG_BIT(r)) || rw->how[r] == RULE_SAME)
            continue;
        if (rw->how[r] != RULE_OFFSET || rw->v[r] == 0 || !fits16(rw->v[r]))
            return;
        t.saved[i] = (int16_t)rw->v[r];
        t.saved_mask |= (uint8_t)(1u << i);
    }
    t.pc = look;
    t.cfa_off = (int32_t)rw->cfa_v;
    t.cfa_reg = rw->cfa_reg;
    t.ra_off = (int16_t)rw->v[MLZ_REG_RIP];
    int32_t lo = t.ra_off, hi = t.ra_off;
    for (unsigned i = 0; i < 6; i++)
        if (t.saved_mask & (1u << i)) {
            if (t.saved[i] < lo) lo = t.saved[i];
            if (t.saved[i] > hi) hi = t.saved[i];
        }
    if (!fits16(hi + 8))
        return;
    t.span_lo = (int16_t)lo;
    t.span_hi = (int16_t)(hi + 8);
    *e = t;
}

/* cfa_reg of an entry that says "the outermost frame: the walk ends here"
 * (every walk of a thread ends at the same place, e.g. clone3). */
#define CACHE_OUTERMOST 0xff

static void cache_fill_outermost(mlz_unwind_cache_entry *e, uint64_t look)
{
    mlz_unwind_cache_entry t;
    memset(&t, 0, sizeof t);
    t.pc = look;
    t.cfa_reg = CACHE_OUTERMOST;
    *e = t;
}

/* apply_row() for a cached row. One bounds check covers every read (the
 * entry's span): the same outcome as checking each, as any read outside
 * fails the step. */
__attribute__((no_sanitize_address)) static int cache_apply(const mlz_unwind_cache_entry *e,
                                                            const mlz_unwind_regs *cur,
                                                            const bounds *b, mlz_unwind_regs *nx,
                                                            uint64_t *bp_at)
{
    if (e->cfa_reg == CACHE_OUTERMOST)
        return STEP_END;
    if (!(cur->valid & REG_BIT(e->cfa_reg)))
        return STEP_BAD;
    uint64_t cfa = cur->reg[e->cfa_reg] + (uint64_t)(int64_t)e->cfa_off;
    uint64_t lo = cfa + (uint64_t)(int64_t)e->span_lo, hi = cfa + (uint64_t)(int64_t)e->span_hi;
    if (lo < b->lo || hi > b->hi || lo > hi)
        return STEP_BAD;
    for (unsigned i = 0; i < 6; i++)
        nx->reg[cached_regs[i]] = cur->reg[cached_regs[i]];
    nx->valid = cur->valid & CALLEE_SAVED;
    for (unsigned m = e->saved_mask; m; m &= m - 1) {
        unsigned i = (unsigned)__builtin_ctz(m);
        memcpy(&nx->reg[cached_regs[i]], (const void *)(uintptr_t)(cfa + (uint64_t)(int64_t)e->saved[i]), 8);
        nx->valid |= REG_BIT(cached_regs[i]);
    }
    *bp_at = e->saved_mask & 2u   /* cached_regs[1]: rbp */ ? cfa + (uint64_t)(int64_t)e->saved[1]
           : nx->valid & REG_BIT(MLZ_REG_RBP) ? MLZ_UNWIND_BP_KEPT : MLZ_UNWIND_BP_ELSEWHERE;
    memcpy(&nx->reg[MLZ_REG_RIP], (const void *)(uintptr_t)(cfa + (uint64_t)(int64_t)e->ra_off), 8);
    nx->reg[MLZ_REG_RSP] = cfa;
    nx->valid |= REG_BIT(MLZ_REG_RSP) | REG_BIT(MLZ_REG_RIP);
    return STEP_OK;
}

/* ---- the walk ---- */

enum { STEP_NO_MODULE = STEP_UNSUPPORTED + 1, STEP_NO_FDE };

typedef struct walker {
    const mlz_module *m;                /* last module: consecutive frames share one */
    mlz_unwind_cache *cache;            /* NULL: uncached */
    bounds b;
    cie ci;                             /* last CIE parsed */
    uint64_t bp_at;                     /* where the last step read rbp (mlz_unwind_frame) */
} walker;

/* A frame of a frame-pointer module the thread met (at a return address,
 * outside the module's code left to the CFI), stepped by rbp: no rule to
 * look up. The step leaves the other callee-saved registers unknown (the
 * frame may have saved them): a later frame whose CFA needs one ends the
 * walk. */
_Static_assert(MLZ_UNWIND_FP_MODULES == 2, "fp_module_step looks at two modules");

static inline __attribute__((always_inline)) int
fp_module_step(mlz_unwind_cache *c, const mlz_unwind_regs *cur, uint64_t look,
               const bounds *b, mlz_unwind_regs *nx)
{
    const mlz_unwind_fp_module *f = &c->fp[0];
    if (look - f->lo >= f->hi - f->lo) {
        f = &c->fp[1];
        if (look - f->lo >= f->hi - f->lo)
            return STEP_BAD;
    }
    const mlz_module *m = f->m;
    for (unsigned j = 0; j < m->ncfi; j++)
        if (look - m->cfi[j][0] < m->cfi[j][1] - m->cfi[j][0])
            return STEP_BAD;            /* not frame-pointer code: the rules say */
    if (fp_step(cur, b, nx) != STEP_OK)
        return STEP_BAD;
    c->fp_steps++;
    return STEP_OK;
}

static void fp_module_met(mlz_unwind_cache *c, const mlz_module *m)
{
    for (unsigned i = 0; i < MLZ_UNWIND_FP_MODULES; i++)
        if (c->fp[i].m == m)
            return;
    c->fp[c->fp_next++ % MLZ_UNWIND_FP_MODULES] = (mlz_unwind_fp_module){ m->exec_start, m->exec_end, m };
    c->filled = 1;
}

/* One frame: the caller's registers into *nx. exact: pc is not a return
 * address (look is pc itself, not pc - 1). *signal: the frame was a
 * signal frame, so the caller's pc is exact. */
static int step(walker *w, const mlz_unwind_regs *cur, uint64_t look, int exact,
                mlz_unwind_regs *nx, int *signal, int *sp_rule)
{
    mlz_unwind_cache_entry *ce = NULL;
    row rw;
    fde fd;
    int rc;

    *signal = 0;
    *sp_rule = 0;
    w->bp_at = MLZ_UNWIND_BP_ELSEWHERE;
    if (w->cache) {
        if (!exact && w->cache->fp_next && fp_module_step(w->cache, cur, look, &w->b, nx) == STEP_OK) {
            w->bp_at = cur->reg[MLZ_REG_RBP];
            return STEP_OK;
        }
        ce = cache_slot(w->cache, look);
        if (ce->pc == look) {
            w->cache->hits++;
            *sp_rule = ce->cfa_reg == MLZ_REG_RSP;
            return cache_apply(ce, cur, &w->b, nx, &w->bp_at);
        }
        w->cache->misses++;
    }
    if (!w->m || look < w->m->start || look >= w->m->end)
        w->m = mlz_modtab_find(look);
    if (!w->m)
        return STEP_NO_MODULE;
    if (w->cache && w->m->frame_pointers && look >= w->m->exec_start && look < w->m->exec_end) {
        fp_module_met(w->cache, w->m);
        if (!exact && fp_module_step(w->cache, cur, look, &w->b, nx) == STEP_OK) {
            w->bp_at = cur->reg[MLZ_REG_RBP];
            return STEP_OK;
        }
    }
    switch (find_fde(w->m, look, &w->ci, &fd)) {
    case FDE_FOUND:
        rw = w->ci.init;
        if (run_cfa(fd.insn, fd.end, fd.pc_begin, look, &w->ci, &rw, &w->ci.init, NULL) < 0)
            return STEP_UNSUPPORTED;
        rc = apply_row(&rw, &w->ci, cur, &w->b, nx, &w->bp_at);
        *signal = w->ci.signal;
        *sp_rule = rw.cfa_how == RULE_OFFSET && rw.cfa_reg == MLZ_REG_RSP;
        if (rc == STEP_OK && ce) {
            cache_fill(ce, look, &rw, &w->ci);
            w->cache->filled = 1;
        } else if (rc == STEP_END && ce && !w->ci.signal) {
            cache_fill_outermost(ce, look);
            w->cache->filled = 1;
        }
        return rc;
    case FDE_NONE:
        if (sigreturn_step(w->m, cur, &w->b, nx) == STEP_OK) {
            *signal = 1;
            return STEP_OK;
        }
        if (fp_step(cur, &w->b, nx) == STEP_OK) {
            COUNT(fp_fallback);
            w->bp_at = cur->reg[MLZ_REG_RBP];
            return STEP_OK;
        }
        return STEP_NO_FDE;
    default:
        return STEP_UNSUPPORTED;
    }
}

/* ---- the last walk's frames (mlz_unwind_cache.tail) ---- */

#define TAIL_BP_UNKNOWN 1u

static uint64_t frame_bp(const mlz_unwind_regs *r)
{
    return r->valid & REG_BIT(MLZ_REG_RBP) ? r->reg[MLZ_REG_RBP] : TAIL_BP_UNKNOWN;
}

/* Whether the frame at pc with this sp got pc from [sp - 8]: a signal
 * frame's pc comes from its context instead. */
__attribute__((no_sanitize_address)) static uint64_t ra_in_place(uint64_t pc, uint64_t sp, int exact,
                                                                 const bounds *b)
{
    uint64_t ra;
    if (exact || (sp & 7) || sp < b->lo + 8 || sp > b->hi)
        return 0;
    memcpy(&ra, (const void *)(uintptr_t)(sp - 8), 8);
    return ra == pc ? MLZ_UNWIND_TAIL_IN_PLACE : 0;
}

/* Frames from..n-1 of an earlier walk, each with its return address still
 * at its sp - 8 inside the bounds, and where a frame's CFA hangs on rbp
 * (no SP_RULE), its rbp proved: read again from where the walk read it
 * (bp_at), or kept from a frame whose rbp was. bp_ok: frame from - 1's rbp
 * is the one the walk saw. */
__attribute__((no_sanitize_address)) static int tail_in_place(const mlz_unwind_frame *t, unsigned from,
                                                              unsigned n, int bp_ok, const bounds *b)
{
    for (unsigned m = from; m < n; m++) {
        uint64_t sp = t[m].sp & ~(uint64_t)7, ra, at = t[m].bp_at, bp;
        if ((!(t[m - 1].sp & MLZ_UNWIND_TAIL_SP_RULE) && !bp_ok) ||
            !(t[m].sp & MLZ_UNWIND_TAIL_IN_PLACE) || sp < b->lo + 8 || sp > b->hi)
            return 0;
        memcpy(&ra, (const void *)(uintptr_t)(sp - 8), 8);
        if (ra != t[m].pc)
            return 0;
        if (at == MLZ_UNWIND_BP_ELSEWHERE || (at != MLZ_UNWIND_BP_KEPT && ((at & 7) || at < b->lo || at > b->hi - 8))) {
            bp_ok = 0;
        } else if (at != MLZ_UNWIND_BP_KEPT) {
            memcpy(&bp, (const void *)(uintptr_t)at, 8);
            bp_ok = bp == t[m].bp;
        }
    }
    return 1;
}

/* Whether a walk that has n frames, the last at (pc, sp, bp), may end with
 * the saved walk's frames after its frame j (on frames in all, at most max
 * in the walk): frame j is this one (the same pc and sp, and rbp unless its
 * CFA is sp + offset) and every frame after it is still in place. */
static inline __attribute__((always_inline)) int tail_meets(const mlz_unwind_frame *ot, unsigned j,
                                                          unsigned on, uint64_t pc, uint64_t sp,
                                                          uint64_t bp, unsigned n, unsigned max,
                                                          const bounds *b)
{
    int bp_ok = bp != TAIL_BP_UNKNOWN && ot[j].bp == bp;
    return j < on && !(sp & 7) && (ot[j].sp & ~(uint64_t)7) == sp && ot[j].pc == pc &&
           ((ot[j].sp & MLZ_UNWIND_TAIL_SP_RULE) || bp_ok) && n + (on - j - 1) <= max &&
           tail_in_place(ot, j + 1, on, bp_ok, b);
}

/* The whole saved walk, when a walk would start at its first frame: pcs
 * filled, its length returned (0: walk instead). Nothing is saved anew:
 * the frames are the same. The common case of exact mode, a loop
 * allocating from one place. */
static unsigned tail_whole(mlz_unwind_cache *c, const mlz_unwind_regs *r, const bounds *b,
                           uint64_t *pcs, unsigned max)
{
    c->same_as_saved = 0;
    unsigned on = c->tail_n;
    const mlz_unwind_frame *ot = c->tail[c->tail_cur & 1];
    if (on > MLZ_UNWIND_TAIL || c->generation != mlz_modtab_generation() ||
        (~r->valid & (REG_BIT(MLZ_REG_RIP) | REG_BIT(MLZ_REG_RSP))) ||
        !tail_meets(ot, 0, on, r->reg[MLZ_REG_RIP], r->reg[MLZ_REG_RSP], frame_bp(r), 1, max, b))
        return 0;
    for (unsigned i = 0; i < on; i++)
        pcs[i] = ot[i].pc;
    c->tail_hits++;
    c->same_as_saved = 1;
    return on;
}

/* The walk. cur: a register state at pc cur->rip, exact if that pc is not a
 * return address. Frames are recorded before they are unwound. */
static unsigned dwarf_walk(uint64_t *pcs, unsigned max, unsigned skip, mlz_unwind_regs *cur,
                           int exact, bounds b, mlz_unwind_cache *cache)
{
    walker w;
    mlz_unwind_regs spare, *nx = &spare;   /* cur and nx swap roles each frame */
    unsigned n = 0;

    COUNT_USUAL(walks);
    w.m = NULL;
    w.cache = cache;
    w.b = b;
    w.ci.addr = NULL;
    if (!(cur->valid & REG_BIT(MLZ_REG_RIP)) || !(cur->valid & REG_BIT(MLZ_REG_RSP)) ||
        b.hi < b.lo + 8) {
        COUNT(bad_frame);
        return 0;
    }
    /* The last complete walk (ot, on frames) and this one (nt). */
    const mlz_unwind_frame *ot = NULL;
    mlz_unwind_frame *nt = NULL;
    unsigned on = 0, oj = 0;
    int complete = 0;
    uint64_t bp_at = MLZ_UNWIND_BP_ELSEWHERE;   /* of the frame at cur: the register, not memory */
    if (cache) {
        uint64_t gen = mlz_modtab_generation();
        if (cache->generation != gen) {
            /* Not written since it was last emptied (a fresh cache): it is
             * all zero, and clearing it would only fault its pages in (a
             * thread's first walk made 16 KiB of each thread's cache
             * resident). */
            if (cache->filled) {
                memset(cache->e, 0, sizeof cache->e);
                memset(cache->fp, 0, sizeof cache->fp);
                cache->filled = 0;
            }
            cache->fp_next = 0;
            cache->generation = gen;
            cache->tail_n = 0;
            cache->tail_version++;
        }
        cache->same_as_saved = 0;
        ot = cache->tail[cache->tail_cur & 1];
        nt = cache->tail[(cache->tail_cur & 1) ^ 1];
        on = cache->tail_n <= MLZ_UNWIND_TAIL ? cache->tail_n : 0;
    }
    for (;;) {
        uint64_t pc = cur->reg[MLZ_REG_RIP];
        int signal;
        if (skip) {
            skip--;
        } else {
            pcs[n++] = pc;
            if (nt && n <= MLZ_UNWIND_TAIL) {
                uint64_t sp = cur->reg[MLZ_REG_RSP], bp = frame_bp(cur);
                nt[n - 1] = (mlz_unwind_frame){ pc, sp | ra_in_place(pc, sp, exact, &b), bp, bp_at };
                /* The last walk passed this frame too? Then beyond it, its
                 * frames are this walk's, if still in place. */
                while (oj < on && (ot[oj].sp & ~(uint64_t)7) < sp)
                    oj++;
                if (tail_meets(ot, oj, on, pc, sp, bp, n, max, &b)) {
                    nt[n - 1].sp |= ot[oj].sp & MLZ_UNWIND_TAIL_SP_RULE;    /* same pc, same rule */
                    cache->same_as_saved = n == 1 && oj == 0;   /* met at both walks' first frame */
                    for (unsigned m = oj + 1; m < on; m++) {
                        nt[n] = ot[m];
                        pcs[n++] = ot[m].pc;
                    }
                    cache->tail_hits++;
                    complete = 1;
                    break;
                }
            }
            if (n >= max) {
                COUNT_USUAL(full);
                break;
            }
        }

        int sp_rule;
        int rc = step(&w, cur, exact ? pc : pc - 1, exact, nx, &signal, &sp_rule);
        if (nt && n && n <= MLZ_UNWIND_TAIL && sp_rule && !signal)
            nt[n - 1].sp |= MLZ_UNWIND_TAIL_SP_RULE;
        if (rc != STEP_OK) {
            complete = rc == STEP_END;
            switch (rc) {
            case STEP_END: COUNT_USUAL(outermost); break;
            case STEP_BAD: COUNT(bad_frame); break;
            case STEP_NO_MODULE: COUNT(no_module); break;
            case STEP_NO_FDE: COUNT(no_fde); break;
            default: COUNT(unsupported); break;
            }
            break;
        }
        if (signal)
            COUNT(signal_frames);
        uint64_t npc = nx->reg[MLZ_REG_RIP], nsp = nx->reg[MLZ_REG_RSP];
        if (npc == 0) {                 /* some runtimes end their chains this way */
            COUNT_USUAL(outermost);
            complete = 1;
            break;
        }
        if (!pc_plausible(npc) || !(nx->valid & REG_BIT(MLZ_REG_RSP))) {
            COUNT(bad_frame);
            break;
        }
        if (nsp <= cur->reg[MLZ_REG_RSP] || nsp > b.hi) {
            /* Leaving this stack (sigaltstack, a coroutine): the interrupted pc
             * itself is still worth keeping, its frame is not reachable. */
            if (signal && !skip && n < max)
                pcs[n++] = npc;
            COUNT(stack_switch);
            break;
        }
        mlz_unwind_regs *t = cur;
        cur = nx;
        nx = t;
        exact = signal;
        bp_at = w.bp_at;
    }
    /* Only a walk that reached the outermost frame is kept as the shadow:
     * a tail taken from it is then complete as well. */
    if (nt && complete && n <= MLZ_UNWIND_TAIL) {
        cache->tail_cur = (cache->tail_cur & 1) ^ 1;
        cache->tail_n = n;
        if (!cache->same_as_saved)
            cache->tail_version++;
    }
    return n;
}

/* ---- entry points ---- */

/* Stores rbx, rbp, r12-r15, the caller's sp after return and the return
 * address: the caller's state right after this call, which its own CFI
 * describes. A leaf that never touches the stack, so it needs no CFI. */
__asm__(".text\n"
        ".globl mlz__unwind_getcontext\n"
        ".hidden mlz__unwind_getcontext\n"
        ".type mlz__unwind_getcontext,@function\n"
        ".p2align 4\n"
        "mlz__unwind_getcontext:\n"
        "\tmovq %rbx, 24(%rdi)\n"
        "\tmovq %rbp, 48(%rdi)\n"
        "\tmovq %r12, 96(%rdi)\n"
        "\tmovq %r13, 104(%rdi)\n"
        "\tmovq %r14, 112(%rdi)\n"
        "\tmovq %r15, 120(%rdi)\n"
        "\tleaq 8(%rsp), %rax\n"
        "\tmovq %rax, 56(%rdi)\n"
        "\tmovq (%rsp), %rax\n"
        "\tmovq %rax, 128(%rdi)\n"
        "\tret\n"
        ".size mlz__unwind_getcontext, .-mlz__unwind_getcontext\n");
__attribute__((visibility("hidden"))) void mlz__unwind_getcontext(mlz_unwind_regs *r);

_Static_assert(offsetof(mlz_unwind_regs, reg) == 0 && MLZ_REG_RBX == 3 && MLZ_REG_RBP == 6 &&
               MLZ_REG_RSP == 7 && MLZ_REG_R12 == 12 && MLZ_REG_RIP == 16,
               "mlz__unwind_getcontext hard-codes these offsets");

#define GETCONTEXT_VALID (CALLEE_SAVED | REG_BIT(MLZ_REG_RSP) | REG_BIT(MLZ_REG_RIP))

/* The state is captured in this frame and the walk reads it from below, so
 * the asm keeps the call to dwarf_walk from becoming a tail call. The first
 * frame (ours) is skipped: pcs[0] is our return address. */
__attribute__((noinline)) unsigned mlz_unwind_dwarf_bounded(uint64_t *pcs, unsigned max,
                                                            unsigned skip, uint64_t stack_hi)
{
    mlz_unwind_regs r;
    if (max == 0)
        return 0;
    mlz__unwind_getcontext(&r);
    r.valid = GETCONTEXT_VALID;
    bounds b = { r.reg[MLZ_REG_RSP], stack_hi };
    unsigned n = dwarf_walk(pcs, max, skip + 1, &r, 0, b, NULL);
    __asm__ volatile("" : "+r"(n) : : "memory");
    return n;
}

__attribute__((noinline)) unsigned mlz_unwind_dwarf(uint64_t *pcs, unsigned max, unsigned skip)
{
    mlz_unwind_regs r;
    uint64_t lo, hi;
    if (max == 0 || mlz_stack_bounds(&lo, &hi) < 0)
        return 0;
    mlz__unwind_getcontext(&r);
    r.valid = GETCONTEXT_VALID;
    bounds b = { r.reg[MLZ_REG_RSP], hi };
    unsigned n = dwarf_walk(pcs, max, skip + 1, &r, 0, b, NULL);
    __asm__ volatile("" : "+r"(n) : : "memory");
    return n;
}

__attribute__((noinline)) unsigned mlz_unwind_dwarf_cached(uint64_t *pcs, unsigned max,
                                                           unsigned skip, uint64_t stack_hi,
                                                           mlz_unwind_cache *cache)
{
    mlz_unwind_regs r;
    if (max == 0)
        return 0;
    mlz__unwind_getcontext(&r);
    r.valid = GETCONTEXT_VALID;
    bounds b = { r.reg[MLZ_REG_RSP], stack_hi };
    unsigned n = dwarf_walk(pcs, max, skip + 1, &r, 0, b, cache);
    __asm__ volatile("" : "+r"(n) : : "memory");
    return n;
}

unsigned mlz_unwind_dwarf_resume(uint64_t *pcs, unsigned max, const mlz_unwind_regs *regs,
                                 uint64_t stack_lo, uint64_t stack_hi, mlz_unwind_cache *cache)
{
    if (max == 0)
        return 0;
    bounds b = { stack_lo, stack_hi };
    unsigned n;
    if (cache && b.hi >= b.lo + 8 && (n = tail_whole(cache, regs, &b, pcs, max)))
        return n;
    mlz_unwind_regs r = *regs;
    return dwarf_walk(pcs, max, 0, &r, 0, b, cache);
}

unsigned mlz_unwind_dwarf_from(uint64_t *pcs, unsigned max, const mlz_unwind_regs *regs,
                               uint64_t stack_lo, uint64_t stack_hi)
{
    mlz_unwind_regs r = *regs;
    if (max == 0)
        return 0;
    bounds b = { stack_lo, stack_hi };
    return dwarf_walk(pcs, max, 0, &r, 1, b, NULL);
}
