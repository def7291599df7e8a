#!/usr/bin/env bash
# Overload: 2 and 8 threads of malloc/free churn attached at -r 65536 for
# 5 s produce more events than the rings hold at once. The trace must stay
# true: its live bytes at the end equal those of a snapshot of the heap map
# taken just before detach, it has no unmatched frees, and no FREE was lost
# (a lost FREE is a phantom object; before the fix the trace claimed 60x
# the snapshot's bytes). The churn replaces its whole live set within
# microseconds, so snapshot and end of trace hold different samples of the
# same heap: they must agree within 1.5 times their combined 95% interval
# (about 3 sigma).
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
if [ -z "$REAL_PAYLOAD" ]; then echo "SKIP: overload (no libmemlyze.so with memlyze_attach in $B)"; finish; fi
A() { timeout 30 "$ATTACH" --payload "$REAL_PAYLOAD" "$@"; }
json_num() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

for n in 2 8; do
    start_target "ov$n" churn "$n"
    A -q -r 65536 -o "$T/ov$n.mlyze" "$TP"
    sleep 5
    "$MEMLYZE" snapshot -q -o "$T/snap$n.mlyze" "$TP"
    timeout 30 "$DETACH" -q "$TP" >"$T/detach$n.out" 2>&1
    OTP=$TP; finish_target "ov$n"; cleanup_state "$OTP"
    "$MEMLYZE" top --json -n 1 "$T/ov$n.mlyze" >"$T/ov$n.json"
    "$MEMLYZE" top --json -n 1 "$T/snap$n.mlyze" >"$T/snap$n.json"
    "$MEMLYZE" stats "$T/ov$n.mlyze" >"$T/ov$n.stats"
    tl=$(json_num "$T/ov$n.json" live_bytes); sl=$(json_num "$T/snap$n.json" live_bytes)
    sci=$(json_num "$T/snap$n.json" live_bytes_ci95); tci=$(json_num "$T/ov$n.json" live_bytes_ci95)
    echo "$n threads: trace live $tl ± $tci B, snapshot $sl ± $sci B; $(grep -E 'ring_drops|frees_lost' "$T/ov$n.stats" | tr -s ' ' | tr '\n' ';')"
    check "$n threads: trace's live bytes = snapshot's ($tl vs $sl)" python3 -c \
        "import sys; t, s, a, b = map(float, sys.argv[1:]); sys.exit(abs(t - s) > 1.5 * (a * a + b * b) ** 0.5)" \
        "$tl" "$sl" "$tci" "$sci"
    check "$n threads: no unmatched frees" bash -c "! grep -q '^unmatched frees' '$T/ov$n.stats'"
    check "$n threads: no FREE lost" grep -Eq '^ +frees_lost +0$' "$T/ov$n.stats"
    check "$n threads: the churn was sampled" grep -Eq '^ +samples +[0-9]{5,}$' "$T/ov$n.stats"
    # Samples given up (rings full) are said once by detach and in report headers.
    drops=$(awk '$1 == "ring_drops" || $1 == "no_ring" || $1 == "map_full_drops" { s += $2 } END { print s + 0 }' "$T/ov$n.stats")
    if [ "$drops" -gt 0 ]; then
        check "$n threads: detach says $drops samples were given up" grep -q "events lost while recording: $drops samples given up" "$T/detach$n.out"
        check "$n threads: top's header says it" bash -c "'$MEMLYZE' top '$T/ov$n.mlyze' | sed -n 2,3p | grep -q '^warning: events lost'"
    else
        check "$n threads: detach prints no loss line" bash -c "! grep -q 'events lost' '$T/detach$n.out'"
    fi
done

# Far past what can be written (8 threads at a 16-byte rate): the payload
# raises its rate, for the rest of the session, instead of giving samples
# up. The trace names each rate in a MARKER before the ALLOCs sampled at it
# and stays true (live bytes = a snapshot's, no unmatched or lost frees);
# the snapshot's entries carry their rate too; detach and the reports say it.
start_target "raise" churn 8
A -q -r 16 -o "$T/raise.mlyze" "$TP"
sleep 3
"$MEMLYZE" snapshot -q -o "$T/snapr.mlyze" "$TP"
timeout 30 "$DETACH" -q "$TP" >"$T/detachr.out" 2>&1
OTP=$TP; finish_target "raise"; cleanup_state "$OTP"
"$MEMLYZE" stats "$T/raise.mlyze" >"$T/raise.stats"
"$MEMLYZE" top --json -n 1 "$T/raise.mlyze" >"$T/raise.json"
"$MEMLYZE" top --json -n 1 "$T/snapr.mlyze" >"$T/snapr.json"
"$MEMLYZE" dump "$T/raise.mlyze" >"$T/raise.dump"
"$MEMLYZE" dump "$T/snapr.mlyze" >"$T/snapr.dump"
shift_final=$(awk '$1 == "rate_shift" { print $2 }' "$T/raise.stats")
echo "raise: final shift ${shift_final:-none}; $(cat "$T/detachr.out")"
check "raise: the payload raised its rate" test "${shift_final:-0}" -ge 1
check "raise: detach says so" grep -q "sampling rate raised $((1 << ${shift_final:-0}))x" "$T/detachr.out"
check "raise: stats' rate line says so" grep -q '^sampling rate: .*raised up to' "$T/raise.stats"
markers=$(grep -c '^marker' "$T/raise.dump")
check "raise: the trace names the rates in markers ($markers)" test "$markers" -ge $((shift_final + 2))
check "raise: no FREE lost" grep -Eq '^ +frees_lost +0$' "$T/raise.stats"
check "raise: no unmatched frees" bash -c "! grep -q '^unmatched frees' '$T/raise.stats'"
check "raise: the snapshot marks its samples' rate" test "$(grep -c '^marker' "$T/snapr.dump")" -ge 2
check "raise: the snapshot validates" "$MEMLYZE" validate "$T/snapr.mlyze"
tl=$(json_num "$T/raise.json" live_bytes); sl=$(json_num "$T/snapr.json" live_bytes)
tci=$(json_num "$T/raise.json" live_bytes_ci95); sci=$(json_num "$T/snapr.json" live_bytes_ci95)
check "raise: trace's live bytes = snapshot's ($tl ± $tci vs $sl ± $sci)" python3 -c \
    "import sys; t, s, a, b = map(float, sys.argv[1:]); sys.exit(abs(t - s) > 1.5 * (a * a + b * b) ** 0.5)" \
    "$tl" "$sl" "$tci" "$sci"
finish
