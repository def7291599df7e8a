#!/usr/bin/env bash
# bench_attach.sh - memlyze-attach / memlyze-detach latency and the target's
# pause time for 1, 16 and 64 churning threads (every thread busy in malloc:
# the worst case on a small machine) and 16, 64 idle ones (median of RUNS),
# and the
# churn slowdown while attached (512 KiB and exact), each measured in the
# same run against the same program unattached.
#   bench/bench_attach.sh [RUNS]      (needs build/bin/memlyze-attach and build/lib/libmemlyze.so)
# "paused" = every thread held (seize .. safe point found .. others let go);
# "lent"   = the borrowed thread's share (dlopen + memlyze_attach / detach).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${MLZ_BUILD:-$ROOT/build}
RUNS=${1:-7}
T=$(mktemp -d /tmp/mlz-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT
cc -O2 -g -pthread -o "$T/target" "$ROOT/tests/targets/attach_target.c" -ldl || exit 1
ATTACH=$B/bin/memlyze-attach DETACH=$B/bin/memlyze-detach

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
now_ms() { date +%s%N | awk '{ printf "%.3f", $1 / 1e6 }'; }
field() { sed -n "s/.*$1 \([0-9.]*\) ms.*/\1/p"; }     # field "paused" / "lent"

start() {   # start NTHREADS [MODE] -> TP
    rm -f "$T/stop" "$T/tids"
    "$T/target" "${2:-churn}" "$T/stop" "$T/tids" "$1" >"$T/out" 2>&1 &
    TP=$!
    sleep 0.5
}
stop() { touch "$T/stop"; wait "$TP"; }

printf '%-12s %10s %12s %10s %10s %12s %10s\n' threads attach_ms a_paused_ms a_lent_ms detach_ms d_paused_ms d_lent_ms
for cfg in 1:churn 16:churn 64:churn 16:idle 64:idle; do
    n=${cfg%%:*} mode=${cfg#*:}
    start "$n" "$mode"
    : >"$T/a"; : >"$T/ap"; : >"$T/al"; : >"$T/d"; : >"$T/dp"; : >"$T/dl"
    for r in $(seq "$RUNS"); do
        t0=$(now_ms); out=$("$ATTACH" -o "$T/b.mlyze" "$TP") || { echo "attach failed"; break; }; t1=$(now_ms)
        echo "$t1 - $t0" | bc >>"$T/a"
        echo "$out" | sed -n 's/.*target paused \([0-9.]*\) ms.*/\1/p' >>"$T/ap"
        echo "$out" | sed -n 's/.*lent \([0-9.]*\) ms.*/\1/p' >>"$T/al"
        sleep 0.2
        t0=$(now_ms); out=$("$DETACH" --no-finalize "$TP") || { echo "detach failed"; break; }; t1=$(now_ms)
        echo "$t1 - $t0" | bc >>"$T/d"
        echo "$out" | sed -n 's/.*target paused \([0-9.]*\) ms.*/\1/p' >>"$T/dp"
        echo "$out" | sed -n 's/.*lent \([0-9.]*\) ms.*/\1/p' >>"$T/dl"
        rm -rf "/tmp/memlyze-$TP" "$T/b.mlyze"
    done
    printf '%-12s %10s %12s %10s %10s %12s %10s\n' "$n $mode" "$(median <"$T/a")" "$(median <"$T/ap")" "$(median <"$T/al")" \
        "$(median <"$T/d")" "$(median <"$T/dp")" "$(median <"$T/dl")"
    stop
done

# Churn throughput (16 threads, 3 s windows): unattached, 512 KiB, exact.
ops_run() {   # ops_run RATE|none -> ops per second
    start 16
    [ "$1" != none ] && "$ATTACH" -q -r "$1" -o "$T/o.mlyze" "$TP"
    local c0 c1
    sleep 3
    stop
    [ "$1" != none ] && rm -rf "/tmp/memlyze-$TP"
    sed -n 's/.*churn content checks (\([0-9]*\) ops.*/\1/p' "$T/out"
}
echo
echo "churn throughput, 16 threads (ops in ~3.5 s; median of 3)"
for mode in none 524288 1; do
    for r in 1 2 3; do ops_run "$mode"; done | median >"$T/m.$mode"
done
base=$(cat "$T/m.none")
for mode in none 524288 1; do
    v=$(cat "$T/m.$mode")
    printf '%-10s %12s ops  %6.3fx of unattached\n' "$mode" "$v" "$(echo "$v / $base" | bc -l)"
done
