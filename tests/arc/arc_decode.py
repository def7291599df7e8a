#!/usr/bin/env python3
"""arc_decode.py - an independent reader of the Arcmem .arc stream, written
from the seed (docs/FORMAT.md "Heap dumps"), not from memlyze's writer.

    arc_decode.py FILE.arc            prints a JSON summary, exit 0
    on a rule violation: prints "invalid: RULE at byte N: why", exit 1

The summary: objects (id, size, offset, forward-declared or not), the root
(the first element's object), and reachability from the root over strong
(bit 63 clear) tagged words: unreachable object ids and their bytes.
Bitmap length: one bit per whole 64-bit word, size // 8 bits, packed into
ceil((size // 8) / 8) bytes, least significant bit first.
"""
import json
import struct
import sys


class Invalid(Exception):
    def __init__(self, rule, offset, why):
        super().__init__(f"invalid: {rule} at byte {offset}: {why}")
        self.rule, self.offset = rule, offset


def decode(buf):
    errors = []  # (offset, rule, why): the lowest offset wins

    def bad(off, rule, why):
        errors.append((off, rule, why))

    decls = []  # (offset, id, size, forward)
    bodies = {}  # offset -> (bitmap, data, data_offset)
    pos = 0
    while pos < len(buf):
        if len(buf) - pos < 8:
            bad(pos, "truncated", "partial header")
            break
        (h,) = struct.unpack_from("<Q", buf, pos)
        forward = h >> 63
        p = h & ((1 << 48) - 1)
        if (h >> 48) & 0x7FFF:
            bad(pos, "unused-bits", "bits 48..62 set")
        if not (h >> 42) & 1:
            bad(pos, "class-bit", "bit 42 clear")
        c = (p >> 37) & 31
        oid = p & ~((32 << c) - 1)
        size = p - oid + 1
        need = max(5, (size - 1).bit_length())
        if need != 5 + c:
            bad(pos, "alignment", f"offset bits {5 + c}, size {size} needs {need}")
        decls.append((pos, oid, size, forward))
        start = pos
        pos += 8
        if forward:
            continue
        nb = (size // 8 + 7) // 8
        if len(buf) - pos < nb + size:
            bad(start, "truncated", "object runs past the end")
            break
        bitmap = buf[pos:pos + nb]
        words = size // 8
        if words % 8 and bitmap[-1] >> (words % 8):
            bad(pos + nb - 1, "bitmap-padding", "bits beyond the words")
        bodies[start] = (bitmap, buf[pos + nb:pos + nb + size], pos + nb)
        pos += nb + size
    if not decls:
        raise Invalid("empty", 0, "no root")
    if any(e[1] == "truncated" for e in errors):  # nothing after a cut can be checked
        o, r, w = min(errors, key=lambda e: e[0])
        raise Invalid(r, o, w)

    # Declarations per object; overlaps between different objects.
    objs = {}  # (id, size) -> {"full": off, "fwd": off}
    for off, oid, size, fwd in decls:
        o = objs.setdefault((oid, size), {"full": None, "fwd": None})
        if fwd:
            if o["fwd"] is not None or o["full"] is not None:
                bad(off, "forward-once", "second forward declaration or after the declaration")
            else:
                o["fwd"] = off
        else:
            if o["full"] is not None:
                bad(off, "declared-once", "declared twice")
            else:
                o["full"] = off
    ranges = sorted(objs)
    for (oid, size), o in objs.items():
        if o["full"] is None:
            bad(o["fwd"], "undeclared", "forward-declared, never declared")
    first = {k: min(x for x in (v["full"], v["fwd"]) if x is not None) for k, v in objs.items()}
    end, end_key = 0, None
    for k in ranges:  # sorted by id: compare with the farthest-reaching earlier range
        if end_key is not None and k[0] < end:
            bad(max(first[k], first[end_key]), "overlap", "ranges overlap")
        if k[0] + k[1] > end:
            end, end_key = k[0] + k[1], k

    full = [k for k in ranges if objs[k]["full"] is not None]

    def find(v):
        lo, hi = 0, len(full)
        while lo < hi:
            mid = (lo + hi) // 2
            if full[mid][0] <= v:
                lo = mid + 1
            else:
                hi = mid
        if lo and v - full[lo - 1][0] < full[lo - 1][1]:
            return full[lo - 1]
        return None

    edges = {}
    for k in full:
        off = objs[k]["full"]
        bitmap, data, doff = bodies[off]
        out = []
        for w in range(k[1] // 8):
            if not (bitmap[w // 8] >> (w % 8)) & 1:
                continue
            (v,) = struct.unpack_from("<Q", data, 8 * w)
            target = v & ~(1 << 63)
            if target == 0:
                continue
            t = find(target)
            if t is None:
                bad(doff + 8 * w, "pointer-range", f"{v:#x} outside every object")
                continue
            if first[t] > off:
                bad(doff + 8 * w, "declared-before-referenced", "target declared later")
            if not v >> 63:
                out.append(t)
        edges[k] = out
    if errors:  # the first found at the lowest offset
        o, r, w = min(errors, key=lambda e: e[0])
        raise Invalid(r, o, w)

    root = (decls[0][1], decls[0][2])
    seen, todo = {root}, [root]
    while todo:
        for t in edges[todo.pop()]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    unreachable = [k for k in full if k not in seen]
    return {
        "objects": len(full),
        "forward_declared": sum(1 for k in full if objs[k]["fwd"] is not None),
        "root": {"id": root[0], "size": root[1]},
        "unreachable": len(unreachable),
        "unreachable_bytes": sum(k[1] for k in unreachable),
        "tagged_edges": sum(len(v) for v in edges.values()),
    }


def main():
    if len(sys.argv) != 2:
        print("usage: arc_decode.py FILE.arc", file=sys.stderr)
        return 2
    buf = open(sys.argv[1], "rb").read()
    try:
        print(json.dumps(decode(buf)))
    except Invalid as e:
        print(e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
