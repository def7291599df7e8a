#!/usr/bin/env bash
# Inline hooks in attached processes: targets whose allocator is in the
# executable (own malloc; jemalloc linked statically, PIE and non-PIE) run
# 16 threads that allocate and check their data without pause, while
# memlyze-attach / memlyze-detach cycle INLINE_CYCLES times for own (20
# here) and INLINE_CYCLES_JE times for each jemalloc and tcmalloc build (5 here: a cycle
# finalizes a trace, seconds on a loaded machine); make soak runs 100 each.
# Each cycle: memlyze-attach -v names the hooks it wrote with every thread
# stopped, and its printed pause includes that stop; the allocator's code
# bytes in the target's memory differ while attached and equal the
# originals after detach; one
# round of site_malloc (1000 x 100 B, direct calls) made while attached is
# exactly 100000 live bytes in the trace.
. "$(dirname "$0")/lib.sh"
ATTACH="$B/bin/memlyze-attach"
DETACH="$B/bin/memlyze-detach"
CYCLES_OWN=${INLINE_CYCLES:-20}
CYCLES_JE=${INLINE_CYCLES_JE:-5}
P=
trap '[ -n "$P" ] && kill -9 $P 2>/dev/null; rm -rf "$T"' EXIT
S="$ROOT/tests/targets/inline"
[ -x "$ATTACH" ] || { skip "inline attach" "memlyze-attach not built"; finish; }

cc -O2 -g -pthread -o "$T/own" "$S/sites.c" "$S/own_alloc.c" -ldl || fail "build own"
variants=own
. "$S/static_allocators.sh"
add_static_allocators "inline attach"

code_bytes() { python3 "$S/code_bytes.py" "$@"; }   # code_bytes PID BINARY SYMBOL [FILE]

site_bytes() {
    "$MEMLYZE" top --json -n 200 --frames 2 "$1" | python3 -c "
import json, sys
d = json.load(sys.stdin)
print(int(round(sum(s['live_bytes'] for s in d['sites'] if s['frames'][0].startswith('site_malloc ')))))"
}

for v in $variants; do
    CYCLES=$CYCLES_OWN
    [ "$v" = own ] || CYCLES=$CYCLES_JE
    "$T/$v" 16 serve > "$T/$v.out" 2>&1 &
    P=$!
    for _ in $(seq 100); do grep -q serving "$T/$v.out" && break; sleep 0.05; done
    orig=$(code_bytes $P "$T/$v" malloc)
    bad_attach=0 bad_hooked=0 bad_restored=0 bad_exact=0 bad_detach=0 bad_pause=0
    for c in $(seq "$CYCLES"); do
        rm -f "$T/$v.mlyze"
        if ! "$ATTACH" -v -r 1 -o "$T/$v.mlyze" $P > "$T/att.out" 2>&1 ||
           ! grep -q "inline hook malloc at .*written with [0-9]* threads stopped" "$T/att.out"; then
            bad_attach=$((bad_attach + 1)); cat "$T/att.out" >&2; "$DETACH" $P >/dev/null 2>&1; continue
        fi
        [ "$(code_bytes $P "$T/$v" malloc)" != "$orig" ] || bad_hooked=$((bad_hooked + 1))
        # The printed pause covers the second stop, the one writing the jumps.
        sed -n 's/.*target paused \([0-9.]*\) ms (.*inline hooks \([0-9.]*\) ms.*/\1 \2/p' "$T/att.out" |
            awk '{ exit !($2 > 0 && $1 >= $2) }' || { bad_pause=$((bad_pause + 1)); grep 'attached to' "$T/att.out" >&2; }
        kill -USR1 $P
        for _ in $(seq 1000); do grep -q "sites done $c\$" "$T/$v.out" && break; sleep 0.02; done
        "$DETACH" $P > "$T/det.out" 2>&1 || { bad_detach=$((bad_detach + 1)); cat "$T/det.out" >&2; }
        [ "$(code_bytes $P "$T/$v" malloc)" = "$orig" ] || bad_restored=$((bad_restored + 1))
        sb=$(site_bytes "$T/$v.mlyze"); [ "$sb" = 100000 ] || { bad_exact=$((bad_exact + 1)); echo "cycle $c: site_malloc $sb B; $("$MEMLYZE" top -n 1 "$T/$v.mlyze" 2>&1 | grep -iE "warn|lost" | head -2)" >&2; }
    done
    check "$v: $CYCLES attaches under 16 allocating threads, each wrote the inline hooks (-v lists them)" test $bad_attach = 0
    check "$v: malloc's code bytes carry the jump while attached" test $bad_hooked = 0
    check "$v: the printed pause includes the stop that wrote the inline hooks" test $bad_pause = 0
    check "$v: $CYCLES detaches ok" test $bad_detach = 0
    check "$v: after each detach malloc's code bytes equal the originals" test $bad_restored = 0
    check "$v: site_malloc exact while attached (100000 B) in every cycle" test $bad_exact = 0
    check "$v: original bytes are the file's" test "$orig" = "$(code_bytes 0 "$T/$v" malloc FILE)"
    kill -TERM $P
    wait $P
    P=
    check "$v: the target ran on, its data checks passed" grep -q "serve: data ok" "$T/$v.out"
done
finish
