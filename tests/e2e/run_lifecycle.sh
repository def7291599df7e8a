#!/usr/bin/env bash
# memlyze run on C++ (operator new seen through libstdc++, names demangled)
# and across fork/vfork: children are profiled into their own file with
# --follow-fork, otherwise run unprofiled; vfork+exec is harmless.
. "$(dirname "$0")/lib.sh"
site() {   # site JSON PREFIX -> live bytes of sites whose frames mention PREFIX
    python3 -c "
import json, sys; d=json.load(open('$1'))
print(int(round(sum(s['live_bytes'] for s in d['sites'] if any(f.startswith('$2') for f in s['frames'])))))"
}

# The payloads map nothing but themselves into a target: libc (and the
# dynamic loader) are their only dependencies, not even libm.
for so in "$B/lib/libmemlyze.so" "$B/lib/libmemlyze-preload.so"; do
    needed=$(readelf -d "$so" | awk '/NEEDED/ { gsub(/[][]/, "", $NF); print $NF }')
    check "$(basename "$so") needs only libc and ld.so ($(echo $needed))" bash -c \
        "grep -qx libc.so.6 <<<'$needed' && ! grep -vqE '^(libc\.so\.6|ld-linux[-a-z0-9_]*\.so\.[0-9]+)$' <<<'$needed'"
done

g++ -O2 -g -o "$T/widgets" "$ROOT/tests/targets/widgets.cc" || fail "build widgets"
out=$("$MEMLYZE" run -r 1 -o "$T/w.mlyze" -- "$T/widgets" 2>/dev/null)
check "C++: output unchanged" test "$out" = "widgets: 100"
"$MEMLYZE" top --json -n 20 --frames 6 "$T/w.mlyze" > "$T/w.json"
check "C++: operator new site exact, demangled (24000 B)" test "$(site "$T/w.json" 'shop::make_widgets(int)')" = 24000
check "C++: operator new frame present" python3 -c "
import json, sys; d=json.load(open('$T/w.json'))
sys.exit(0 if any('operator new' in f for s in d['sites'] for f in s['frames']) else 1)"

cc -O2 -g -o "$T/forker" "$ROOT/tests/targets/forker.c" || fail "build forker"
out=$("$MEMLYZE" run -r 1 -o "$T/nf.mlyze" -- "$T/forker" 2>/dev/null | sort | tr '\n' ' ')
check "fork: output unchanged" test "$out" = "child done parent done 0 "
"$MEMLYZE" top --json -n 20 "$T/nf.mlyze" > "$T/nf.json"
check "fork: parent's site exact (50000 B)" test "$(site "$T/nf.json" site_parent)" = 50000
check "fork: child's allocations not in the parent's file" test "$(site "$T/nf.json" site_child)" = 0
check "fork: no child file without --follow-fork" bash -c "! ls '$T'/nf.*.mlyze 2>/dev/null | grep -q ."
check "vfork: the block the child freed is not live in the parent's trace" test "$(site "$T/nf.json" site_shared)" = 0
"$MEMLYZE" top --json -n 20 --by allocated "$T/nf.mlyze" > "$T/nfa.json"
check "vfork: that block was recorded (3000 B allocated)" python3 -c "
import json, sys; d=json.load(open('$T/nfa.json'))
sys.exit(0 if round(sum(s['alloc_bytes'] for s in d['sites'] if any(f.startswith('site_shared') for f in s['frames']))) == 3000 else 1)"

"$MEMLYZE" run -r 1 --follow-fork -o "$T/ff.mlyze" -- "$T/forker" >/dev/null 2>&1
# Child traces are OUT.PROG.PID.mlyze (the vfork+exec'd true gets one too).
child=$(ls "$T"/ff.forker.*.mlyze 2>/dev/null | head -1)
check "follow-fork: the child has its own trace" test -n "$child"
if [ -n "$child" ]; then
    "$MEMLYZE" top --json -n 20 "$child" > "$T/child.json"
    check "follow-fork: child's site exact (70000 B)" test "$(site "$T/child.json" site_child)" = 70000
    check "follow-fork: parent's pre-fork blocks not claimed by the child" test "$(site "$T/child.json" site_parent)" = 0
    check "follow-fork: child trace valid" "$MEMLYZE" validate "$child"
fi
"$MEMLYZE" top --json -n 20 "$T/ff.mlyze" > "$T/ff.json"
check "follow-fork: parent's trace unchanged (50000 B)" test "$(site "$T/ff.json" site_parent)" = 50000
finish
