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

# 5. The main thread exits (pthread_exit) and a worker runs on: /proc/PID/maps
# is empty then. The payload still finds the worker's stack (its frames are
# recorded), a snapshot reads through the worker, attach and detach refuse
# naming the cause, and once the process exits detach writes the trace.
cat > "$T/mainexit.c" <<'EOF2'
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static void *volatile keep[100];
__attribute__((noinline)) void worker_site(int i) { keep[i] = malloc(1000); }
static void *work(void *a)
{
    char buf[64];
    (void)a;
    for (int i = 0; i < 100; i++) worker_site(i);
    printf("done\n");
    fflush(stdout);
    while (read(0, buf, sizeof buf) > 0) {}
    exit(0);
}
int main(int argc, char **argv)
{
    char buf[64];
    pthread_t t;
    printf("ready\n");
    fflush(stdout);
    if (argc > 1 && read(0, buf, 1) <= 0) return 1;   /* attach first */
    pthread_create(&t, NULL, work, NULL);
    pthread_exit(NULL);
}
EOF2
cc -O1 -g -pthread -fno-omit-frame-pointer -o "$T/mainexit" "$T/mainexit.c" || fail "build mainexit"
rm -f "$T/me.in"; mkfifo "$T/me.in"
"$T/mainexit" wait < "$T/me.in" > "$T/me.out" 2>&1 &
LP=$!
exec {LW}>"$T/me.in"
wait_for "$T/me.out" '^ready'
"$ATTACH" -q -r 1 -o "$T/me.mlyze" "$LP" || fail "main exits: attach"
printf x >&$LW
wait_for "$T/me.out" '^done'
for _ in $(seq 100); do grep -q '^State:.Z' "/proc/$LP/status" && break; sleep 0.02; done
check "main exits: a snapshot reads the process through its worker (100 blocks of 1000 B)" bash -c \
    "'$B/bin/memlyze-snapshot' -q -o '$T/me.snap.mlyze' $LP && '$MEMLYZE' top --json '$T/me.snap.mlyze' | python3 -c \"
import json, sys
d = json.load(sys.stdin)
v = sum(s['live_bytes'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('worker_site '))
assert v == 100000, v\""
out=$("$DETACH" "$LP" 2>&1); rc=$?
check "main exits: detach refuses, naming the cause" bash -c \
    "[ $rc -ne 0 ] && grep -q 'main thread exited' <<<\"\$0\"" "$out"
exec {LW}>&-
for _ in $(seq 200); do [ "$(ls "/proc/$LP/task" 2>/dev/null | wc -l)" -le 1 ] && break; sleep 0.02; done
check "main exits: once it has exited (a zombie not yet reaped), detach writes the trace" bash -c \
    "'$DETACH' -q $LP && '$MEMLYZE' validate '$T/me.mlyze' && [ ! -e /tmp/memlyze-$LP ]"
wait "$LP"
rm -f "$T/me2.in"; mkfifo "$T/me2.in"
"$T/mainexit" < "$T/me2.in" > "$T/me2.out" 2>&1 &
LP=$!
exec {LW}>"$T/me2.in"
wait_for "$T/me2.out" '^done'
for _ in $(seq 100); do grep -q '^State:.Z' "/proc/$LP/status" && break; sleep 0.02; done
out=$("$ATTACH" -o "$T/me2.mlyze" "$LP" 2>&1); rc=$?
check "main exits: attach refuses, naming the cause" bash -c \
    "[ $rc -ne 0 ] && grep -q 'main thread exited' <<<\"\$0\" && [ ! -e /tmp/memlyze-$LP ]" "$out"
exec {LW}>&-; wait "$LP"
finish
