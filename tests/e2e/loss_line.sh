#!/usr/bin/env bash
# A trace whose payload counters show a loss (samples given up, frees not
# recorded) says so in one line in the headers of `top` and `stats`; a trace
# without loss prints no such line. (memlyze-detach's and memlyze run's line
# come from the same function: tests/e2e/overload.sh checks detach's.)
. "$(dirname "$0")/lib.sh"
FIX="$ROOT/tests/e2e/reports/fixture.dump"
# The meta line is escaped text: add the counters object by substitution.
sed 's/^meta {"kind":"trace",/meta {"kind":"trace","counters":{"ring_drops":7,"no_ring":0,"map_full_drops":1,"frees_lost":2},/' \
    "$FIX" >"$T/lossy.dump"
check "the lossy fixture has counters" grep -q '"frees_lost":2' "$T/lossy.dump"
"$MEMLYZE" undump -o "$T/lossy.mlyze" "$T/lossy.dump" || fail "undump the lossy fixture"
"$MEMLYZE" undump -o "$T/clean.mlyze" "$FIX" || fail "undump the fixture"
want='events lost while recording: 8 samples given up (estimates are low), 2 frees not recorded'
check "top: the header says what was lost" bash -c "'$MEMLYZE' top '$T/lossy.mlyze' | head -3 | grep -qF 'warning: $want'"
check "stats: says what was lost" bash -c "'$MEMLYZE' stats '$T/lossy.mlyze' | grep -qF '$want'"
check "top: no loss line for a trace without loss" bash -c "! '$MEMLYZE' top '$T/clean.mlyze' | grep -q 'events lost'"
check "stats: no loss line for a trace without loss" bash -c "! '$MEMLYZE' stats '$T/clean.mlyze' | grep -q 'events lost'"
finish
