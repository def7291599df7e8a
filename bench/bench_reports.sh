#!/usr/bin/env bash
# bench_reports.sh - report generation time on a large trace: writes a
# synthetic trace (bench_reports_gen.c: 2000 sites, stacks of 6..14 frames,
# sampled at 512 KiB, snapshot markers) and times top, every export format,
# the flame graphs and the timeline on it. Each command replays the whole
# trace, so events/s compares them with the reader's raw speed (validate).
#
#   bench/bench_reports.sh [EVENTS] [-z]      (default 10000000; -z: LZ4 trace)
#   REPS=N: runs per command, the median is printed (default 3)
set -eu
cd "$(dirname "$0")/.."
B=${MLZ_BUILD:-build}
EVENTS=${1:-10000000}
Z=; [ "${2:-}" = -z ] && Z=-z
MEMLYZE="$B/bin/memlyze"
GEN="$B/bench/bench_reports_gen"
[ -x "$MEMLYZE" ] && [ -x "$GEN" ] || make -j2 >/dev/null
D=$(mktemp -d "${TMPDIR:-/tmp}/mlz-bench-reports.XXXXXX")
trap 'rm -rf "$D"' EXIT

REPS=${REPS:-3}
now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
t0=$(now)
"$GEN" "$D/big.mlyze" "$EVENTS" $Z >/dev/null
t1=$(now)
size=$(stat -c %s "$D/big.mlyze")
printf 'bench_reports: %s events, %.1f MB trace%s, written in %.2f s\n' "$EVENTS" \
    "$(calc "$size / 1000000")" "${Z:+ (LZ4)}" "$(calc "$t1 - $t0")"
printf '%-34s %9s %14s %12s\n' command seconds "events/s" "output"

run() {   # run LABEL OUTPUT ARGS...: median of REPS runs
    local label=$1 out=$2; shift 2
    local ts=()
    for _ in $(seq "$REPS"); do
        local a b
        a=$(now)
        "$MEMLYZE" "$@" >/dev/null
        b=$(now)
        ts+=("$(calc "$b - $a")")
    done
    local med
    med=$(printf '%s\n' "${ts[@]}" | sort -g | sed -n "$(( (REPS + 1) / 2 ))p")
    local osz=-
    [ -n "$out" ] && [ -f "$out" ] && osz=$(stat -c %s "$out")
    printf '%-34s %9.2f %14.0f %12s\n' "$label" "$med" "$(calc "$EVENTS / $med")" "$osz"
}

run "validate (reader only)" "" validate "$D/big.mlyze"
run "top" "" top "$D/big.mlyze"
run "export --format pprof" "$D/p.pb.gz" export --format pprof -o "$D/p.pb.gz" "$D/big.mlyze"
run "export --format speedscope" "$D/p.speedscope.json" export --format speedscope -o "$D/p.speedscope.json" "$D/big.mlyze"
run "export --format folded" "$D/p.folded" export --format folded -o "$D/p.folded" "$D/big.mlyze"
run "export --format json" "$D/p.json" export --format json -o "$D/p.json" "$D/big.mlyze"
run "export --format pprof --at 5" "$D/a.pb.gz" export --format pprof --at 5 -o "$D/a.pb.gz" "$D/big.mlyze"
run "flamegraph (svg)" "$D/f.svg" flamegraph -o "$D/f.svg" "$D/big.mlyze"
run "flamegraph (html)" "$D/f.html" flamegraph -o "$D/f.html" "$D/big.mlyze"
run "flamegraph --diff (two replays)" "$D/d.svg" flamegraph --diff "$D/big.mlyze" -o "$D/d.svg" "$D/big.mlyze"
run "timeline" "$D/t.svg" timeline -o "$D/t.svg" "$D/big.mlyze"
