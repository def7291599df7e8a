#!/usr/bin/env bash
# GOT mode (the attach path, started with memlyze run --got): a plugin
# dlopen'ed later and found only through the program's RUNPATH is patched
# and seen exactly; a module that bypasses the GOT is named by the
# blind-spot report.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/plugins"
cc -O2 -g -fPIC -shared -o "$T/plugins/libplug.so" "$ROOT/tests/targets/plug.c" || fail "build plugin"
cc -O2 -g -fPIC -shared -Wl,-Bsymbolic -o "$T/plugins/libbypass.so" "$ROOT/tests/targets/gotpatch/bypass.c" || fail "build bypass"
cc -O2 -g -Wl,--enable-new-dtags,-rpath,'$ORIGIN/plugins' -o "$T/plugmain" "$ROOT/tests/targets/plugmain.c" -ldl || fail "build main"

out=$("$T/plugmain")
check "plugin program runs alone" test "$out" = "plugmain: 10"
out=$("$MEMLYZE" run --got --coverage -r 1 -o "$T/got.mlyze" -- "$T/plugmain" 2>"$T/err")
check "RUNPATH plugin still loads under GOT mode (output unchanged)" test "$out" = "plugmain: 10"
"$MEMLYZE" top --json -n 50 "$T/got.mlyze" > "$T/got.json"
check "plugin allocations seen exactly (30 x 2000)" python3 -c "
import json, sys; d=json.load(open('$T/got.json'))
sys.exit(0 if sum(s['live_bytes'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('plug_')) == 60000 else 1)"
check "coverage report printed" grep -q "JUMP  GLOB ABS64" "$T/err"
check "bypass module's direct calls reported" awk '/libbypass.so/ { if ($6 > 0) found = 1 } END { exit !found }' "$T/err"
check "bypass module flagged as having its own allocator" bash -c "grep libbypass.so '$T/err' | grep -q own"
# The malloc and free hooks each start a 64-byte line (MLZ_HOT_ALIGN): their
# speed then does not depend on the code laid out before them.
hooks_aligned() {
    local n=0 a
    while read -r a _; do
        [ $((0x$a % 64)) -eq 0 ] || return 1
        n=$((n + 1))
    done < <(nm "$1" | grep -E ' mlz_hook_(malloc|free)$')
    [ "$n" -eq 2 ]
}
for lib in libmemlyze.so libmemlyze-preload.so; do
    check "$lib: the malloc and free hooks start a 64-byte line" hooks_aligned "$B/lib/$lib"
done
finish
