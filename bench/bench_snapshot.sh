#!/usr/bin/env bash
# memlyze snapshot on a process holding 10^4, 10^5 and 10^6 live samples
# (exact mode, so every block is a sample) while a thread churns: snapshot
# time (median of RUNS), and the target's churn rate in the 100 ms windows
# during the snapshots relative to the windows before them.
set -eu
cd "$(dirname "$0")/.."
B=${MLZ_BUILD:-build}
RUNS=${RUNS:-3}
cc -O2 -g -pthread -o "$B/bench/hold" bench/workloads/hold.c
T=$(mktemp -d /tmp/mlz-bsnap.XXXXXX)
trap 'kill $HP 2>/dev/null; rm -rf "$T"' EXIT
printf '%-9s %14s %14s %16s\n' "samples" "snapshot ms" "(read+write)" "target rate"
for n in 10000 100000 1000000; do
    rm -f "$T/rate"
    MEMLYZE_MODE=got MEMLYZE_RATE=1 MEMLYZE_MAP_LOG2=21 MEMLYZE_SPOOL="$T/spool" \
        LD_PRELOAD="$(pwd)/$B/lib/libmemlyze.so" "$B/bench/hold" "$n" 1 > "$T/rate" &
    HP=$!
    until grep -q ready "$T/rate" 2>/dev/null; do sleep 0.1; done
    until [ "$(wc -l < "$T/rate")" -ge 8 ]; do sleep 0.1; done
    sleep 1
    before=$(tail -n 5 "$T/rate" | sort -n | awk '{ v[NR] = $1 } END { print v[3] }')
    lines=$(wc -l < "$T/rate")
    times=()
    for i in $(seq "$RUNS"); do
        s=$(date +%s%N)
        "$B/bin/memlyze" snapshot -q -o "$T/s$i.mlyze" "$HP"
        e=$(date +%s%N)
        times+=($(( (e - s) / 1000000 )))
    done
    sleep 0.3
    during=$(tail -n +"$((lines + 1))" "$T/rate" | sort -n | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }')
    med=$(printf '%s\n' "${times[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    live=$("$B/bin/memlyze" stats "$T/s1.mlyze" | awk '/^live at end/ { print $(NF - 1) }' | tr -d '(')
    printf '%-9s %14s %14s %15.2fx\n' "$n" "$med" "($live live)" "$(echo "$during / $before" | bc -l)"
    kill "$HP"; wait "$HP" 2>/dev/null || true
    rm -f "$T"/s*.mlyze "$T"/spool*
done
