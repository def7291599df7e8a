#!/usr/bin/env bash
# The real payload on a 16-thread malloc churn: attach -> run -> detach ->
# finalize gives a valid trace; then 100 attach/detach cycles: no crash,
# the target's checksum unchanged, its RSS back within 1 MB of the start.
# Without a libmemlyze.so exporting memlyze_attach, the stand-in payload is
# used for the cycles and the trace checks are skipped.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
P=${REAL_PAYLOAD:-$TESTLIB}
A() { timeout 30 "$ATTACH" --payload "$P" "$@"; }
D() { timeout 30 "$DETACH" "$@"; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

start_target churn churn 16
if [ -n "$REAL_PAYLOAD" ]; then
    out=$(A -o "$T/churn.mlyze" "$TP" 2>&1)
    check "churn: attach with the real payload" grep -q "attached to $TP (target): [0-9]* modules, [1-9][0-9]* slots patched" <<<"$out"
    sleep 0.5
    check "churn: detach and finalize" D -q "$TP"
    check "churn: the trace is valid" "$MEMLYZE" validate "$T/churn.mlyze"
    check "churn: the trace has samples" bash -c "'$MEMLYZE' stats '$T/churn.mlyze' | grep -Eq 'alloc +[1-9]'"
    check "churn: state directory removed" test ! -e "/tmp/memlyze-$TP"
    check "churn: detach again is a one-line error" bash -c "out=\$('$DETACH' $TP 2>&1); [ \$? -ne 0 ] && [ \$(wc -l <<<\"\$out\") -eq 1 ]"
fi
# RSS baseline: after one cycle (the payload's code stays mapped by design).
A -q -o "$T/warm.mlyze" "$TP" && D -q "$TP" && rm -f "$T/warm.mlyze"
sleep 0.3
rss0=$(rss_kb "$TP")
ok=0
for i in $(seq 100); do
    A -q -o "$T/c.mlyze" "$TP" >"$T/cycle.err" 2>&1 || break
    D -q "$TP" >>"$T/cycle.err" 2>&1 || break
    rm -f "$T/c.mlyze"
    kill -0 "$TP" 2>/dev/null || break
    ok=$i
done
check "cycles: 100 attach/detach cycles" test "$ok" -eq 100
[ "$ok" -eq 100 ] || head -3 "$T/cycle.err"
sleep 0.3
rss1=$(rss_kb "$TP")
echo "cycles: RSS ${rss0} kB -> ${rss1} kB"
check "cycles: RSS back within 1 MB (${rss0} -> ${rss1} kB)" test $((rss1 - rss0)) -le 1024
sum0=$(awk '/^checksum/ { print $2; exit }' "$T/churn.out")
finish_target churn
check "cycles: checksum unchanged" bash -c "grep -q '^ok checksum $sum0\$' '$T/churn.out'"
cleanup_state "$TP"
finish
