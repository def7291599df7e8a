#!/usr/bin/env python3
"""compare_heaptrack.py - heaptrack_print's numbers against memlyze top's, per
allocation site (the function that called the allocator).

  compare_heaptrack.py TOP.json ALLOC.folded PEAK.folded

TOP.json is `memlyze top --json --by count -n 1000000 --frames 8` of the
original trace;
the .folded files are heaptrack_print -F with --flamegraph-cost-type
allocations and peak, of the export. Checks, per leaf function: the
allocation counts are equal; and the peaks are equal for sites that never
free (heaptrack's peak is a site's share at the moment of the whole heap's
peak, memlyze's the site's own highest: the two agree for those). Prints
one line per compared function.
"""
import json, re, sys
from collections import defaultdict

top, fa, fp = sys.argv[1:4]
name = lambda f: re.sub(r' \[inlined\]$', '', f).split(' (')[0]

def folded(path):
    out = defaultdict(int)
    for line in open(path):
        line = line.rstrip('\n')
        if not line:
            continue
        stack, value = line.rsplit(' ', 1)
        leaf = [f for f in stack.split(';') if f][-1]
        out[name(leaf)] += int(value)
    return out

counts, peaks = folded(fa), folded(fp)
sites = json.load(open(top))['sites']
mcount, mpeak, freed = defaultdict(int), defaultdict(int), set()
for s in sites:
    # heaptrack_print -F writes an address's frames innermost first, after
    # its callers: the line ends with the first frame that is not inlined.
    outer = [f for f in s['frames'] if not f.endswith(' [inlined]')]
    leaf = name(outer[0]) if outer else '??'
    mcount[leaf] += round(s['alloc_count'])
    mpeak[leaf] += round(s['peak_bytes'])
    if round(s['live_count']) != round(s['alloc_count']):
        freed.add(leaf)
bad = 0
assert len(mcount) >= 5, mcount
for leaf in sorted(mcount):
    ok = counts.get(leaf) == mcount[leaf]
    line = '%s: count memlyze %d heaptrack %s' % (leaf, mcount[leaf], counts.get(leaf))
    if leaf not in freed:
        ok = ok and peaks.get(leaf) == mpeak[leaf]
        line += '; peak memlyze %d heaptrack %s' % (mpeak[leaf], peaks.get(leaf))
    print(('ok   ' if ok else 'BAD  ') + line)
    bad += not ok
extra = set(counts) - set(mcount)
if extra:
    print('BAD  heaptrack has sites memlyze has not:', sorted(extra))
    bad += 1
sys.exit(1 if bad else 0)
