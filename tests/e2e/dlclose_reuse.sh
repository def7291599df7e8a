#!/bin/bash
# dlclose_reuse.sh - a library unloaded and another loaded at its addresses:
# each allocation's stack is named from the library that was there when it
# was made (MODULE_GONE records, finalize's views), in `memlyze run` and
# attached, and a library loaded and unloaded between two drain rounds is
# still named.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"

cc -O1 -g -o "$T/reload" "$TGT_SRC/reload.c" -ldl || fail "build reload"
cc -O1 -g -fPIC -shared -o "$T/libfirst.so" "$TGT_SRC/reload_plugin.c" || fail "build first plugin"
cc -O1 -g -fPIC -shared -DSECOND -o "$T/libsecond.so" "$TGT_SRC/reload_plugin.c" || fail "build second plugin"

# sites FILE: "NAME OBJECTS BYTES" of the plugin sites in FILE's top
sites() {
    "$MEMLYZE" top -n 50 "$1" 2>/dev/null | awk '/plugin_site/ { for (i = 1; i <= NF; i++) if ($i ~ /plugin_site/) print $i, $(i-2) }' | sort
}
# verdict NAME FILE OUT WANT: the plugins' sites and object counts are WANT
verdict() {
    local name=$1 file=$2 out=$3 want=$4 got
    got=$(sites "$file" | tr '\n' ' ')
    if ! grep -q "reused yes" "$out"; then
        fail "$name: the second plugin was loaded at the first one's addresses" "$(cat "$out")"
    elif [ "$got" = "$want" ]; then
        pass "$name: each block named from the plugin that made it"
    else fail "$name: each block named from the plugin that made it" "got: $got"; fi
}

# The loader reuses the freed addresses most of the time, not always (another
# mapping may take them first): a run where it did not tests nothing, so up
# to three runs are made for one that did.
for _ in 1 2 3; do
    rm -f "$T/run.mlyze" "$T/run.mlyze.idx"
    printf 'go\n' | "$MEMLYZE" run -r 1 -o "$T/run.mlyze" -- "$T/reload" "$T/libfirst.so" "$T/libsecond.so" >"$T/run.out" 2>"$T/run.err"
    grep -q "reused yes" "$T/run.out" && break
done
# 10 blocks of the first, its constructor's and 10 of the second.
verdict "memlyze run -r 1" "$T/run.mlyze" "$T/run.out" "first_plugin_site 10 second_plugin_site 1 second_plugin_site 10 "
check "memlyze run trace valid" "$MEMLYZE" validate "$T/run.mlyze"

# Attached: the hooks of dlopen and dlclose do what the preload's do.
mkfifo "$T/in"
"$T/reload" "$T/libfirst.so" "$T/libsecond.so" <"$T/in" >"$T/att.out" 2>&1 &
exec {IN}>"$T/in"
RP=$(pgrep -n -f "$T/reload")
for _ in $(seq 100); do grep -q ready "$T/att.out" && break; sleep 0.05; done
if "$ATTACH" -q -r 1 "$RP"; then
    echo go >&"$IN"
    for _ in $(seq 100); do grep -q done "$T/att.out" && break; sleep 0.05; done
    "$DETACH" -q -o "$T/att.mlyze" "$RP" || fail "detach"
    # Attached, a library's GOT is patched when dlopen returns: what its
    # constructor allocates is not seen (README, "Limits").
    verdict "attached -r 1" "$T/att.mlyze" "$T/att.out" "first_plugin_site 10 second_plugin_site 10 "
else
    fail "attach to reload"
fi
exec {IN}>&-
wait
cleanup_state "$RP"
finish
