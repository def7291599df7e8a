#!/usr/bin/env bash
# A detach borrows the payload's idle drain thread when it can (the safest
# thread: injector/safepoint.c), and there waits for the threads still in a
# hook; one of them may be waiting for room in its full ring, which only
# that drain thread empties. The detach drains while it waits (events.c:
# mlz__drain_assist): else that thread stalled for a second and its event
# was lost ("1 frees not recorded"). Exact mode on a thread that only
# mallocs and frees, the detach forced onto the drain thread with the other
# threads let go at once (--hold 0 --thread DRAIN): nothing lost, the
# thread lent for well under the second a stalled hook waits.
. "$(dirname "$0")/lib.sh"
ATTACH="$B/bin/memlyze-attach"
DETACH="$B/bin/memlyze-detach"
P=
trap '[ -n "$P" ] && kill -9 $P 2>/dev/null; rm -rf "$T"' EXIT
cc -O2 -g -o "$T/tight" "$ROOT/tests/targets/alloc_tight.c" || { fail "build alloc_tight"; finish; }
"$T/tight" >"$T/out" 2>&1 &
P=$!
for _ in $(seq 500); do grep -q ready "$T/out" && break; sleep 0.01; done
lost=0 slow=0 ok=0
for i in 1 2 3 4 5 6; do
    rm -f "$T"/t.mlyze*
    "$ATTACH" -q -r 1 -o "$T/t.mlyze" "$P" || { fail "attach $i"; break; }
    sleep 0.2
    drain=
    for d in /proc/$P/task/*; do [ "$(cat "$d/comm" 2>/dev/null)" = memlyze-drain ] && drain=${d##*/}; done
    [ -n "$drain" ] || { fail "attach $i: the drain thread is there"; break; }
    "$DETACH" -v --hold 0 --thread "$drain" "$P" >"$T/d.$i" 2>&1 || { fail "detach $i" "$(tail -3 "$T/d.$i")"; break; }
    grep -q "lost while recording" "$T/d.$i" && lost=$((lost + 1))
    ms=$(grep -o 'lent [0-9.]* ms' "$T/d.$i" | awk '{ print int($2) }')
    [ "${ms:-99999}" -lt 900 ] || slow=$((slow + 1))
    ok=$i
done
check "6 detaches on the drain thread done ($ok)" test "$ok" = 6
check "no event lost in any ($lost lost)" test "$lost" = 0
check "the drain thread lent < 900 ms each time ($slow slower)" test "$slow" = 0
check "the target is alive" kill -0 "$P"
kill -9 "$P"; wait "$P" 2>/dev/null; rm -rf "/tmp/memlyze-$P"; P=
finish
