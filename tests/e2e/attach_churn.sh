#!/usr/bin/env bash
# The real payload on a 16-thread malloc churn: attach -> run -> detach ->
# finalize gives a valid trace; then one attach to 64 churning threads (it
# must not wait for threads that only wait for an arena lock); then 100
# attach/detach cycles on a 4-thread churn (fewer busy threads keep the
# script within a minute on 2 cores): no crash, the target's checksum
# unchanged, its RSS back within 1 MB.
# Without a libmemlyze.so exporting memlyze_attach, the stand-in payload is
# used for the cycles and the trace checks print SKIP.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
P=${REAL_PAYLOAD:-$TESTLIB}
A() { timeout 30 "$ATTACH" --payload "$P" "$@"; }
D() { timeout 30 "$DETACH" "$@"; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

start_target churn churn 16
CP=$TP
if [ -n "$REAL_PAYLOAD" ]; then
    out=$(A -o "$T/churn.mlyze" "$TP" 2>&1)
    check "churn: attach with the real payload" grep -q "attached to $TP (target): [0-9]* modules, [1-9][0-9]* slots patched" <<<"$out"
    sleep 0.5
    check "churn: detach and finalize" D -q "$TP"
    check "churn: the trace is valid" "$MEMLYZE" validate "$T/churn.mlyze"
    check "churn: the trace has samples" bash -c "'$MEMLYZE' stats '$T/churn.mlyze' | grep -Eq 'alloc +[1-9]'"
    check "churn: state directory removed" test ! -e "/tmp/memlyze-$TP"
    check "churn: detach again is a one-line error" bash -c "out=\$('$DETACH' $TP 2>&1); [ \$? -ne 0 ] && [ \$(wc -l <<<\"\$out\") -eq 1 ]"
else
    skip "churn: trace through the real payload" "no libmemlyze.so exporting memlyze_attach in $B"
fi
# Detach in a forked child must leave the parent's profile intact.
if [ -n "$REAL_PAYLOAD" ]; then
    start_target fork fork
    A -q -o "$T/fork.mlyze" "$TP"
    touch "$T/fork.stop.fork"
    for _ in $(seq 100); do grep -q '^child ' "$T/fork.tids" && break; sleep 0.02; done
    child=$(tid_of fork child)
    check "fork: detach the child (it inherited the patched GOT)" D -q "$child"
    check "fork: detach the parent, its trace finalized" D -q "$TP"
    check "fork: the parent's trace is valid" "$MEMLYZE" validate "$T/fork.mlyze"
    FP=$TP; finish_target fork; cleanup_state "$FP"
    TP=$CP
else
    skip "fork: detach in a forked child" "no libmemlyze.so exporting memlyze_attach in $B"
fi
finish_target churn
cleanup_state "$TP"

# 64 threads contending for the arenas on a small machine: at any moment some
# thread waits in futex for an arena's mutex. A waiter holds no malloc lock
# (injector/safepoint.c); counted as a parked holder, every attach here was
# refused when its timeout ran out.
start_target many churn 64
out=$(A -q -o "$T/many.mlyze" --timeout 10000 "$TP" 2>&1)
rc=$?
check "64 churning threads: attach succeeds" test "$rc" -eq 0
[ "$rc" -eq 0 ] || echo "$out" | head -2
if [ "$rc" -eq 0 ]; then
    check "64 churning threads: detach" D -q --no-finalize "$TP"
fi
finish_target many
cleanup_state "$TP"

start_target cyc churn 4

# RSS baseline: after a few cycles (the payload's code stays mapped by
# design) and once the churn's own arenas have grown to their steady size
# (they add ~0.4 MB in the first seconds, attached or not).
for _ in 1 2 3; do A -q -o "$T/warm.mlyze" "$TP" && D -q "$TP"; rm -f "$T/warm.mlyze"; done
sleep 4
rss0=$(rss_kb "$TP")
ok=0
for i in $(seq 100); do
    # Finalize (checked above) is left out here: it runs outside the target.
    A -q -o "$T/c.mlyze" "$TP" >"$T/cycle.err" 2>&1 || break
    D -q --no-finalize "$TP" >>"$T/cycle.err" 2>&1 || break
    rm -rf "/tmp/memlyze-$TP"
    kill -0 "$TP" 2>/dev/null || break
    ok=$i
done
check "cycles: 100 attach/detach cycles" test "$ok" -eq 100
[ "$ok" -eq 100 ] || head -3 "$T/cycle.err"
sleep 0.3
rss1=$(rss_kb "$TP")
echo "cycles: RSS ${rss0} kB -> ${rss1} kB"
check "cycles: RSS back within 1 MB (${rss0} -> ${rss1} kB)" test $((rss1 - rss0)) -le 1024
sum0=$(awk '/^checksum/ { print $2; exit }' "$T/cyc.out")
finish_target cyc
check "cycles: checksum unchanged" bash -c "grep -q '^ok checksum $sum0\$' '$T/cyc.out'"
cleanup_state "$TP"

# Two exact sessions in a row: each trace's counters are its session's own
# (the payload's counters accumulate over the process's sessions).
start_target two churn 2
for k in 1 2; do
    A -q -r 1 -o "$T/two$k.mlyze" "$TP" || fail "two: attach $k"
    sleep 0.3
    D -q "$TP" || fail "two: detach $k"
done
finish_target two
for k in 1 2; do
    check "two: session $k's trace counts its own samples" bash -c \
        "s=\$('$MEMLYZE' stats '$T/two$k.mlyze'); a=\$(awk '\$1 == \"alloc\" { print \$2 }' <<<\"\$s\");
         c=\$(awk '\$1 == \"samples\" { print \$2 }' <<<\"\$s\"); [ -n \"\$a\" ] && [ \"\$a\" = \"\$c\" ]"
done
cleanup_state "$TP"
finish
