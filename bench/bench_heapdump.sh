#!/usr/bin/env bash
# memlyze heapdump of a process holding N objects of SIZE bytes (default
# 10^6 x 1 KiB = 1 GiB, exact mode): wall time and the target's pause
# (printed by heapdump), with and without --short-pause, against `memlyze snapshot` of the same process (the
# heap map alone) as the baseline, medians of RUNS alternating runs; then
# leakcheck on the dump. Run it niced: it moves a few GiB through memory.
set -eu
cd "$(dirname "$0")/.."
B=${MLZ_BUILD:-build}
RUNS=${RUNS:-3}
N=${N:-1000000}
SIZE=${SIZE:-1024}
cc -O2 -g -o "$B/bench/graphheap" bench/workloads/graphheap.c
T=$(mktemp -d "${TMPDIR:-/tmp}/mlz-bheap.XXXXXX")
trap 'exec 9>&- 2>/dev/null; kill $HP 2>/dev/null; rm -rf "$T"' EXIT
mkfifo "$T/in"
MEMLYZE_MODE=got MEMLYZE_RATE=1 MEMLYZE_MAP_LOG2=21 MEMLYZE_SPOOL="$T/spool" \
    LD_PRELOAD="$(pwd)/$B/lib/libmemlyze.so" "$B/bench/graphheap" "$N" "$SIZE" < "$T/in" > "$T/out" &
HP=$!
exec 9>"$T/in"
until grep -q ready "$T/out" 2>/dev/null; do sleep 0.2; done
med() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
snap=(); dump=(); pause=(); sdump=(); spause=()
for i in $(seq "$RUNS"); do
    s=$(date +%s%N)
    "$B/bin/memlyze" snapshot -q -o "$T/s$i.mlyze" "$HP"
    e=$(date +%s%N)
    snap+=($(( (e - s) / 1000000 )))
    s=$(date +%s%N)
    out=$("$B/bin/memlyze" heapdump -o "$T/d$i.arc" "$HP")
    e=$(date +%s%N)
    dump+=($(( (e - s) / 1000000 )))
    pause+=($(printf '%s\n' "$out" | sed -n 's/.*target paused \([0-9.]*\) ms.*/\1/p'))
    s=$(date +%s%N)
    out=$("$B/bin/memlyze" heapdump --short-pause -o "$T/p$i.arc" "$HP")
    e=$(date +%s%N)
    sdump+=($(( (e - s) / 1000000 )))
    spause+=($(printf '%s\n' "$out" | sed -n 's/.*target paused \([0-9.]*\) ms.*/\1/p'))
    rm -f "$T/p$i.arc" "$T/p$i.mlyze"
    [ "$i" -lt "$RUNS" ] && rm -f "$T/d$i.arc" "$T/d$i.mlyze" "$T/s$i.mlyze"
done
ms=$(printf '%s\n' "${snap[@]}" | med); md=$(printf '%s\n' "${dump[@]}" | med); mp=$(printf '%s\n' "${pause[@]}" | med)
msd=$(printf '%s\n' "${sdump[@]}" | med); msp=$(printf '%s\n' "${spause[@]}" | med)
arcsz=$(stat -c %s "$T/d$RUNS.arc")
s=$(date +%s%N)
leaks=$("$B/bin/memlyze" leakcheck "$T/d$RUNS.arc" | sed -n 's/^definitely leaked: //p')
e=$(date +%s%N)
lc=$(( (e - s) / 1000000 ))
printf 'objects %s x %s B; .arc %s MiB\n' "$N" "$SIZE" "$((arcsz >> 20))"
printf '%-28s %10s\n' "median of $RUNS" "ms"
printf '%-28s %10s\n' "snapshot (baseline)" "$ms"
printf '%-28s %10s   %.1fx snapshot\n' "heapdump" "$md" "$(echo "$md / $ms" | bc -l)"
printf '%-28s %10s   %.1fx snapshot\n' "  of which target paused" "$mp" "$(echo "$mp / $ms" | bc -l)"
printf '%-28s %10s   %.1fx snapshot\n' "heapdump --short-pause" "$msd" "$(echo "$msd / $ms" | bc -l)"
printf '%-28s %10s   %.3fx snapshot\n' "  of which target paused" "$msp" "$(echo "$msp / $ms" | bc -l)"
printf '%-28s %10s   (%s)\n' "leakcheck on the dump" "$lc" "$leaks"
