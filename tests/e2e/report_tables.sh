#!/usr/bin/env bash
# The export formats and the orders of `top` are tables: every row appears in
# the help and in the error for an unknown name, an output name implies its
# format (the longest matching suffix), and per-row options stay with their
# rows. A row missing from any of these fails here.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/e2e/reports/lib_reports.sh"

fixture "$T/f.mlyze"
FORMATS="pprof speedscope folded json dumpalloc heaptrack"
"$MEMLYZE" export --help > "$T/help.txt"
"$MEMLYZE" export --format xml "$T/f.mlyze" 2> "$T/err.txt"
for f in $FORMATS; do
    check "export --help: a paragraph for $f" grep -q "^  $f\$" "$T/help.txt"
done
check "export: the --format error lists every format, in table order" \
    grep -q "^memlyze export: --format takes one of pprof, speedscope, folded, json, dumpalloc, heaptrack$" "$T/err.txt"
check "export: no --format and no telling name: the same list" bash -c \
    "'$MEMLYZE' export '$T/f.mlyze' 2>&1 >/dev/null | grep -q 'need --format (one of pprof, speedscope, folded, json, dumpalloc, heaptrack)'"
# The name decides the format: each output checked by its own first bytes.
for pair in "x.pb.gz:1f8b" "x.pprof:1f8b" "x.speedscope.json:7b22" "x.json:7b0a" "x.folded:5f73" "x.dumpalloc:5052" "x.heaptrack:7620"; do
    name=${pair%%:*} magic=${pair#*:}
    check "export -o $name: the format its name implies" bash -c \
        "'$MEMLYZE' export -o '$T/$name' '$T/f.mlyze' && [ \"\$(head -c 2 '$T/$name' | od -An -tx1 | tr -d ' \n')\" = '$magic' ]"
done
check "export: speedscope, not json, for x.speedscope.json (longest suffix)" bash -c \
    "grep -q 'speedscope.app/file-format-schema' '$T/x.speedscope.json'"
check "export: --metric is folded's only" bash -c "'$MEMLYZE' export --format json --metric count '$T/f.mlyze' 2>&1 >/dev/null | grep -q 'does not apply to --format json'"
check "export: binary formats refuse a terminal" bash -c \
    "script -qec \"'$MEMLYZE' export --format dumpalloc '$T/f.mlyze'\" /dev/null | grep -q 'dumpalloc output is binary'"
known_trace "$T/ks.mlyze" 4096
for f in dumpalloc heaptrack; do
    check "export $f: a sampled trace is refused in one line, no output" bash -c \
        "'$MEMLYZE' export --format $f -o '$T/ks.$f' '$T/ks.mlyze' 2> '$T/ks.err'; [ \$? -eq 1 ] && [ \$(wc -l < '$T/ks.err') -eq 1 ] && grep -q 'sampled (rate 4096): $f files hold every allocation' '$T/ks.err' && [ ! -e '$T/ks.$f' ]"
done

# top --by
"$MEMLYZE" top --help > "$T/top.txt"
for o in live peak allocated count; do
    check "top --help: a line for --by $o" grep -q "^ *$o: " "$T/top.txt"
done
check "top: the --by error lists every order" bash -c \
    "'$MEMLYZE' top --by size '$T/f.mlyze' 2>&1 | grep -q '^memlyze top: --by takes one of live, peak, allocated, count$'"
check "top --by each: its own column header" bash -c \
    "for o in 'live:live bytes' 'peak:peak bytes' 'allocated:allocated bytes' 'count:allocations'; do '$MEMLYZE' top --by \${o%%:*} '$T/f.mlyze' | sed -n 2p | grep -q \"^rank  \${o#*:} \" || exit 1; done"
check "top --by count: counts in the first column, bytes in the second" bash -c \
    "'$MEMLYZE' top --by count '$T/f.mlyze' | grep -E '^ +1  3 +42.9% +4.88 KiB +3  grow_site'"
# One JSON shape for sites (report/sitejson.c): on a sampled trace, top
# --json and export json give every site the same figures under the same
# keys; leaks, temporary and diff name their estimates KEY and KEY_ci95.
"$MEMLYZE" top --json -n 100 "$T/ks.mlyze" > "$T/top.json"
"$MEMLYZE" export --format json -o "$T/ks.json" "$T/ks.mlyze"
check "sites JSON: top and export json agree on every figure of every site" python3 -c "
import json
top = json.load(open('$T/top.json'))['sites']; exp = dict((s['stack_id'], s) for s in json.load(open('$T/ks.json'))['sites'])
keys = ('samples', 'live_samples', 'live_bytes', 'live_bytes_ci95', 'live_count', 'live_count_ci95', 'alloc_bytes',
        'alloc_bytes_ci95', 'alloc_count', 'alloc_count_ci95', 'peak_bytes', 'peak_us')
assert len(top) >= 3 and any(s['live_bytes_ci95'] > 0 for s in top), top
for s in top:
    e = exp[s['stack_id']]
    assert all(s[k] == e[k] for k in keys), (s, e)
    assert s['frames'][0] == e['frames'][0]['label'], (s['frames'][0], e['frames'][0])
"
check "sites JSON: leaks, temporary and diff name estimates KEY and KEY_ci95" python3 -c "
import json, subprocess
def j(*a): return json.loads(subprocess.run(('$MEMLYZE',) + a, check=True, capture_output=True).stdout)
for cmd in (('leaks', '--age', '0'), ('temporary',)):
    d = j(*(cmd + ('--json', '$T/ks.mlyze')))
    assert 'bytes_ci95' in d and all('bytes' in s and 'bytes_ci95' in s and s['frames'] for s in d['sites']), (cmd, d)
d = j('diff', '--json', '$T/f.mlyze', '$T/ks.mlyze')
assert 'growth_bytes_ci95' in d and all('growth_bytes_ci95' in s for s in d['sites']), d
"
finish
