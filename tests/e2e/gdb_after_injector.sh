#!/usr/bin/env bash
# gdb on a process that memlyze-attach injected (payload loaded from a memfd):
# gdb must attach without hanging and the memlyze commands must find the
# payload. Guards the loader name: /proc/self/fd/N made gdb open its own fd.
. "$(dirname "$0")/lib.sh"
if ! command -v gdb >/dev/null; then skip "gdb after the injector" "gdb not installed; make deps"; finish; fi
cc -O2 -g -pthread -o "$T/server" "$ROOT/demo/server.c" || fail "build server"
"$T/server" 2 > /dev/null &
SP=$!
trap 'kill $SP 2>/dev/null; rm -rf "$T"' EXIT
sleep 0.3
check "attach with the injector" "$B/bin/memlyze-attach" -q -o "$T/trace.mlyze" "$SP"
sleep 1
timeout -s KILL 60 gdb -q -batch -p "$SP" -ex "source $ROOT/scripts/gdb/memlyze.py" \
    -ex "memlyze status" -ex "memlyze snapshot $T/gdb.mlyze" > "$T/gdb.out" 2>&1
check "gdb attaches and finishes (no hang)" test $? -eq 0
check "gdb finds the injected payload" grep -q "state: attached" "$T/gdb.out"
check "gdb snapshot is valid" "$MEMLYZE" validate "$T/gdb.mlyze"
check "detach after gdb left" "$B/bin/memlyze-detach" -q "$SP"
check "server still running" kill -0 "$SP"
finish
