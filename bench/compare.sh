#!/usr/bin/env bash
# compare.sh - memlyze against plain glibc, the interposer floor and heaptrack,
# in one table from one run: the churn workload (bench/workloads/churn.c) at
# 1 and THREADS threads, each configuration run RUNS times in alternation
# (round robin), medians reported.
#   plain      no interposer
#   floor      bench/floor/floor.c: LD_PRELOAD that only forwards to glibc
#   sampled    memlyze at the default 512 KiB, LD_PRELOAD
#   attached   memlyze at 512 KiB, attached (GOT mode) before the churn starts
#   exact      memlyze -r 1 (every allocation), LD_PRELOAD
#   heaptrack  heaptrack (every allocation), if installed
# Columns: Mops/s (one op = free + malloc), slowdown against plain and floor
# (>1 = slower; the median of the ratios within each round), the target's
# VmRSS at the end. Exact and heaptrack run OPS/10 operations per thread
# (rates are per operation, so comparable).
#   bench/compare.sh [RUNS]     env: OPS (per thread, default 2000000), THREADS (8)
# Last lines: exact mode's and heaptrack's RSS over plain (the memory goal).
set -u
cd "$(dirname "$0")/.."
B=${MLZ_BUILD:-build}
RUNS=${1:-9}
OPS=${OPS:-2000000}
THREADS=${THREADS:-8}
T=$(mktemp -d /tmp/mlz-compare.XXXXXX)
trap 'rm -rf "$T"' EXIT
cc -O2 -g -pthread -o "$T/churn" bench/workloads/churn.c || exit 1
cc -O2 -shared -fPIC -o "$T/floor.so" bench/floor/floor.c || exit 1
LIB=$(cd "$B" && pwd)/lib/libmemlyze-preload.so
ATTACH=$B/bin/memlyze-attach
for f in "$LIB" "$ATTACH"; do [ -e "$f" ] || { echo "compare.sh: $f missing (run make)" >&2; exit 1; }; done
CONFIGS="plain floor sampled attached exact"
if command -v heaptrack >/dev/null; then CONFIGS="$CONFIGS heaptrack"
else echo "compare.sh: heaptrack not installed (make deps): its rows are left out"; fi

# one CONFIG NTHREADS -> "ns_per_op rss_kib drain_ms process_ms" of one run
# (the CPU times of memlyze's drain thread and of the whole target, 0 0
# without a drain thread)
one() {
    local c=$1 n=$2 ops=$OPS out
    case $c in exact|heaptrack) ops=$((OPS / 10));; esac
    case $c in
    plain)    out=$("$T/churn" threads "$n" "$ops");;
    floor)    out=$(LD_PRELOAD="$T/floor.so" "$T/churn" threads "$n" "$ops");;
    sampled)  out=$(LD_PRELOAD="$LIB" MEMLYZE_SPOOL="$T/s" "$T/churn" threads "$n" "$ops");;
    exact)    out=$(LD_PRELOAD="$LIB" MEMLYZE_RATE=1 MEMLYZE_SPOOL="$T/s" "$T/churn" threads "$n" "$ops");;
    heaptrack) out=$(cd "$T" && heaptrack -o "$T/ht" "$T/churn" threads "$n" "$ops" 2>/dev/null);;
    attached)
        rm -f "$T/go"
        CHURN_GO="$T/go" "$T/churn" threads "$n" "$ops" >"$T/out" &
        local pid=$!
        # Attach to churn itself, not to the shell that is about to exec it.
        for _ in $(seq 500); do [ "$(readlink /proc/$pid/exe)" = "$T/churn" ] && break; sleep 0.01; done
        sleep 0.05
        "$ATTACH" -q -o "$T/a.mlyze" "$pid" >/dev/null || echo "compare.sh: attach failed" >&2
        touch "$T/go"
        wait "$pid"
        rm -rf "/tmp/memlyze-$pid"
        out=$(cat "$T/out");;
    esac
    rm -rf "$T"/s* "$T"/ht* "$T"/a.mlyze*
    local ns rss cpu
    ns=$(grep -Em1 '^[0-9.]+$' <<<"$out")
    rss=$(awk '/^rss / { print $2 }' <<<"$out")
    cpu=$(awk '/^cpu_ms / { print $2, $3 }' <<<"$out")
    echo "${ns:-nan} ${rss:-0} ${cpu:-0 0}"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# The median over rounds of config A's time over config B's in the same
# round: this VM's speed changes by up to 2x from one minute to the next,
# and a ratio of two medians then compares runs made in different states.
ratio() { paste -d' ' <(awk '{ print $1 }' "$1") <(awk '{ print $1 }' "$2") | awk '{ print $1 / $2 }' | median; }

for n in 1 "$THREADS"; do
    for r in $(seq "$RUNS"); do
        for c in $CONFIGS; do one "$c" "$n" >>"$T/r.$c.$n"; done
    done
done

echo "churn: malloc/free of 16-1024 B over 64 live blocks per thread; medians of $RUNS alternating runs"
echo "(x_plain, x_floor: medians of the ratios within each round, every config run once per round)"
printf '%-10s %7s %9s %9s %9s %9s\n' config threads Mops/s x_plain x_floor rss_KiB
for n in 1 "$THREADS"; do
    for c in $CONFIGS; do
        ns=$(awk '{ print $1 }' "$T/r.$c.$n" | median)
        rss=$(awk '{ print $2 }' "$T/r.$c.$n" | median)
        # churn prints wall ns per op of one thread; all threads run at once.
        printf '%-10s %7d %9.2f %9.2f %9.2f %9d\n' "$c" "$n" "$(echo "$n * 1000 / $ns" | bc -l)" \
            "$(ratio "$T/r.$c.$n" "$T/r.plain.$n")" "$(ratio "$T/r.$c.$n" "$T/r.floor.$n")" "$rss"
    done
done
# What the drain thread (rings to spool: the writer) costs the target: its
# share of the process's CPU time, summed over the runs.
for c in sampled attached exact; do
    for n in 1 "$THREADS"; do
        awk -v c="$c" -v n="$n" '{ d += $3; a += $4 }
            END { if (a > 0) printf "%s, %d threads: drain thread %.1f%% of the target'"'"'s CPU (%.0f of %.0f ms over %d runs)\n", c, n, 100 * d / a, d, a, NR }' "$T/r.$c.$n"
    done
done
# The issue's memory goal: exact mode's RSS over plain no larger than heaptrack's.
if [ -e "$T/r.heaptrack.1" ]; then
    for n in 1 "$THREADS"; do
        p=$(awk '{ print $2 }' "$T/r.plain.$n" | median)
        e=$(awk '{ print $2 }' "$T/r.exact.$n" | median)
        h=$(awk '{ print $2 }' "$T/r.heaptrack.$n" | median)
        echo "$n threads: RSS over plain: exact $((e - p)) KiB, heaptrack $((h - p)) KiB"
    done
fi
