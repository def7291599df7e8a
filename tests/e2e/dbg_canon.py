#!/usr/bin/env python3
# dbg_canon.py - a .mlyze snapshot in canonical text, for the debugger tests
# (gdb_*.sh, lldb_*.sh) to compare the files the gdb/lldb scripts write with
# the ones `memlyze snapshot PID` writes: independent of stack ids, module
# indexes and string ids.
#
#   dbg_canon.py FILE [--funcs REGEX]   one line per ALLOC, sorted:
#       ADDR SIZE THREAD | frame;frame;...
# A frame whose function matches REGEX (the test program's own functions) is
# "func|file-basename|line|inline": the two symbolizers (libdw for memlyze,
# the debugger's tables for the scripts) must agree on it exactly. Any other
# frame is "module-basename+0xADDR", once per return address: which alias or
# line row a symbolizer picks inside glibc, or for _start (no debug info;
# libdw lends it the line row before it), is not what we compare.
#   dbg_canon.py FILE --meta              kind, rate, pid, number of events
import json
import re
import struct
import sys


def varint(b, o):
    v, s = 0, 0
    while True:
        c = b[o]
        o += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, o


def read(path):
    b = open(path, "rb").read()
    magic, version, start, meta_len, flags = struct.unpack_from("<4sIQII", b, 0)
    assert magic == b"MTRC" and version == 1 and flags & ~1 == 0, "not an uncompressed .mlyze v1"
    meta = json.loads(b[256:256 + meta_len])
    o, t, allocs, n = 256 + meta_len, start, [], 0
    rate = meta.get("rate")     # until a rate marker names another
    while o < len(b):
        typ = b[o]
        d, o = varint(b, o + 1)
        t += d
        n += 1
        if typ == 0:
            addr = struct.unpack_from("<Q", b, o)[0]
            size, o = varint(b, o + 8)
            sid, o = varint(b, o)
            thread = struct.unpack_from("<H", b, o)[0]
            o += 2
            allocs.append((addr, size, thread, sid, t, rate))
        elif typ == 1:
            o += 8
        elif typ == 2:
            _, o = varint(b, o)
            _, o = varint(b, o)
        elif typ == 3:
            fid, o = varint(b, o)
            name = meta["functions"].get(str(fid), "")
            if name.startswith("memlyze:rate "):
                rate = int(name.split()[-1])
        else:
            ln, o = varint(b, o)
            o += ln
    return meta, allocs, n


def frames(meta, sid, funcs):
    mods, out, last = meta.get("modules", []), [], None
    for f in meta["stack_traces"].get(str(sid), []):
        m = mods[f["module"]]["path"] if "module" in f else ""
        fn = meta["functions"][str(f["func_id"])]
        if funcs and funcs.search(fn):
            file = meta["files"][str(f["file_id"])].rsplit("/", 1)[-1]
            out.append("%s|%s|%d|%d" % (fn, file, f["line"], f.get("inline", False)))
            last = None
        else:
            key = "%s+0x%x" % (m.rsplit("/", 1)[-1], f.get("addr", 0))
            if key != last:        # inline expansions of one address: once
                out.append(key)
            last = key
    return ";".join(out)


def main():
    a = sys.argv[1:]
    meta, allocs, n = read(a[0])
    if "--meta" in a:
        print("kind=%s rate=%s pid=%s events=%d allocs=%d" % (meta.get("kind"), meta.get("rate"), meta.get("pid"),
                                                           n, len(allocs)))
        return
    funcs = re.compile(a[a.index("--funcs") + 1]) if "--funcs" in a else None
    lines = sorted("0x%x %d %d rate %s | %s" % (addr, size, th, rate, frames(meta, sid, funcs))
                   for (addr, size, th, sid, _, rate) in allocs)
    sys.stdout.write("".join(l + "\n" for l in lines))


main()
