#!/usr/bin/env python3
"""dumpalloc.py - an independent reader and writer of dumpalloc files for the
tests (the layout of docs/FORMAT.md, "dumpalloc").

  dumpalloc.py check FILE        parses strictly; prints record counts as JSON
  dumpalloc.py make KIND OUT     writes a hand-made file: odd (readable
                                 oddities) or a broken one: past-end,
                                 short-header, pcal-past-record
"""
import json, struct, sys


def rec(t, body):
    return t + struct.pack('<I', len(body)) + body


def s(x):
    b = x.encode()
    return struct.pack('<I', len(b)) + b


def aloc(addr, sec, ns):
    return rec(b'ALOC', struct.pack('<QQI', addr, sec, ns))


def fram(kind, payload=b''):
    return rec(b'FRAM', kind + payload)


def check(path):
    d = open(path, 'rb').read()
    pos, n = 0, {}
    in_chain = False
    last = None
    while pos < len(d):
        t, ln = d[pos:pos + 4], struct.unpack_from('<I', d, pos + 4)[0]
        body = d[pos + 8:pos + 8 + ln]
        assert len(body) == ln, 'record past the end at %d' % pos
        k = t.decode()
        if in_chain:
            assert k == 'FRAM', 'chain without TERM at %d' % pos
            kind = body[:4].decode()
            n['FRAM ' + kind] = n.get('FRAM ' + kind, 0) + 1
            if kind == 'TERM':
                assert ln == 4
                in_chain = False
            elif kind == 'NTVE':
                assert ln == 12
            elif kind == 'PCAL':
                fl = struct.unpack_from('<I', body, 4)[0]
                gl = struct.unpack_from('<I', body, 8 + fl)[0]
                assert ln == 4 + 4 + fl + 4 + gl + 4, 'PCAL length'
        else:
            n[k] = n.get(k, 0) + 1
            if k == 'ALOC':
                assert ln == 20
                addr, sec, ns = struct.unpack('<QQI', body)
                assert ns < 10**9
                in_chain = True
            elif k == 'DALC':
                assert ln == 8
            elif k == 'ASIZ':
                assert ln == 16
            elif k in ('PROC', 'OBJE'):
                off = 4 if k == 'PROC' else 0
                sl = struct.unpack_from('<I', body, off)[0]
                assert ln == off + 4 + sl, k + ' length'
                assert b'\0' not in body[off + 4:], 'NUL in a string'
        pos += 8 + ln
    assert not in_chain, 'file ends inside a chain'
    print(json.dumps(n, sort_keys=True))


def make(kind, out):
    if kind == 'odd':
        d = rec(b'PROC', struct.pack('<I', 77) + s('/usr/bin/odd'))
        d += rec(b'OBJE', s('/usr/lib/libodd.so'))
        d += rec(b'XTRA', b'unknown record, skipped by its length')
        # 1: a PCAL frame, an unknown frame kind, a NTVE frame; no size
        d += aloc(0x1000, 1700000000, 5000) + fram(b'PCAL', s('make_thing') + s('/src/odd.c') + struct.pack('<I', 42))
        d += fram(b'JAVA', b'frame of a kind we do not know') + fram(b'NTVE', struct.pack('<Q', 0x401234)) + fram(b'TERM')
        # 2: a size from ASIZ; a chain ended by a DALC, no TERM
        d += rec(b'ASIZ', struct.pack('<QQ', 0x2000, 4096)) + aloc(0x2000, 1700000000, 9000)
        d += fram(b'PCAL', s('big_thing') + s('/src/odd.c') + struct.pack('<I', 7))
        d += rec(b'DALC', struct.pack('<Q', 0x1000))
        d += rec(b'DALC', struct.pack('<Q', 0xdead0))   # never allocated
        d += fram(b'TERM')                              # stray: outside a chain
    elif kind == 'latin1':
        # a process name that is not UTF-8 (ISO-8859-1 e acute)
        d = rec(b'PROC', struct.pack('<I', 78) + struct.pack('<I', 11) + b'caf\xe9-server')
        d += aloc(0x1000, 1700000000, 5000) + fram(b'TERM')
    elif kind == 'past-end':
        d = aloc(0x1000, 1, 0) + fram(b'TERM') + b'DALC' + struct.pack('<I', 800) + b'\0' * 8
    elif kind == 'short-header':
        d = aloc(0x1000, 1, 0) + fram(b'TERM') + b'DAL'
    elif kind == 'pcal-past-record':
        d = aloc(0x1000, 1, 0) + rec(b'FRAM', b'PCAL' + struct.pack('<I', 1000) + b'abc') + fram(b'TERM')
    else:
        sys.exit('unknown kind ' + kind)
    open(out, 'wb').write(d)


if __name__ == '__main__':
    if sys.argv[1] == 'check':
        check(sys.argv[2])
    else:
        make(sys.argv[2], sys.argv[3])
