#!/usr/bin/env bash
# A memlyze-attach'ed process that execs: the payload goes with the old
# image. memlyze snapshot says so plainly; memlyze-detach says so too and
# writes the trace recorded up to the exec, valid.
. "$(dirname "$0")/lib.sh"
ATTACH="$B/bin/memlyze-attach"
DETACH="$B/bin/memlyze-detach"
if [ ! -x "$ATTACH" ] || [ ! -x "$DETACH" ] || [ ! -f "$B/lib/libmemlyze.so" ]; then
    echo "SKIP: attach_exec (injector or payload not built)"
    finish
fi
cc -O2 -g -o "$T/execer" "$ROOT/tests/targets/execer.c" || fail "build execer"
"$T/execer" waitexec "$T/go" /bin/sleep 30 > "$T/execer.out" 2>&1 &
TP=$!
trap 'kill $TP 2>/dev/null; wait $TP 2>/dev/null; rm -rf "$T" "/tmp/memlyze-$TP"' EXIT
for _ in $(seq 100); do grep -q waiting "$T/execer.out" && break; sleep 0.02; done

check "attach to the process" timeout 30 "$ATTACH" -q -r 1 -o "$T/attached.mlyze" "$TP"
sleep 1.5      # the payload writes its buffer out every second
touch "$T/go"
for _ in $(seq 200); do [ "$(cat /proc/$TP/comm 2>/dev/null)" = sleep ] && break; sleep 0.02; done
check "the process exec'd sleep" test "$(cat /proc/$TP/comm)" = sleep

out=$("$MEMLYZE" snapshot -o "$T/snap.mlyze" "$TP" 2>&1); rc=$?
check "snapshot after exec: fails" test $rc -ne 0
check "snapshot after exec: says the process exec'd" grep -q "has exec'd since memlyze-attach" <<<"$out"
check "snapshot after exec: one line" test "$(wc -l <<<"$out")" = 1
check "snapshot after exec: no file written" test ! -e "$T/snap.mlyze"

out=$(timeout 30 "$DETACH" "$TP" 2>&1); rc=$?
check "detach after exec: succeeds" test $rc -eq 0
check "detach after exec: says the process exec'd" grep -q "has exec'd since memlyze-attach: the payload went with its old image" <<<"$out"
check "detach after exec: the trace up to the exec is valid" "$MEMLYZE" validate "$T/attached.mlyze"
check "detach after exec: the trace holds the old image's allocations" python3 -c "
import json, subprocess, sys
d = json.loads(subprocess.run(['$MEMLYZE', 'top', '--json', '$T/attached.mlyze'], capture_output=True, text=True).stdout)
sys.exit(0 if d['samples'] > 10 else 1)"
check "detach after exec: state directory removed" test ! -e "/tmp/memlyze-$TP"
out=$("$DETACH" "$TP" 2>&1)
check "detach again: not attached" grep -q "is not attached" <<<"$out"

# An exec while memlyze-attach prepares (before it holds the threads): what
# it read belongs to the old image, and /proc/PID/mem still to the old
# memory. Held, the process is checked again: a clean refusal, the process
# untouched. MEMLYZE_TEST_STOP_DELAY_MS holds the window open.
"$T/execer" waitexec "$T/go2" /bin/sleep 30 > "$T/execer2.out" 2>&1 &
TP2=$!
trap 'kill $TP $TP2 2>/dev/null; wait $TP $TP2 2>/dev/null; rm -rf "$T" "/tmp/memlyze-$TP" "/tmp/memlyze-$TP2"' EXIT
for _ in $(seq 100); do grep -q waiting "$T/execer2.out" && break; sleep 0.02; done
MEMLYZE_TEST_STOP_DELAY_MS=2000 timeout 30 "$ATTACH" -v -q -o "$T/race.mlyze" "$TP2" > /dev/null 2> "$T/race.err" &
AP=$!
for _ in $(seq 500); do grep -q "test: waiting" "$T/race.err" && break; sleep 0.02; done
touch "$T/go2"
for _ in $(seq 200); do [ "$(cat /proc/$TP2/comm 2>/dev/null)" = sleep ] && break; sleep 0.02; done
wait $AP; rc=$?
check "exec during attach: the window was reached" grep -q "test: waiting" "$T/race.err"
check "exec during attach: attach fails" test $rc -ne 0
last=$(grep '^memlyze-attach: ' "$T/race.err")
check "exec during attach: says so, naming the new program" \
    grep -q "ran exec while this command prepared (it now runs sleep): nothing was changed in it" <<<"$last"
check "exec during attach: the process runs on" kill -0 "$TP2"
check "exec during attach: no payload in it" bash -c "! grep -q libmemlyze /proc/$TP2/maps"
check "exec during attach: no state left" test ! -e "/tmp/memlyze-$TP2"
check "exec during attach: no trace left" test ! -e "$T/race.mlyze"
check "exec during attach: attaching again works" timeout 30 "$ATTACH" -q -o "$T/race.mlyze" "$TP2"
check "exec during attach: and detaching" timeout 30 "$DETACH" -q "$TP2"
check "exec during attach: the trace is valid" "$MEMLYZE" validate "$T/race.mlyze"

# A program caught in its start-up, before its loader mapped libc.so.6
# (startstop stops it ahead of its first instruction): attach waits for the
# loader instead of calling it statically linked.
cc -O2 -g -o "$T/startstop" "$ROOT/tests/targets/startstop.c" || fail "build startstop"
"$T/startstop" "$T/execer" waitexec "$T/never" /bin/sleep 30 > "$T/ss.pid"
TP3=$(cat "$T/ss.pid")
trap 'kill -9 $TP $TP2 $TP3 2>/dev/null; wait $TP $TP2 2>/dev/null; rm -rf "$T" "/tmp/memlyze-$TP" "/tmp/memlyze-$TP2" "/tmp/memlyze-$TP3"' EXIT
check "start-up: caught before libc.so.6 is mapped" bash -c "! grep -q libc.so.6 /proc/$TP3/maps"
out=$(timeout 30 "$ATTACH" -q -o "$T/ss.mlyze" "$TP3" 2>&1); rc=$?
check "start-up, kept stopped: refused" test $rc -ne 0
check "start-up, kept stopped: says libc is not mapped yet, not that it is static" \
    grep -q "is dynamically linked but has not mapped libc.so.6 and its loader after 2000 ms" <<<"$out"
check "start-up, kept stopped: one line" test "$(wc -l <<<"$out")" = 1
(sleep 0.3; kill -CONT "$TP3") &
check "start-up: attach waits for the loader, then attaches" timeout 30 "$ATTACH" -q -o "$T/ss.mlyze" "$TP3"
check "start-up: the program has its libc now" grep -q libc.so.6 "/proc/$TP3/maps"
check "start-up: detach" timeout 30 "$DETACH" -q "$TP3"
check "start-up: the trace is valid" "$MEMLYZE" validate "$T/ss.mlyze"
finish
