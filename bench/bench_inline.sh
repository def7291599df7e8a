#!/usr/bin/env bash
# Cost of an inline-hooked allocator (jemalloc linked into the executable,
# reached through the jump at its entry and the trampoline) next to the GOT
# path (glibc's malloc through patched slots), each against the same program
# unprofiled, at the default 512 KiB rate, all in one run: the four
# configurations alternate, RUNS times, medians compared. Every run is
# pinned to the last CPU, so they all see the same core and caches.
set -eu
cd "$(dirname "$0")/.."
B=${MLZ_BUILD:-build}
RUNS=${RUNS:-9}
PAIRS=${PAIRS:-20000000}
JE=/usr/lib/x86_64-linux-gnu/libjemalloc_pic.a
[ -f "$JE" ] || { echo "bench_inline: skipped (libjemalloc-dev not installed)"; exit 0; }
mkdir -p "$B/bench"
cc -O2 -g -pthread -o "$B/bench/churn" bench/workloads/churn.c
cc -O2 -g -pthread -o "$B/bench/churn_je" bench/workloads/churn.c "$JE" -ldl -lm
LIB=$(pwd)/$B/lib/libmemlyze.so
SP=$(mktemp -d /tmp/mlz-bench.XXXXXX)
trap 'rm -rf "$SP"' EXIT

PIN=; command -v taskset >/dev/null && PIN="taskset -c $(( $(nproc) - 1 ))"
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
one() {   # one BINARY [profiled] -> ns per malloc+free pair
    if [ "${2:-}" = profiled ]; then
        LD_PRELOAD="$LIB" MEMLYZE_MODE=got MEMLYZE_SPOOL="$SP/s" $PIN "$1" pair "$PAIRS" | head -1
        rm -f "$SP"/s*
    else
        $PIN "$1" pair "$PAIRS" | head -1
    fi
}
# the inline hooks must really be there, or the figure means nothing
if ! "$B/bin/memlyze" run --got --coverage -o "$SP/c.mlyze" -- "$B/bench/churn_je" pair 1000 2>&1 >/dev/null |
        grep -q 'inline hook malloc at .*installed'; then
    echo "bench_inline: jemalloc's malloc did not get its inline hook" >&2
    exit 1
fi
for i in $(seq "$RUNS"); do
    echo "gb $(one "$B/bench/churn")"
    echo "gp $(one "$B/bench/churn" profiled)"
    echo "jb $(one "$B/bench/churn_je")"
    echo "jp $(one "$B/bench/churn_je" profiled)"
done > "$SP/all"
m() { awk -v k="$1" '$1 == k { print $2 }' "$SP/all" | median; }
gb=$(m gb) gp=$(m gp) jb=$(m jb) jp=$(m jp)
printf 'GOT path (glibc malloc):        %6.2f ns alone, %6.2f ns profiled (512 KiB): %.3fx, +%.2f ns per pair\n' \
    "$gb" "$gp" "$(echo "$gp / $gb" | bc -l)" "$(echo "$gp - $gb" | bc -l)"
printf 'inline path (jemalloc in exe):  %6.2f ns alone, %6.2f ns profiled (512 KiB): %.3fx, +%.2f ns per pair\n' \
    "$jb" "$jp" "$(echo "$jp / $jb" | bc -l)" "$(echo "$jp - $jb" | bc -l)"
