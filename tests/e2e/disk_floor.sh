#!/usr/bin/env bash
# The spool's free-space floor: when the file system the spool is on has
# less than MEMLYZE_MIN_FREE_MB free, the payload stops recording new
# allocations (once, with one line on stderr), keeps recording the frees of
# the ones it has, and the trace says it stopped early. Here the floor is set
# above any disk's size, so it trips at the first look; with 0 there is no
# floor.
. "$(dirname "$0")/lib.sh"

cc -O2 -o "$T/churn" "$ROOT/bench/workloads/churn.c" -lpthread || fail "build churn"

MEMLYZE_MIN_FREE_MB=100000000 "$MEMLYZE" run -r 1 -o "$T/low.mlyze" -- "$T/churn" mixed 300000 \
    > "$T/low.out" 2> "$T/low.err"
rc=$?
check "the program runs to its end (exit 0, its own output)" bash -c "[ $rc = 0 ] && grep -q '^rss ' '$T/low.out'"
check "one line from the payload on stderr" \
    test "$(grep -c "spool's file system is almost full: new allocations are no longer recorded" "$T/low.err")" = 1
check "memlyze run says the recording is incomplete" grep -q "low.mlyze: recording incomplete; new allocations stopped" "$T/low.err"
check "the trace is valid" "$MEMLYZE" validate "$T/low.mlyze"
"$MEMLYZE" stats "$T/low.mlyze" > "$T/low.stats"
check "stats: a warning line and the counter" bash -c \
    "grep -q '^warning: .*spool.s file system was almost full' '$T/low.stats' && grep -Eq 'disk_low_stops +1' '$T/low.stats'"
check "top says it in its header" bash -c "'$MEMLYZE' top '$T/low.mlyze' | sed -n 2p | grep -q 'almost full'"
# Consistent: every FREE names a live recorded ALLOC, and frees of recorded
# objects go on after the last ALLOC (the stop ends allocations only).
"$MEMLYZE" dump "$T/low.mlyze" > "$T/low.dump"
check "stopped early: far fewer allocations than the program made" \
    bash -c "n=\$(grep -c '^alloc ' '$T/low.dump'); [ \$n -gt 0 ] && [ \$n -lt 100000 ]"
check "every FREE matches a live ALLOC; frees continue after the last ALLOC" python3 - "$T/low.dump" <<'PY'
import sys
live, last_alloc, frees_after, bad = set(), -1, 0, 0
lines = open(sys.argv[1]).read().split('\n')
for i, l in enumerate(lines):
    f = dict(kv.split('=', 1) for kv in l.split()[1:] if '=' in kv)
    if l.startswith('alloc '):
        live.add(f['addr']); last_alloc = i
    elif l.startswith('free '):
        if f['addr'] not in live: bad += 1
        live.discard(f['addr'])
for l in lines[last_alloc + 1:]:
    frees_after += l.startswith('free ')
sys.exit(0 if bad == 0 and frees_after > 0 else 1)
PY

MEMLYZE_MIN_FREE_MB=0 "$MEMLYZE" run -r 1 -o "$T/nofloor.mlyze" -- "$T/churn" mixed 300000 \
    > /dev/null 2> "$T/nofloor.err"
check "floor 0: no line, a complete trace" bash -c \
    "! grep -q 'almost full\|incomplete' '$T/nofloor.err' && ! '$MEMLYZE' stats '$T/nofloor.mlyze' | grep -q '^warning'"
check "floor 0: every allocation recorded" bash -c \
    "[ \$('$MEMLYZE' dump '$T/nofloor.mlyze' | grep -c '^alloc ') -ge 300000 ]"
finish
