/*
 * relocate.c - move the first instructions of a function into a trampoline.
 *
 * The jump we write at the entry overwrites whole instructions; they are
 * re-encoded at the trampoline's address, followed by a jump back to the
 * first instruction not moved. What changes when code moves:
 *  - RIP-relative memory operands (lea rax,[rip+x], mov eax,[rip+x]): the
 *    32-bit displacement is recomputed for the new address;
 *  - relative branches: short forms (jmp rel8, jcc rel8) cannot reach the
 *    old targets from the trampoline, so every relative jmp/jcc/call is
 *    re-emitted with a 32-bit displacement, or as an absolute indirect jump
 *    when even that does not reach;
 *  - loop/jrcxz have no long form: refused.
 * Refused as well: an entry that is already a jump (someone's hook, a PLT-
 * like thunk), a function that returns or jumps away before 5 bytes, and any
 * direct branch in the function whose target falls inside the moved bytes
 * (it would land in the middle of our jump). Jump tables and computed
 * branches cannot be checked this way; allocator entry points do not branch
 * back into their first five bytes in practice.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "capstone_dl.h"
#include "got_internal.h"
#include "inline.h"

#define JMP_LEN 5
#define SCAN_UNKNOWN 64   /* bytes examined when the function's size is unknown */

__attribute__((format(printf, 2, 3)))
static int refuse(mlz_inline *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->why, sizeof h->why, fmt, ap);
    va_end(ap);
    return -1;
}

/* Raw classification of one instruction's bytes (legacy and REX prefixes
 * skipped: branch hints, bnd, rex.w). */
enum { K_OTHER, K_JMP, K_JCC, K_CALL, K_LOOP, K_END };

static int kind_of(const uint8_t *b, size_t n, size_t *op)
{
    size_t i = 0;
    while (i < n && (b[i] == 0x66 || b[i] == 0x67 || b[i] == 0xf2 || b[i] == 0xf3 || b[i] == 0x2e ||
                     b[i] == 0x3e || b[i] == 0x26 || b[i] == 0x36 || b[i] == 0x64 || b[i] == 0x65 ||
                     (b[i] & 0xf0) == 0x40))
        i++;
    *op = i;
    if (i >= n) return K_OTHER;
    uint8_t o = b[i];
    if (o == 0xe9 || o == 0xeb) return K_JMP;
    if (o == 0xe8) return K_CALL;
    if (o >= 0x70 && o <= 0x7f) return K_JCC;
    if (o == 0x0f && i + 1 < n && (b[i + 1] & 0xf0) == 0x80) return K_JCC;
    if (o >= 0xe0 && o <= 0xe3) return K_LOOP;
    if (o == 0xc3 || o == 0xc2 || o == 0xcc || o == 0xf4) return K_END;
    if (o == 0x0f && i + 1 < n && b[i + 1] == 0x0b) return K_END;                  /* ud2 */
    if (o == 0xff && i + 1 < n && ((b[i + 1] >> 3) & 7) >= 4 && ((b[i + 1] >> 3) & 7) <= 5)
        return K_END;                                                             /* jmp indirect */
    return K_OTHER;
}

/* Target of a relative branch (kind K_JMP/K_JCC/K_CALL/K_LOOP). */
static uintptr_t branch_target(const uint8_t *b, size_t n, size_t op, uintptr_t addr)
{
    uint8_t o = b[op];
    if (o == 0xeb || (o >= 0x70 && o <= 0x7f) || (o >= 0xe0 && o <= 0xe3))
        return addr + n + (intptr_t)(int8_t)b[n - 1];
    int32_t rel;
    memcpy(&rel, b + n - 4, 4);
    return addr + n + (intptr_t)rel;
}

static int fits32(intptr_t v) { return v >= INT32_MIN && v <= INT32_MAX; }

struct out { uint8_t *p; size_t n, cap; int over; };

static void put(struct out *o, const void *b, size_t n)
{
    if (o->n + n > o->cap) { o->over = 1; return; }
    memcpy(o->p + o->n, b, n);
    o->n += n;
}

/* An unconditional jump (or call) from address `from` (where the
 * instruction starts) to `to`: rel32 if in reach, else through a 64-bit
 * literal (jmp/call *0(%rip)). */
static void emit_jmp(struct out *o, uintptr_t from, uintptr_t to, int call)
{
    intptr_t d = (intptr_t)(to - (from + 5));
    if (fits32(d)) {
        uint8_t b[5] = { call ? 0xe8 : 0xe9 };
        int32_t r = (int32_t)d;
        memcpy(b + 1, &r, 4);
        put(o, b, 5);
    } else if (call) {
        /* call *2(%rip); jmp +8; .quad to */
        uint8_t b[16] = { 0xff, 0x15, 0x02, 0, 0, 0, 0xeb, 0x08 };
        memcpy(b + 8, &to, 8);
        put(o, b, 16);
    } else {
        uint8_t b[14] = { 0xff, 0x25, 0, 0, 0, 0 };
        memcpy(b + 6, &to, 8);
        put(o, b, 14);
    }
}

static void emit_jcc(struct out *o, uintptr_t from, uintptr_t to, uint8_t cc)
{
    intptr_t d = (intptr_t)(to - (from + 6));
    if (fits32(d)) {
        uint8_t b[6] = { 0x0f, (uint8_t)(0x80 | cc) };
        int32_t r = (int32_t)d;
        memcpy(b + 2, &r, 4);
        put(o, b, 6);
    } else {
        /* j!cc over an absolute jump */
        uint8_t b[2] = { (uint8_t)(0x70 | (cc ^ 1)), 14 };
        put(o, b, 2);
        emit_jmp(o, from + 2, to, 0);
    }
}

/* Every direct branch of the function must land outside (at, at+len):
 * one landing on `at` itself reaches our jump, which is fine. */
static int check_branches_in(mlz__cs *cs, const uint8_t *code, size_t size, uintptr_t fn,
                             uintptr_t at, size_t len, mlz_inline *h)
{
    const uint8_t *p = code;
    size_t left = size;
    uint64_t addr = fn;
    while (left > 0) {
        if (!cs->disasm_iter(cs->h, &p, &left, &addr, cs->insn)) {
            p++, left--, addr++;
            continue;
        }
        size_t op;
        int k = kind_of(cs->insn->bytes, cs->insn->size, &op);
        if (k != K_JMP && k != K_JCC && k != K_CALL && k != K_LOOP) continue;
        uintptr_t t = branch_target(cs->insn->bytes, cs->insn->size, op, (uintptr_t)cs->insn->address);
        if (t > at && t < at + len)
            return refuse(h, "a branch at +%#lx targets +%#lx, inside the %zu bytes the jump overwrites",
                          (unsigned long)(cs->insn->address - fn), (unsigned long)(t - fn), len);
    }
    return 0;
}

int mlz__inline_relocate(mlz__cs *cs, const uint8_t *code, size_t code_size, uintptr_t fn,
                         uintptr_t tramp, uint8_t *buf, size_t cap, mlz_inline *h)
{
    size_t size = code_size ? code_size : SCAN_UNKNOWN;
    struct out o = { buf, 0, cap, 0 };
    h->why[0] = 0;
    h->rip_fixups = h->branch_fixups = 0;
    size_t start = 0;
    /* CET: keep endbr64 where it is (an indirect call must land on it);
     * the trampoline gets its own. */
    static const uint8_t endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };
    if (size >= 4 && memcmp(code, endbr64, 4) == 0) {
        start = 4;
        put(&o, endbr64, 4);
    }
    uintptr_t at = fn + start;
    const uint8_t *p = code + start;
    size_t left = size - start;
    uint64_t addr = at;
    size_t len = 0;
    while (len < JMP_LEN) {
        if (left == 0)
            return refuse(h, "function too short: %zu bytes after the entry, the jump needs %d", len, JMP_LEN);
        const uint8_t *ip = p;
        if (!cs->disasm_iter(cs->h, &p, &left, &addr, cs->insn))
            return refuse(h, "undecodable instruction at +%#zx", start + len);
        cs_insn *in = cs->insn;
        size_t op;
        int k = kind_of(in->bytes, in->size, &op);
        uintptr_t here = (uintptr_t)in->address, now = tramp + o.n;
        if (len == 0 && k == K_JMP)
            return refuse(h, "the entry is already a jump (hooked by another tool, or a thunk)");
        if (k == K_LOOP) return refuse(h, "loop/jrcxz at +%#zx has no long form to relocate", start + len);
        if (k == K_END)
            return refuse(h, "function too short: it ends after %zu bytes, the jump needs %d", len + in->size, JMP_LEN);
        if (k == K_JMP || k == K_JCC || k == K_CALL) {
            uintptr_t t = branch_target(in->bytes, in->size, op, here);
            if (k == K_JMP) {
                /* an unconditional jump inside the range ends the code we move */
                emit_jmp(&o, now, t, 0);
                len += in->size;
                if (len < JMP_LEN)
                    return refuse(h, "function too short: it jumps away after %zu bytes", len);
                h->branch_fixups++;
                break;
            }
            if (k == K_CALL) emit_jmp(&o, now, t, 1);
            else emit_jcc(&o, now, t, (uint8_t)((in->bytes[op] == 0x0f ? in->bytes[op + 1] : in->bytes[op]) & 0xf));
            h->branch_fixups++;
        } else {
            /* copy; fix a RIP-relative operand */
            uint8_t ib[16];
            memcpy(ib, ip, in->size);
            cs_x86 *x = &in->detail->x86;
            for (uint8_t i = 0; i < x->op_count; i++) {
                if (x->operands[i].type != X86_OP_MEM || x->operands[i].mem.base != X86_REG_RIP) continue;
                if (x->encoding.disp_offset == 0 || x->encoding.disp_size != 4)
                    return refuse(h, "RIP-relative operand at +%#zx without a 32-bit displacement", start + len);
                uintptr_t abs = here + in->size + (intptr_t)x->operands[i].mem.disp;
                intptr_t nd = (intptr_t)(abs - (now + in->size));
                if (!fits32(nd))
                    return refuse(h, "RIP-relative operand at +%#zx out of the trampoline's reach", start + len);
                int32_t d32 = (int32_t)nd;
                memcpy(ib + x->encoding.disp_offset, &d32, 4);
                h->rip_fixups++;
            }
            put(&o, ib, in->size);
        }
        len += in->size;
    }
    if (len > MLZ_INLINE_MAX_PATCH) return refuse(h, "instructions too long to move (%zu bytes)", len);
    /* back to the first instruction not moved (unless we ended on a jmp) */
    size_t op;
    uint8_t last_kind = (uint8_t)kind_of(cs->insn->bytes, cs->insn->size, &op);
    if (last_kind != K_JMP) emit_jmp(&o, tramp + o.n, at + len, 0);
    if (o.over) return refuse(h, "trampoline larger than its %zu bytes", cap);
    if (check_branches_in(cs, code, size, fn, at, len, h)) return -1;
    h->fn = fn;
    h->at = at;
    h->len = (uint8_t)len;
    memcpy(h->orig, code + start, len);
    return (int)o.n;
}
