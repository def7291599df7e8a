#!/usr/bin/env bash
# memlyze diff pairs the samples two snapshots of one attached process
# share: a known leak (tests/targets/leaker.c) of 2, 4 and 32 MiB at the
# default rate, 30 runs each with different seeds (fixed, so CI is
# repeatable). The 95% interval must cover the true growth in >= 93% of the
# runs for every size (and the shrink of a site that frees 4 MiB in >= 90%
# of all runs); the 4 MiB leak must rank first with an interval
# excluding zero in >= 90%; a site with no sample born or died must get a
# growth of exactly 0 with a zero-width interval. Files of different
# sessions or processes fall back to independent estimates (said in the
# header), different programs get a warning, and --from/--to on the
# session's trace pairs the same samples.
#   DIFF_PAIRED_RUNS=N   runs per size (default 30)
. "$(dirname "$0")/lib.sh"
RUNS=${DIFF_PAIRED_RUNS:-30}
cc -O2 -g -fno-omit-frame-pointer -o "$T/leaker" "$ROOT/tests/targets/leaker.c" || { fail "build leaker"; finish; }
cp "$T/leaker" "$T/other_program"

# wait_for FILE PATTERN: up to 10 s.
wait_for() { for _ in $(seq 1000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done; return 1; }

# session NAME PROGRAM SEED LEAK: attaches to a fresh leaker, snapshots it
# before (NAME.a.mlyze) and after the leak (NAME.b.mlyze); NAME.out has the
# target's output. With DETACH_TRACE set, detaches at the end (NAME.trace.mlyze).
session() {
    local name=$1 prog=$2 seed=$3 leak=$4 w
    rm -f "$T/$name.in"; mkfifo "$T/$name.in"
    (cd "$T" && MEMLYZE_SEED=$seed exec "$prog" "$leak" < "$T/$name.in" > "$T/$name.out") &
    local pid=$!
    exec {w}>"$T/$name.in"
    wait_for "$T/$name.out" '^ready'
    "$MEMLYZE" attach -q --seed "$seed" -o "$T/$name.trace.mlyze" "$pid" || echo "attach failed" >> "$T/$name.err"
    echo >&$w
    wait_for "$T/$name.out" '^A' && "$MEMLYZE" snapshot -q -o "$T/$name.a.mlyze" "$pid" 2>> "$T/$name.err"
    echo >&$w
    wait_for "$T/$name.out" '^B' && "$MEMLYZE" snapshot -q -o "$T/$name.b.mlyze" "$pid" 2>> "$T/$name.err"
    [ -n "${DETACH_TRACE:-}" ] && "$B/bin/memlyze-detach" -q "$pid" 2>> "$T/$name.err"
    exec {w}>&-
    wait "$pid"
    rm -rf "/tmp/memlyze-$pid"     # exited while attached: its spool, not needed here
}

for leak in 2 4 32; do
    for seed in $(seq 1 "$RUNS"); do
        n="r$leak.$seed"
        session "$n" "$T/leaker" "$((leak * 1000 + seed))" $((leak << 20))
        "$MEMLYZE" diff --json -n 10 "$T/$n.a.mlyze" "$T/$n.b.mlyze" > "$T/$n.json" 2>> "$T/$n.err"
        echo "$leak $seed $(awk '/^B/ { print $2 }' "$T/$n.out")" >> "$T/runs"
        rm -f "$T/$n.a.mlyze" "$T/$n.b.mlyze" "$T/$n.trace.mlyze"
    done
done
python3 - "$T" > "$T/paired.out" 2>&1 <<'PY' || fail "figures computed" "$(tail -c 600 "$T/paired.out")"
import json, sys
t = sys.argv[1]
cover, first, zero, n, bad = {}, {}, 0, 0, []
for line in open(f"{t}/runs"):
    leak, seed, shrunk = line.split()
    try:
        d = json.load(open(f"{t}/r{leak}.{seed}.json"))
        sites = {s["frames"][0].split(" ")[0]: s for s in d["sites"]}
        lk, st, sh = sites["leak_site"], sites["steady_site"], sites["shrink_site"]
        ok = d["estimate"] == "paired"
    except Exception as e:
        err = open(f"{t}/r{leak}.{seed}.err").read().strip() if __import__("os").path.exists(f"{t}/r{leak}.{seed}.err") else ""
        bad.append(f"{leak}/{seed}: {e!r} {err}")
        continue
    n += 1
    c = cover.setdefault(leak, [0, 0, 0])
    inside = lambda s, v: s["growth_bytes_low"] <= v <= s["growth_bytes_high"]
    c[0] += ok and inside(lk, int(leak) * 2**20)
    c[1] += ok and inside(sh, -int(shrunk))
    c[2] += 1
    f = first.setdefault(leak, [0, 0])
    f[0] += d["sites"][0] is lk and lk["growth_bytes_low"] > 0
    f[1] += 1
    zero += st["growth_bytes"] == 0 and st["growth_bytes_low"] == 0 and st["growth_bytes_high"] == 0
for leak, (cl, cs, runs) in sorted(cover.items(), key=lambda x: int(x[0])):
    print(f"cover {leak} {cl} {cs} {runs} {first[leak][0]}")
print(f"zero {zero} {n}")
print("bad " + "; ".join(bad) if bad else "bad -")
PY
cat "$T/paired.out"
check "every run gave a paired diff" grep -qx 'bad -' "$T/paired.out"
check "figures for 3 leak sizes" test "$(grep -c '^cover' "$T/paired.out")" -eq 3
while read -r _ leak cl cs runs firsts; do
    check "$leak MiB leak: interval covers the true growth in >= 93% of $runs runs ($cl)" test $((cl * 100)) -ge $((runs * 93))
    [ "$leak" = 4 ] && check "4 MiB leak ranked first, interval excluding zero, in >= 90% of $runs runs ($firsts)" test $((firsts * 100)) -ge $((runs * 90))
done < <(grep '^cover' "$T/paired.out")
# The freed site (born nothing, died ~4 MiB), over all runs as calibration.sh does.
read -r fs fn < <(awk '/^cover/ { s += $4; n += $5 } END { print s + 0, n + 0 }' "$T/paired.out")
check "freed site: intervals cover its true shrink in >= 90% of $fn runs ($fs)" test "$fn" -gt 0 -a $((fs * 100)) -ge $((fn * 90))
read -r _ z zn < <(grep '^zero' "$T/paired.out")
check "untouched site: growth 0 +- 0 exactly in all $zn runs ($z)" test "${z:-0}" -eq "${zn:--1}" -a "${zn:-0}" -eq $((3 * RUNS))

# Fallbacks: another process, another attach session, another program.
session p1 "$T/leaker" 1 $((4 << 20)); session p2 "$T/other_program" 2 $((4 << 20))
"$MEMLYZE" diff "$T/p1.a.mlyze" "$T/p2.b.mlyze" > "$T/x.txt" 2> "$T/x.err"
check "different processes: independent, said in the header" grep -q '^live heap .*independent estimates: different processes)$' "$T/x.txt"
check "different programs: a warning naming both" grep -q "warning: different programs: .*is $T/leaker, .*is $T/other_program" "$T/x.err"
"$MEMLYZE" diff "$T/p1.a.mlyze" "$T/p1.b.mlyze" > "$T/y.txt" 2> "$T/y.err"
check "same process and session: paired, no warning" bash -c "grep -q '^live heap .*paired: [0-9]* samples born, [0-9]* died)$' '$T/y.txt' && [ ! -s '$T/y.err' ]"
# Detach and attach again between the snapshots: a new session.
rm -f "$T/s.in"; mkfifo "$T/s.in"
(cd "$T" && exec "$T/leaker" $((4 << 20)) < "$T/s.in" > "$T/s.out") & SP=$!
exec {SW}>"$T/s.in"
wait_for "$T/s.out" '^ready'
"$MEMLYZE" attach -q -o "$T/s1.trace.mlyze" "$SP"; echo >&$SW
wait_for "$T/s.out" '^A' && "$MEMLYZE" snapshot -q -o "$T/s.a.mlyze" "$SP"
"$B/bin/memlyze-detach" -q "$SP"; "$MEMLYZE" attach -q -o "$T/s2.trace.mlyze" "$SP"; echo >&$SW
wait_for "$T/s.out" '^B' && "$MEMLYZE" snapshot -q -o "$T/s.b.mlyze" "$SP"
"$B/bin/memlyze-detach" -q "$SP"; exec {SW}>&-; wait "$SP"
"$MEMLYZE" diff "$T/s.a.mlyze" "$T/s.b.mlyze" > "$T/s.txt" 2>&1
check "another attach session: independent, said in the header" grep -q '^live heap .*independent estimates: different attach sessions)$' "$T/s.txt"

# --from/--to on the session's trace: the same samples, the same pairing.
DETACH_TRACE=1 session tr "$T/leaker" 7 $((4 << 20))
ta=$("$MEMLYZE" dump "$T/tr.a.mlyze" | awk '/^marker/ { sub("t=", "", $3); print $3 }')
tb=$("$MEMLYZE" dump "$T/tr.b.mlyze" | awk '/^marker/ { sub("t=", "", $3); print $3 }')
"$MEMLYZE" diff --json "$T/tr.a.mlyze" "$T/tr.b.mlyze" > "$T/tr.snap.json"
"$MEMLYZE" diff --json --from "$ta" --to "$tb" "$T/tr.trace.mlyze" > "$T/tr.trace.json"
check "--from/--to on the trace: paired, same growth and interval as the snapshots" python3 -c "
import json, sys
a, b = json.load(open('$T/tr.snap.json')), json.load(open('$T/tr.trace.json'))
key = lambda d: {s['frames'][0].split(' ')[0]: (s['growth_bytes'], s['growth_bytes_ci95']) for s in d['sites']}
ka, kb = key(a), key(b)
same = lambda x, y: abs(x - y) <= 1e-9 * max(1.0, abs(x))
ok = b['estimate'] == 'paired' and all(same(ka[s][i], kb[s][i]) for s in ('leak_site', 'shrink_site', 'steady_site') for i in (0, 1))
ok = ok and same(a['growth_bytes'], b['growth_bytes']) and same(a['growth_bytes_ci95'], b['growth_bytes_ci95'])
sys.exit(0 if ok and ka['leak_site'][0] > 0 else 1)"
finish
