#!/usr/bin/env python3
"""pprof_check.py - checks a pprof profile decoded by protoc against the rules
of profile.proto and Go's heap convention, then prints per-leaf values.

    zcat p.pb.gz | protoc --decode perftools.profiles.Profile profile.proto > p.txt
    pprof_check.py p.txt [--rate N] [--expect LEAF TYPE VALUE]... [--inline-location]

Checks: string_table[0] == ""; sample types alloc_objects/count,
alloc_space/bytes, inuse_objects/count, inuse_space/bytes; period type
space/bytes and period == --rate; every id referenced exists (locations,
mappings, functions, strings); every address inside its mapping; every sample
has 4 values; time_nanos set. --expect sums TYPE over the samples whose leaf
function (line[0] of location_id[0]) is LEAF and compares with VALUE.
--inline-location requires a location with more than one line.
Exit status 1 with one line per problem.
"""
import ast
import sys


def parse_text(lines):
    """protobuf text format -> nested dicts of lists."""
    root = {}
    stack = [root]
    for raw in lines:
        s = raw.strip()
        if not s:
            continue
        if s.endswith('{'):
            obj = {}
            stack[-1].setdefault(s[:-1].strip(), []).append(obj)
            stack.append(obj)
        elif s == '}':
            stack.pop()
        else:
            key, val = s.split(':', 1)
            val = val.strip()
            if val.startswith('"'):
                # protoc escapes bytes the C way (\", \\, \n, \ooo): a Python bytes literal.
                val = ast.literal_eval('b' + val).decode('utf-8')
            elif val in ('true', 'false'):
                val = val == 'true'
            else:
                val = int(val)
            stack[-1].setdefault(key, []).append(val)
    return root


def one(msg, key, default=0):
    v = msg.get(key, [default])
    return v[0]


def main(argv):
    path = argv[1]
    rate = None
    expects = []
    want_inline = False
    i = 2
    while i < len(argv):
        if argv[i] == '--rate':
            rate = int(argv[i + 1]); i += 2
        elif argv[i] == '--expect':
            expects.append((argv[i + 1], argv[i + 2], int(argv[i + 3]))); i += 4
        elif argv[i] == '--inline-location':
            want_inline = True; i += 1
        else:
            print('bad argument ' + argv[i]); return 2
    p = parse_text(open(path, encoding='utf-8').read().splitlines())
    bad = []
    st = p.get('string_table', [])
    if not st or st[0] != '':
        bad.append('string_table[0] is not ""')

    def s(idx):
        if idx < 0 or idx >= len(st):
            bad.append('string index %d out of range' % idx)
            return '?'
        return st[idx]

    types = [(s(one(t, 'type')), s(one(t, 'unit'))) for t in p.get('sample_type', [])]
    want = [('alloc_objects', 'count'), ('alloc_space', 'bytes'), ('inuse_objects', 'count'), ('inuse_space', 'bytes')]
    if types != want:
        bad.append('sample types %s, want %s' % (types, want))
    pt = p.get('period_type', [{}])[0]
    if (s(one(pt, 'type')), s(one(pt, 'unit'))) != ('space', 'bytes'):
        bad.append('period type is not space/bytes')
    if rate is not None and one(p, 'period') != rate:
        bad.append('period %d, want %d' % (one(p, 'period'), rate))
    if one(p, 'time_nanos') <= 0:
        bad.append('no time_nanos')

    maps = {one(m, 'id'): m for m in p.get('mapping', [])}
    funcs = {one(f, 'id'): f for f in p.get('function', [])}
    locs = {one(l, 'id'): l for l in p.get('location', [])}
    for m in maps.values():
        s(one(m, 'filename')); s(one(m, 'build_id'))
        if one(m, 'memory_limit') <= one(m, 'memory_start'):
            bad.append('mapping %d has an empty range' % one(m, 'id'))
    for f in funcs.values():
        s(one(f, 'name')); s(one(f, 'filename'))
    inline_seen = False
    for l in locs.values():
        mid = one(l, 'mapping_id')
        if mid:
            m = maps.get(mid)
            if m is None:
                bad.append('location %d: no mapping %d' % (one(l, 'id'), mid))
            elif not one(m, 'memory_start') <= one(l, 'address') < one(m, 'memory_limit'):
                bad.append('location %d: address %#x outside its mapping' % (one(l, 'id'), one(l, 'address')))
        lines = l.get('line', [])
        if not lines:
            bad.append('location %d has no line' % one(l, 'id'))
        if len(lines) > 1:
            inline_seen = True
        for ln in lines:
            if one(ln, 'function_id') not in funcs:
                bad.append('location %d: no function %d' % (one(l, 'id'), one(ln, 'function_id')))
    if want_inline and not inline_seen:
        bad.append('no location holds inlined lines')

    sums = {}
    for smp in p.get('sample', []):
        vals = smp.get('value', [])
        ids = smp.get('location_id', [])
        if len(vals) != 4:
            bad.append('a sample has %d values' % len(vals))
            continue
        if not ids or any(x not in locs for x in ids):
            bad.append('a sample names a missing location')
            continue
        leaf_fn = funcs.get(one(locs[ids[0]]['line'][0], 'function_id'))
        leaf = s(one(leaf_fn, 'name')) if leaf_fn else '?'
        acc = sums.setdefault(leaf, [0, 0, 0, 0])
        for k in range(4):
            acc[k] += vals[k]
    names = [t for t, _ in want]
    for leaf, typ, value in expects:
        got = sums.get(leaf, [0, 0, 0, 0])[names.index(typ)]
        if got != value:
            bad.append('%s %s = %d, want %d' % (leaf, typ, got, value))
    for leaf in sorted(sums):
        print('%s %s' % (leaf, ' '.join('%s=%d' % (n, v) for n, v in zip(names, sums[leaf]))))
    for b in bad:
        print('BAD: ' + b)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
