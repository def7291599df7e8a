#!/usr/bin/env bash
# The payload's cost, measured against the same workload without it, in one
# run (medians of RUNS runs; ratios are what to read on a noisy machine):
#   - ns added per malloc+free pair at the default 512 KiB rate (goal <= 3 ns)
#   - multithreaded churn slowdown at 512 KiB (goal <= 1.10x) and exact (<= 4x)
#   - sampled-path cost per sample, median and p99, for each unwinder
#   - payload RSS (goal <= 8 MB)
set -eu
cd "$(dirname "$0")/.."
B=${MLZ_BUILD:-build}
RUNS=${RUNS:-5}
PAIRS=${PAIRS:-20000000}
OPS=${OPS:-2000000}
THREADS=${THREADS:-8}
W=$B/bench/churn
mkdir -p "$B/bench"
cc -O2 -g -pthread -o "$W" bench/workloads/churn.c
LIB=$(pwd)/$B/lib/libmemlyze-preload.so
SP=$(mktemp -d /tmp/mlz-bench.XXXXXX)
trap 'rm -rf "$SP"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# run ENV... -- ARGS : one line of output (first field) per run, median
run() {
    local envs=() out
    while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
    for i in $(seq "$RUNS"); do
        env "${envs[@]}" MEMLYZE_SPOOL="$SP/s.$i" "$W" "$@" | head -1
        rm -f "$SP"/s.*
    done | median
}
rss() {
    env "$@" MEMLYZE_SPOOL="$SP/r" "$W" threads "$THREADS" "$OPS" | awk '/^rss/ { print $2 }'
    rm -f "$SP"/r*
}

base=$(run X=1 -- pair "$PAIRS")
pre=$(run LD_PRELOAD="$LIB" -- pair "$PAIRS")
printf 'malloc+free pair:        %6.2f ns alone, %6.2f ns with memlyze (512 KiB): +%.2f ns\n' \
    "$base" "$pre" "$(echo "$pre - $base" | bc -l)"

tb=$(run X=1 -- threads "$THREADS" "$OPS")
ts=$(run LD_PRELOAD="$LIB" -- threads "$THREADS" "$OPS")
te=$(run LD_PRELOAD="$LIB" MEMLYZE_RATE=1 -- threads "$THREADS" "$((OPS / 10))")
teb=$(run X=1 -- threads "$THREADS" "$((OPS / 10))")
printf 'churn, %d threads:        %.2fx at 512 KiB, %.2fx exact (rate 1)\n' "$THREADS" \
    "$(echo "$ts / $tb" | bc -l)" "$(echo "$te / $teb" | bc -l)"

lb=$("$W" latency 200000 | head -1)
for u in fp dwarf; do
    l=$(env LD_PRELOAD="$LIB" MEMLYZE_RATE=1 MEMLYZE_UNWIND=$u MEMLYZE_SPOOL="$SP/l" "$W" latency 200000 | head -1)
    rm -f "$SP"/l*
    set -- $l; set -- $1 $2 $lb
    printf 'sampled path (%-5s):     median %5.0f ns, p99 %6.0f ns per sampled malloc+free (alone: %s ns)\n' "$u" "$1" "$2" "$3"
done

r0=$(rss X=1); r1=$(rss LD_PRELOAD="$LIB"); r2=$(rss LD_PRELOAD="$LIB" MEMLYZE_RATE=1)
printf 'RSS, churn %d threads:    %d KiB alone, +%d KiB with memlyze (512 KiB), +%d KiB exact\n' \
    "$THREADS" "$r0" "$((r1 - r0))" "$((r2 - r0))"
