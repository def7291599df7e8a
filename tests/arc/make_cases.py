#!/usr/bin/env python3
"""make_cases.py DIR - hand-made .arc streams, one per rule of the seed
(docs/FORMAT.md "Heap dumps"), plus valid ones using every allowance.
Writes DIR/NAME.arc and prints one line per file: "NAME RULE OFFSET" for a
file that breaks RULE first at byte OFFSET, "NAME ok" for a valid one."""
import os
import struct
import sys

BASE = 1 << 42


def ident(cls, slot):
    """Id of slot `slot` in offset-bit class 5 + cls."""
    return BASE | (cls << 37) | (slot << (5 + cls))


def cls_of(size):
    return max(5, (size - 1).bit_length()) - 5


def hdr(oid, size, fwd=False, extra=0):
    return struct.pack("<Q", (oid + size - 1) | extra | ((1 << 63) if fwd else 0))


def obj(oid, size, words=(), tagged=(), bitmap=None, extra=0):
    """A full declaration; words: u64 values at the start of data."""
    nbits = size // 8
    bm = bytearray((nbits + 7) // 8)
    for w in tagged:
        bm[w // 8] |= 1 << (w % 8)
    if bitmap is not None:
        bm = bytearray(bitmap)
    data = bytearray(size)
    for i, v in enumerate(words):
        struct.pack_into("<Q", data, 8 * i, v)
    return hdr(oid, size, extra=extra) + bytes(bm) + bytes(data)


A = ident(0, 0)            # 32-byte class, slot 0
B = ident(0, 1)
C = ident(1, 0)            # 64-byte class
cases = []


def case(name, expect, parts):
    cases.append((name, expect, b"".join(parts)))


def at(parts, i):
    return sum(len(p) for p in parts[:i])


# Valid: forward declarations, interior, weak, null and self pointers,
# sizes that are not multiples of 8 or 64 (the bitmap-length decision).
case("ok_minimal", "ok", [obj(A, 8)])
case("ok_forward", "ok", [hdr(A, 16, fwd=True), hdr(B, 24, fwd=True),
                          obj(A, 16, [B + 4, 0], tagged=[0, 1]), obj(B, 24, [A | (1 << 63), B, A + 15], tagged=[0, 1, 2])])
D = ident(2, 0)            # 128-byte class: a 65-byte object has 8 whole words, a 1-byte bitmap
case("ok_odd_sizes", "ok", [hdr(A, 13, fwd=True), hdr(D, 65, fwd=True),
                            obj(A, 13, [D + 64], tagged=[0]), obj(D, 65, [A + 12] + [0] * 7, tagged=[0, 7]),
                            obj(B, 8, [D + 1], tagged=[0])])
case("ok_untagged_garbage", "ok", [obj(A, 16, [0xdeadbeef, 1 << 63])])

# Each rule broken once.
p = [obj(A, 8), b"\x01\x02\x03\x04\x05"]
case("truncated_header", ("truncated", at(p, 1)), p)
p = [obj(A, 32)[:-3]]
case("truncated_data", ("truncated", 0), p)
p = [obj(A, 8), hdr(B, 8, fwd=True, extra=1 << 50), obj(B, 8)]
case("unused_bits", ("unused-bits", at(p, 1)), p)
p = [struct.pack("<Q", (A & ~BASE) + 7) + bytes(9)]
case("class_bit", ("class-bit", 0), p)
p = [obj(A, 8), obj(ident(1, 0), 8)]          # 8 bytes in the 64-byte class
case("alignment", ("alignment", at(p, 1)), p)
p = [obj(A, 16, bitmap=[0b100])]
case("bitmap_padding", ("bitmap-padding", 8), p)
# Slots of one class are disjoint and classes live in separate regions, so
# only one id declared with two sizes can overlap.
p = [obj(A, 16), obj(A, 24)]
case("overlap", ("overlap", at(p, 1)), p)
p = [obj(A, 8), obj(A, 8)]
case("declared_once", ("declared-once", at(p, 1)), p)
p = [hdr(A, 8, fwd=True), hdr(A, 8, fwd=True), obj(A, 8)]
case("forward_once", ("forward-once", at(p, 1)), p)
p = [obj(A, 8), hdr(A, 8, fwd=True)]
case("forward_after", ("forward-once", at(p, 1)), p)
p = [hdr(B, 8, fwd=True), obj(A, 8)]
case("undeclared", ("undeclared", 0), p)
p = [obj(A, 16, [C + 3], tagged=[0])]
case("pointer_range", ("pointer-range", 8 + 1), p)
p = [obj(A, 8, [B], tagged=[0]), obj(B, 8)]
case("declared_later", ("declared-before-referenced", 8 + 1), p)
p = [obj(A, 8, [A + 8], tagged=[0])]           # one past the end is outside
case("pointer_past_end", ("pointer-range", 8 + 1), p)
case("empty", ("empty", 0), [b""])

os.makedirs(sys.argv[1], exist_ok=True)
for name, expect, data in cases:
    with open(os.path.join(sys.argv[1], name + ".arc"), "wb") as f:
        f.write(data)
    print(name, "ok" if expect == "ok" else f"{expect[0]} {expect[1]}")
