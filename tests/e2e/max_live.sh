#!/usr/bin/env bash
# --max-live sizes the heap map (memlyze-attach and memlyze run): an exact
# recording of more live objects than the default map holds lost every one
# past it, and only `MEMLYZE_MAP_LOG2`, undocumented and out of attach's
# reach, gave room. A map that fills says so in the loss line, naming the
# option. (Small maps here: the default holds about 600k.)
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "max_live" "no libmemlyze.so in the build"; finish; }

build_linecmd
site() { "$MEMLYZE" top --json -n 20 "$1" | python3 -c "
import json, sys
d = json.load(sys.stdin)
print(int(sum(s['live_count'] for s in d['sites'] if any('many_site' in f for f in s['frames']))))"; }

# memlyze run: 5000 objects into a map for 1000 (2048 slots), then into one for 6000.
printf 'many\n' > "$T/in"
out=$("$MEMLYZE" run -r 1 --max-live 1000 -o "$T/small.mlyze" -- "$T/linecmd" < "$T/in" 2>&1 >/dev/null)
check "run --max-live 1000: the loss line says the map was full and names --max-live" \
    bash -c "grep -q 'found the heap map full (2048 slots): memlyze-attach and memlyze run take --max-live N' <<<\"\$0\"" "$out"
check "... and so do the reports of the trace" \
    bash -c "'$MEMLYZE' top '$T/small.mlyze' | grep -q 'found the heap map full (2048 slots)'"
out=$("$MEMLYZE" run -r 1 --max-live 6000 -o "$T/big.mlyze" -- "$T/linecmd" < "$T/in" 2>&1 >/dev/null)
check "run --max-live 6000: nothing lost" bash -c "! grep -q 'events lost' <<<\"\$0\"" "$out"
check "... every object of the site recorded (5000)" test "$(site "$T/big.mlyze")" = 5000
check "run --max-live 0 and 300m: refused" bash -c "! '$MEMLYZE' run --max-live 0 -- true 2>/dev/null &&
    '$MEMLYZE' run --max-live 300m -- true 2>&1 | grep -q -- '--max-live takes 1 to 128m'"

# memlyze-attach: the same through the payload's config.
talk_start "$T/linecmd"
check "attach -r 1 --max-live 6000" "$B/bin/memlyze-attach" -q -r 1 --max-live 6000 -o "$T/a.mlyze" "$pid"
say many
"$MEMLYZE" snapshot -q -o "$T/a.snap.mlyze" "$pid"
check "attached: the snapshot holds all 5000 objects" test "$(site "$T/a.snap.mlyze")" = 5000
check "... in a map of 16384 slots" bash -c "'$MEMLYZE' stats '$T/a.snap.mlyze' | grep -q 'map_capacity *16384$'"
check "detach" "$B/bin/memlyze-detach" -q "$pid"
talk_end
cleanup_state "$pid"
talk_start "$T/linecmd"
check "attach -r 1 --max-live 1000" "$B/bin/memlyze-attach" -q -r 1 --max-live 1000 -o "$T/b.mlyze" "$pid"
say many
out=$("$B/bin/memlyze-detach" "$pid" 2>&1)
check "attached, map full: detach's loss line names --max-live" \
    bash -c "grep -q 'found the heap map full (2048 slots)' <<<\"\$0\"" "$out"
talk_end
cleanup_state "$pid"
check "memlyze-attach --max-live 0: refused" bash -c "'$B/bin/memlyze-attach' --max-live 0 1 2>&1 | grep -q -- '--max-live takes 1 to 128m'"
finish
