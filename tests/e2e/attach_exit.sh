#!/usr/bin/env bash
# A process that exits (or is killed) while attached: its spool outlives it
# in /tmp/memlyze-PID. `memlyze-detach PID` afterwards writes the trace it
# recorded up to its exit and removes the directory, so nothing is lost and
# nothing is left behind; a directory it cannot trust is left alone.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_exit" "no libmemlyze.so in the build"; finish; }

cat > "$T/leaver.c" <<'EOF'
/* After a line on stdin: 100 blocks of 1000 B from leave_site, never
 * freed; prints "done", then exits when stdin closes. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *volatile keep[100];
__attribute__((noinline)) void leave_site(int i) { keep[i] = malloc(1000); }
int main(void)
{
    char buf[64];
    printf("ready\n");
    fflush(stdout);
    if (read(0, buf, sizeof buf) <= 0) return 1;
    for (int i = 0; i < 100; i++) leave_site(i);
    printf("done\n");
    fflush(stdout);
    while (read(0, buf, sizeof buf) > 0) {}
    return 0;
}
EOF
cc -O1 -g -fno-omit-frame-pointer -o "$T/leaver" "$T/leaver.c" || { fail "build leaver"; finish; }
wait_for() { for _ in $(seq 500); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done; return 1; }

# start NAME: a leaver attached in exact mode (LP, LW its stdin), its leaks made.
start() {
    rm -f "$T/$1.in"; mkfifo "$T/$1.in"
    "$T/leaver" < "$T/$1.in" > "$T/$1.out" 2>&1 &
    LP=$!
    exec {LW}>"$T/$1.in"
    wait_for "$T/$1.out" '^ready'
    "$ATTACH" -q -r 1 -o "$T/$1.mlyze" "$LP" || fail "$1: attach"
    echo go >&$LW
    wait_for "$T/$1.out" '^done'
    sleep 0.3          # the drain thread writes what the rings hold
}

# 1. A normal exit: the payload seals its spool at exit.
start ex
exec {LW}>&-; wait "$LP"
check "exit: the process left its record and spool" test -d "/tmp/memlyze-$LP"
out=$("$DETACH" "$LP" 2>&1); rc=$?
check "exit: detach of the exited pid succeeds and says so" bash -c \
    "[ $rc -eq 0 ] && grep -q '^memlyze: process $LP exited while attached; trace up to its exit: $T/ex.mlyze$' <<<\"\$0\"" "$out"
check "exit: the trace is valid" "$MEMLYZE" validate "$T/ex.mlyze"
check "exit: leave_site holds exactly 100000 B at the end" bash -c \
    "'$MEMLYZE' top --json -n 50 '$T/ex.mlyze' | python3 -c \"
import json, sys
d = json.load(sys.stdin)
v = sum(s['live_bytes'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('leave_site '))
assert v == 100000, v\""
check "exit: nothing left in /tmp" test ! -e "/tmp/memlyze-$LP"
out=$("$DETACH" "$LP" 2>&1); rc=$?
check "exit: a second detach: no such process, one line" bash -c \
    "[ $rc -ne 0 ] && [ \$(wc -l <<<\"\$0\") -eq 1 ] && grep -q 'no such process: $LP' <<<\"\$0\"" "$out"

# 2. SIGKILL: no destructor ran; the spool is read up to its last whole event.
start kl
kill -9 "$LP"; wait "$LP" 2>/dev/null; exec {LW}>&-
check "kill -9: detach -o writes the trace recorded before the kill" bash -c \
    "'$DETACH' -q -o '$T/kl2.mlyze' $LP && '$MEMLYZE' validate '$T/kl2.mlyze' && [ ! -e '$T/kl.mlyze' ]"
check "kill -9: nothing left in /tmp" test ! -e "/tmp/memlyze-$LP"

# 3. --no-finalize keeps the raw spool where it is and says where.
start nf
exec {LW}>&-; wait "$LP"
out=$("$DETACH" --no-finalize "$LP" 2>&1)
spool=$(sed -n 's/.*trace up to its exit: //p' <<<"$out")
check "--no-finalize: the spool is kept and named" bash -c "[ -n '$spool' ] && '$MEMLYZE' validate '$spool'"
rm -rf "/tmp/memlyze-$LP"

# 4. Records that are not believed: a dead pid's directory readable by others,
# or a record whose spool lies outside its directory.
while :; do true & DEAD=$!; wait "$DEAD"; [ -e "/tmp/memlyze-$DEAD" ] || break; done
mkdir -m 0755 "/tmp/memlyze-$DEAD"
printf 'output=%s\nspool=/tmp/memlyze-%d/spool.1\n' "$T/forged.mlyze" "$DEAD" > "/tmp/memlyze-$DEAD/state"
out=$("$DETACH" "$DEAD" 2>&1); rc=$?
check "forged: a directory of mode 0755 is not believed" bash -c \
    "[ $rc -ne 0 ] && grep -q 'no such process' <<<\"\$0\" && [ -e /tmp/memlyze-$DEAD/state ] && [ ! -e '$T/forged.mlyze' ]" "$out"
chmod 0700 "/tmp/memlyze-$DEAD"
printf 'output=%s\nspool=/etc/passwd\n' "$T/forged.mlyze" > "/tmp/memlyze-$DEAD/state"
out=$("$DETACH" "$DEAD" 2>&1); rc=$?
check "forged: a spool outside the directory is not read" bash -c \
    "[ $rc -ne 0 ] && grep -q 'no such process' <<<\"\$0\" && [ ! -e '$T/forged.mlyze' ]" "$out"
rm -rf "/tmp/memlyze-$DEAD"
finish
