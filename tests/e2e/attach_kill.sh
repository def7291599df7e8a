#!/usr/bin/env bash
# The injector killed (SIGKILL) at random moments of attach and detach -
# inside the remote dlopen, inside memlyze_attach, while every thread is
# held - must never harm the target: every injected call completes on its
# own and the borrowed thread restores itself. The target checks its own
# data; afterwards attach, snapshot and detach still work.
#   KILLS=N (default 100; make soak runs more)
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { echo "SKIP: attach_kill (no libmemlyze.so in the build)"; finish; }
KILLS=${KILLS:-100}
start_target k churn 4
died=0; att=0; det=0
for i in $(seq "$KILLS"); do
    # Half the kills hit attach, half detach; the delay covers the whole
    # run (attach takes ~50-250 ms here: reading debug info, then ~10-30 ms
    # with the target's threads held), so kills land in every step.
    if [ $((RANDOM % 2)) -eq 0 ]; then
        "$ATTACH" -q -o "$T/k$i.mlyze" "$TP" >/dev/null 2>&1 & att=$((att + 1))
    else
        "$DETACH" -q --no-finalize "$TP" >/dev/null 2>&1 & det=$((det + 1))
    fi
    inj=$!
    sleep "$(printf '0.%03d' $((RANDOM % 300)))"
    kill -9 "$inj" 2>/dev/null
    wait "$inj" 2>/dev/null
    if ! kill -0 "$TP" 2>/dev/null; then died=1; break; fi
done
check "kill: the target survived $KILLS kills ($att of attach, $det of detach)" [ "$died" -eq 0 ]
sleep 0.5
# Whatever state the last kill left: detach (if attached), then a full cycle.
"$DETACH" -q --no-finalize "$TP" >/dev/null 2>&1
rm -rf "/tmp/memlyze-$TP"
check "kill: attach afterwards" "$ATTACH" -q -o "$T/final.mlyze" "$TP"
check "kill: snapshot afterwards" "$MEMLYZE" snapshot -o "$T/final-snap.mlyze" "$TP"
check "kill: the snapshot is valid" "$MEMLYZE" validate "$T/final-snap.mlyze"
check "kill: detach afterwards" "$DETACH" -q "$TP"
check "kill: the trace is valid" "$MEMLYZE" validate "$T/final.mlyze"
check "kill: no thread was left stopped or traced" bash -c "! grep -q '^TracerPid:[[:space:]]*[1-9]' /proc/$TP/status && [ \"\$(awk '/^State:/{print \$2}' /proc/$TP/status)\" != t ]"
finish_target k
cleanup_state "$TP"
finish
