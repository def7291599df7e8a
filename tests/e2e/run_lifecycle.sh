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

# Exceptions: a block allocated after a throw was caught gets its own
# stack (the unwinder reuses its last walk only where the stack still
# holds it), and the thrower's blocks keep theirs.
g++ -O2 -g -o "$T/throws" "$ROOT/tests/targets/throws.cc" || fail "build throws"
out=$("$MEMLYZE" run -r 1 -o "$T/x.mlyze" -- "$T/throws" 2>/dev/null)
check "exceptions: output unchanged" test "$out" = "throws: 2000"
"$MEMLYZE" top --json -n 50 --frames 12 "$T/x.mlyze" > "$T/x.json"
check "exceptions: stacks on both sides of each throw are their own" python3 - "$T/x.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
after = thrower = 0
via = {"via_a()": 0, "via_b()": 0}
for s in d["sites"]:
    fr = [f.split(" ")[0] for f in s["frames"]]
    if "leaf()" in fr:
        i = fr.index("leaf()")
        if fr[i + 1] not in via or fr[i + 2] != "main":
            sys.exit("leaf with a wrong stack: %s" % fr)
        via[fr[i + 1]] += s["live_bytes"]
    elif "after_catch()" in fr:
        i = fr.index("after_catch()")
        if "deep_throw(int)" in fr or fr[i + 1] != "main":
            sys.exit("after_catch with a wrong stack: %s" % fr)
        after += s["live_bytes"]
    elif fr and "deep_throw(int)" in fr and s["live_bytes"] and "__cxa_allocate_exception" not in fr:
        thrower += s["live_bytes"]
if round(after) != 101000 or round(thrower) != 50500 or [round(v) for v in via.values()] != [151500, 151500]:
    sys.exit("after_catch %s bytes, deep_throw %s bytes, leaf %s" % (after, thrower, via))
PY

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
