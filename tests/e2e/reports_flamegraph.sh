#!/usr/bin/env bash
# memlyze flamegraph: one self-contained, well-formed SVG or HTML file whose
# frames are as wide as the estimates; --diff of two real snapshots around a
# growing site colors it red (matched by symbol, not address); in headless
# Chromium the picture is not blank, and search and zoom work.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/e2e/reports/lib_reports.sh"

known_trace "$T/k.mlyze"
fixture "$T/f.mlyze"
flame() { "$PY" "$R/svg_check.py" flame "$1"; }
check "help" bash -c "'$MEMLYZE' flamegraph --help | grep -q '^usage: memlyze flamegraph'"

check "svg: written" "$MEMLYZE" flamegraph "$T/k.mlyze" -o "$T/k.svg"
check "html: written" "$MEMLYZE" flamegraph "$T/k.mlyze" -o "$T/k.html"
for f in k.svg k.html; do
    check "$f: well-formed (XML parser)" bash -c "$(declare -f flame); PY='$PY' R='$R'; flame '$T/$f' > '$T/$f.frames'"
    check "$f: self-contained (no external references)" "$PY" "$R/svg_check.py" selfcontained "$T/$f"
    check "$f: has the zoom and search script" grep -q "function zoom" "$T/$f"
done
check "svg: site_malloc is exactly 100000/total wide, tooltip with its estimate" "$PY" -c "
rows = [l.rstrip('\n').split('\t') for l in open('$T/k.svg.frames')]
total = 1180.0
m = [r for r in rows if r[2] == 'site_malloc (known.c:24)']
assert len(m) == 1, m
import re
tot = float(re.search(r'of ([0-9.]+) KiB', m[0][3]).group(1)) * 1024
assert abs(float(m[0][1]) - total * 100000 / 415338) < 0.6 or abs(float(m[0][1]) / total - 100000 / tot) < 0.01, m
assert '97.7 KiB' in m[0][3] and '24.' in m[0][3], m[0][3]
assert rows[0][2] == 'all' and float(rows[0][1]) == total
"
check "--metric count: tooltips count allocations" bash -c \
    "'$MEMLYZE' flamegraph --metric count '$T/k.mlyze' -o '$T/kc.svg' && grep -q '100 allocations, ' '$T/kc.svg'"
check "--metric allocated: churn's 10520000 bytes show" bash -c \
    "'$MEMLYZE' flamegraph --metric allocated '$T/k.mlyze' -o '$T/ka.svg' && grep -q 'data-n=\"churn (known.c:31)\"' '$T/ka.svg'"
check "fixture: escaping and UTF-8 stay well-formed" bash -c \
    "'$MEMLYZE' flamegraph '$T/f.mlyze' -o '$T/f.svg' && '$PY' '$R/svg_check.py' flame '$T/f.svg' | grep -q 'std::vector<int>::push;back&\"x\" (app.c:50)'"
check "--at: the heap at +1 ms" bash -c \
    "'$MEMLYZE' flamegraph --at 0.001 '$T/f.mlyze' -o '$T/fat.svg' && '$PY' '$R/svg_check.py' flame '$T/fat.svg' | grep -q 'grow_site (app.c:40) | 1.95 KiB'"
known_trace "$T/ks.mlyze" 65536
check "sampled: tooltips carry the 95% interval" bash -c \
    "'$MEMLYZE' flamegraph '$T/ks.mlyze' -o '$T/ks.svg' && grep -q ' (95%), ' '$T/ks.svg'"

# --diff, deterministic: the fixture at +1 ms (addresses moved, as after a
# restart with ASLR) against the fixture at the end.
"$PY" - "$R/fixture.dump" "$T/base.dump" <<'EOF'
import re, sys
lines = open(sys.argv[1]).read().splitlines()
out, n = [], 0
for l in lines:
    if l.startswith('meta '):
        l = re.sub(r'"addr":(\d+)', lambda m: '"addr":%d' % (int(m.group(1)) + 64), l)
    if l.startswith(('alloc ', 'free ', 'marker ')):
        if n == 6: continue          # events up to the snapshot marker only
        n += 1
    if l.startswith('end '): l = 'end events=%d' % n
    out.append(l)
open(sys.argv[2], 'w').write('\n'.join(out) + '\n')
EOF
"$MEMLYZE" undump -f -o "$T/base.mlyze" "$T/base.dump" >/dev/null
check "diff: written" "$MEMLYZE" flamegraph --diff "$T/base.mlyze" "$T/f.mlyze" -o "$T/fd.svg"
flame "$T/fd.svg" > "$T/fd.frames"
check "diff: grow_site (+3000 B, the largest growth) is red, matched by symbol across moved addresses" \
    grep -qP '^rgb\(255,([0-3]?[0-9]),\1\)\t[0-9.]+\tgrow_site \(app.c:40\)\t.*1.95 KiB .{1,3} 4.88 KiB, \+2.93 KiB$' "$T/fd.frames"
check "diff: unchanged sites are neutral" grep -qP '^rgb\(222,222,222\)\t[0-9.]+\tnaïve_ü' "$T/fd.frames"
check "diff: inner grew a little: pale red" grep -qP '^rgb\(255,(1[5-9][0-9]|2[0-2][0-9]),\d+\)\t[0-9.]+\tinner \(x.c:10\)' "$T/fd.frames"

# --diff, real: two snapshots of a live process around a growing site.
LIB="$B/lib/libmemlyze.so"
cc -O2 -g -o "$T/grower" "$ROOT/tests/targets/grower.c"
mkfifo "$T/gin"
MEMLYZE_MODE=got MEMLYZE_RATE=1 MEMLYZE_SPOOL="$T/gspool" LD_PRELOAD="$LIB" "$T/grower" < "$T/gin" > "$T/gout" &
GPID=$!
exec {GIN}>"$T/gin"
for _ in $(seq 100); do grep -q ready "$T/gout" 2>/dev/null && break; sleep 0.05; done
"$MEMLYZE" snapshot -q -o "$T/g1.mlyze" "$GPID"
echo grow >&"$GIN"
for _ in $(seq 100); do grep -q 'step 1' "$T/gout" 2>/dev/null && break; sleep 0.05; done
"$MEMLYZE" snapshot -q -o "$T/g2.mlyze" "$GPID"
exec {GIN}>&-
wait "$GPID"
check "snapshots: diff flame graph written" "$MEMLYZE" flamegraph --diff "$T/g1.mlyze" "$T/g2.mlyze" -o "$T/gd.html"
flame "$T/gd.html" > "$T/gd.frames"
check "snapshots: the growing site is red" grep -qP '^rgb\(255,([0-3]?[0-9]),\1\)\t[0-9.]+\tsite_leak \(grower.c:17\)\t.*\+400 KiB' "$T/gd.frames"
check "snapshots: the steady site is neutral" grep -qP '^rgb\(222,222,222\)\t[0-9.]+\tsite_steady \(grower.c:18\)' "$T/gd.frames"
check "snapshots: the shrinking site is blue" grep -qP '^rgb\((\d+),\1,255\)\t[0-9.]+\tsite_shrink \(grower.c:19\)\t.*-40.0 KiB' "$T/gd.frames"

# In a browser.
if [ -n "$CHROMIUM" ]; then
    # The SVG plain, the HTML with a search from its URL, the diff page.
    shot "file://$T/k.svg" "$T/k.svg.png" 1200,500
    shot "file://$T/k.html#search=site_malloc" "$T/k.html.png" 1200,500
    shot "file://$T/gd.html" "$T/gd.html.png" 1200,500
    for f in k.svg k.html gd.html; do
        check "chromium: $f renders (not blank)" bash -c \
            "'$PY' '$R/png_stats.py' '$T/$f.png' | tee '$T/$f.png.stats' | awk '{split(\$1,c,\"=\"); split(\$2,n,\"=\"); exit !(c[2] > 50 && n[2] > 0.05)}'"
    done
    check "chromium: the diff shows red" bash -c "grep -qE 'reddish=[1-9][0-9]{3,}' '$T/gd.html.png.stats'"
    check "chromium: search (from the URL) highlights site_malloc" grep -qE 'magenta=[1-9][0-9]{2,}' "$T/k.html.png.stats"
    check "chromium: no highlight without a search" grep -q 'magenta=0 ' "$T/k.svg.png.stats"
    dom "file://$T/k.html#search=site_&zoom=^main%20%5C(known.c:45" > "$T/k.dom"
    check "chromium: search reports the matched share" grep -q 'Matched: 98.7% (5 frames)' "$T/k.dom"
    check "chromium: zoom makes main (known.c:45) and its callee full width, hides the rest" "$PY" -c "
import re
d = open('$T/k.dom').read()
def rect(label):
    m = re.search(r'data-n=\"' + re.escape(label) + r'\"[^>]*>.*?<rect ([^>]*)>', d, re.S)
    return dict(re.findall(r'(\w+)=\"([^\"]*)\"', m.group(1)))
assert rect('site_malloc (known.c:24)')['width'] == '1180.00'
assert rect('main (known.c:45)')['x'] == '10.00'
assert re.search(r'data-n=\"site_thread \(known.c:27\)\"[^>]*style=\"display: none;\"', d)
"
else
    skip "flame graphs in a browser" "chromium not installed; Debian package chromium"
fi

# Errors.
check "no -o: usage error" bash -c "'$MEMLYZE' flamegraph '$T/k.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
check "-o x.png: usage error" bash -c "'$MEMLYZE' flamegraph '$T/k.mlyze' -o '$T/x.png' 2>/dev/null; [ \$? -eq 2 ]"
out=$("$MEMLYZE" flamegraph --diff "$T/missing.mlyze" "$T/k.mlyze" -o "$T/x.svg" 2>&1); rc=$?
check "missing --diff base: one line, exit 1, no output" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ] && ! test -e '$T/x.svg'"
finish
