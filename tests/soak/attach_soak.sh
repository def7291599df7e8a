#!/usr/bin/env bash
# make soak (not in CI): 1000 attach/detach cycles on a 16-thread churn target
# that verifies its data, then the lock-holder cycles and the kill test at
# soak length. Prints the worst attach time and target pause; RSS must come
# back within 1 MiB. Shorter versions of each run in make test.
. "$(dirname "$0")/../e2e/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
SOAK_CYCLES=${SOAK_CYCLES:-1000}
# A twin started alike and never attached: its heap grows by itself as the
# churn runs (about 0.7 MB in the first minutes here), and only growth
# beyond the twin's is ours.
start_target twin churn 16
TWIN=$TP
start_target soak churn 16
rss() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
"$ATTACH" -q -o "$T/warm.mlyze" "$TP" && "$DETACH" -q --no-finalize "$TP"
r0=$(rss $TP); t0=$(rss $TWIN); bad=0; worst_total=0; worst_pause=0
for i in $(seq "$SOAK_CYCLES"); do
    out=$("$ATTACH" -o "$T/s.mlyze" "$TP" 2>&1) || { bad=$((bad + 1)); echo "$out" | head -1; }
    p=$(sed -n 's/.*target paused \([0-9.]*\) ms.*total \([0-9.]*\) ms.*/\1 \2/p' <<<"$out")
    set -- $p
    [ -n "${1:-}" ] && worst_pause=$(echo "if ($1 > $worst_pause) $1 else $worst_pause" | bc)
    [ -n "${2:-}" ] && worst_total=$(echo "if ($2 > $worst_total) $2 else $worst_total" | bc)
    "$DETACH" -q --no-finalize "$TP" 2>&1 | head -1 | grep . && bad=$((bad + 1))
done
r1=$(rss $TP); t1=$(rss $TWIN)
echo "soak: $SOAK_CYCLES cycles, worst attach $worst_total ms, worst pause $worst_pause ms, RSS $r0 -> $r1 kB (unattached twin: $t0 -> $t1 kB)"
check "soak: every attach and detach succeeded ($bad failed)" [ "$bad" -eq 0 ]
check "soak: RSS grew at most 1 MiB more than the twin's ($r0 -> $r1 kB; twin $t0 -> $t1 kB)" \
    bash -c "[ -n '$r1' ] && [ -n '$t1' ] && [ \$(( (${r1:-0} - $r0) - (${t1:-0} - $t0) )) -le 1024 ]"
finish_target soak
cleanup_state "$TP"
TP=$TWIN
finish_target twin
CYCLES=500 bash "$ROOT/tests/e2e/attach_locks.sh" || failures=$((failures + 1))
KILLS=500 bash "$ROOT/tests/e2e/attach_kill.sh" || failures=$((failures + 1))
finish
