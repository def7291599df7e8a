#!/usr/bin/env bash
# memlyze timeline: a self-contained, well-formed SVG of the estimated live
# heap over time: axes with units, the peak the other commands report, a
# labelled line per marker, at most ~4100 points however long the trace, and
# a picture that is not blank in headless Chromium.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/e2e/reports/lib_reports.sh"

known_trace "$T/k.mlyze"
fixture "$T/f.mlyze"
tl() { "$PY" "$R/svg_check.py" timeline "$1"; }
check "help" bash -c "'$MEMLYZE' timeline --help | grep -q '^usage: memlyze timeline'"

check "known: written" "$MEMLYZE" timeline "$T/k.mlyze" -o "$T/k.svg"
check "known: well-formed (XML parser)" bash -c "$(declare -f tl); PY='$PY' R='$R'; tl '$T/k.svg' > '$T/k.info'"
check "known: self-contained" "$PY" "$R/svg_check.py" selfcontained "$T/k.svg"
check "known: start and stop markers labelled" grep -qx 'markers=memlyze:start,memlyze:stop' "$T/k.info"
check "known: axes with units" bash -c "grep -q '^text=time since the start of the recording (ms)$' '$T/k.info' && grep -q '^text=estimated live heap (KiB)$' '$T/k.info' && grep -q '^text=400 KiB$' '$T/k.info'"
peak=$("$MEMLYZE" stats "$T/k.mlyze" | sed -n 's/^peak live: *\(.* [KMG]*i*B\) at.*/\1/p')
check "known: the peak is the one memlyze stats reports ($peak)" grep -q "^text=peak $peak at " "$T/k.info"
check "known: exact mode draws no band" bash -c "! grep -q 'class=\"band\"' '$T/k.svg'"

check "fixture: written" "$MEMLYZE" timeline "$T/f.mlyze" -o "$T/f.svg" --title 'fixture <&>'
tl "$T/f.svg" > "$T/f.info"
check "fixture: markers start, snapshot, stop" grep -qx 'markers=memlyze:start,memlyze:snapshot,memlyze:stop' "$T/f.info"
check "fixture: peak 5212 B at +2 ms, escaped title" bash -c \
    "grep -q '^text=peak 5.09 KiB at +0.002 s, 5.09 KiB at the end' '$T/f.info' && grep -qx 'text=fixture <&>' '$T/f.info'"
# The step line, read back: its highest point is the peak, its last the end.
check "fixture: the line steps through 0 -> 2112 -> 5112 -> 5012 -> 5212 B" "$PY" - "$T/f.svg" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
ns = '{http://www.w3.org/2000/svg}'
root = ET.parse(sys.argv[1]).getroot()
texts = {t.text: t for t in root.iter(ns + 'text')}
# y of the "0 KiB" and "6 KiB" tick labels (text y = line y + 4) give the scale.
y0 = float(texts['0 KiB'].get('y')) - 4
ticks = [(float(t.text.split()[0]), float(t.get('y')) - 4) for t in root.iter(ns + 'text')
         if (t.text or '').endswith(' KiB') and t.text.split()[0].replace('.', '').isdigit()]
k, yk = max(ticks)
d = [p for p in root.iter(ns + 'path') if p.get('class') == 'line'][0].get('d')
ys = [float(v) for c, v in re.findall(r'([MV])[ ]?([-0-9.]+)', d) if c == 'V']
vals = [round((y0 - y) / (y0 - yk) * k * 1024) for y in ys]
# Each event's bucket draws max, min, last; collapse repeats.
seen = []
for v in vals:
    if not seen or abs(seen[-1] - v) > 1:
        seen.append(v)
want = [100, 1100, 2100, 2107, 2112, 5112, 5012, 5212]
assert all(abs(a - b) <= 2 for a, b in zip(seen, want)) and len(seen) == len(want), (seen, want)
EOF

# Downsampling: a 2M-event synthetic trace stays under ~4100 points, keeps its markers.
GEN="$B/bench/bench_reports_gen"
if [ -x "$GEN" ]; then
    "$GEN" "$T/big.mlyze" 2000000 >/dev/null
    check "2M events: written" "$MEMLYZE" timeline "$T/big.mlyze" -o "$T/big.svg"
    tl "$T/big.svg" > "$T/big.info"
    check "2M events: at most 4100 points" awk -F= '/^points=/ { exit !($2 > 100 && $2 <= 4100) }' "$T/big.info"
    check "2M events: start, snapshot, stop markers" grep -qx 'markers=memlyze:start,memlyze:snapshot,memlyze:stop' "$T/big.info"
    check "2M events: sampled, so a 95% band" grep -q 'class="band"' "$T/big.svg"
    check "2M events: seconds on the axis" grep -q '^text=time since the start of the recording (s)$' "$T/big.info"
else
    skip "timeline downsampling" "build/bench/bench_reports_gen not built"
fi

# Files of other kinds: the fuzz seed (GC and extension events) works, a spool is refused.
"$MEMLYZE" undump -o "$T/seed.mlyze" "$ROOT/tests/fuzz/seeds/trace.txt" >/dev/null
check "seed trace with GC and extension events: well-formed" bash -c "'$MEMLYZE' timeline '$T/seed.mlyze' -o '$T/seed.svg' && '$PY' '$R/svg_check.py' timeline '$T/seed.svg' >/dev/null"
"$MEMLYZE" undump -o "$T/spool.mlyze" "$ROOT/tests/fuzz/seeds/spool.txt" >/dev/null
out=$("$MEMLYZE" timeline "$T/spool.mlyze" -o "$T/spool.svg" 2>&1); rc=$?
check "spool refused: one line naming finalize, exit 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ] && printf '%s' \"$out\" | grep -q finalize && ! test -e '$T/spool.svg'"

if [ -n "$CHROMIUM" ]; then
    shot "file://$T/k.svg" "$T/k.png" 1000,420
    check "chromium: the timeline renders (not blank)" bash -c \
        "'$PY' '$R/png_stats.py' '$T/k.png' | awk '{split(\$1,c,\"=\"); split(\$2,n,\"=\"); exit !(c[2] > 20 && n[2] > 0.2)}'"
else
    skip "timeline in a browser" "chromium not installed; Debian package chromium"
fi

check "no -o: usage error" bash -c "'$MEMLYZE' timeline '$T/k.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
out=$("$MEMLYZE" timeline "$T/missing.mlyze" -o "$T/x.svg" 2>&1); rc=$?
check "missing file: one line, exit 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ]"
finish
