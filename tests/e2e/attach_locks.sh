#!/usr/bin/env bash
# Lock holders in any thread (issue: attaching must never hang the target).
# No injected call may start while a thread holds a glibc lock that call
# needs; attach and detach succeed once it is free, or refuse within their
# timeout naming the holder, and the target runs on either way.
#   - a plugin constructor, run under the loader lock, waits for the main
#     thread, and we are told to borrow the main thread (also with the
#     other threads let go at once, and with our thread left to restore
#     itself while it holds the loader lock);
#   - a thread lives inside dlopen (the loader lock is never free);
#   - the main thread creates and joins threads in a loop (stack cache lock);
#   - the main thread forks every 2 ms (arena locks around fork, SIGCHLD);
#   - the lock layout from debug info equals the built-in table.
#   CYCLES=N attach/detach cycles for the last two (default 50)
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { echo "SKIP: attach_locks (no libmemlyze.so in the build)"; finish; }
CYCLES=${CYCLES:-50}
A() { timeout 60 "$ATTACH" "$@"; }
D() { timeout 60 "$DETACH" "$@"; }

# 1. The constructor waits for main: main is borrowed only between loads.
start_target cw ctorwait "$T/libctorwait.so"
main=$(tid_of cw main)
okc=0
for i in 1 2 3 4 5; do
    A -q --thread "$main" -o "$T/cw$i.mlyze" "$TP" >"$T/cw.log" 2>&1 && D -q --no-finalize --thread "$main" "$TP" >>"$T/cw.log" 2>&1 && okc=$((okc + 1))
done
check "ctorwait: 5 attach/detach cycles borrowing the main thread all succeed" [ "$okc" -eq 5 ]
# The same where the lock layout is unknown: every thread is unwound instead.
okc=0
for i in 1 2 3; do
    MEMLYZE_LOCKS=unwind A -q --thread "$main" -o "$T/cwu$i.mlyze" "$TP" >"$T/cwu.log" 2>&1 &&
        MEMLYZE_LOCKS=unwind D -q --no-finalize --thread "$main" "$TP" >>"$T/cwu.log" 2>&1 && okc=$((okc + 1))
done
check "ctorwait: 3 cycles with unwinding alone (unknown glibc) succeed too" [ "$okc" -eq 3 ]
# The other threads let go at once (--hold 0; a slow machine past the
# 15 ms default does the same): the loader thread then runs while main is
# lent. Only the loader lock, taken by main before they go, keeps it out of
# the constructor that waits for main (this deadlocked the target before).
okc=0
for i in 1 2 3; do
    A -q --hold 0 --thread "$main" -o "$T/cwh$i.mlyze" "$TP" >"$T/cwh.log" 2>&1 &&
        D -q --hold 0 --no-finalize --thread "$main" "$TP" >>"$T/cwh.log" 2>&1 && okc=$((okc + 1))
done
check "ctorwait: 3 cycles letting the other threads go at once (--hold 0) succeed" [ "$okc" -eq 3 ]
# No lock layout, no loader lock to take: the others stay held until main
# is done (or sleeps), whatever --hold says.
okc=0
for i in 1 2 3; do
    MEMLYZE_LOCKS=unwind A -q --hold 0 --thread "$main" -o "$T/cwhu$i.mlyze" "$TP" >"$T/cwhu.log" 2>&1 &&
        MEMLYZE_LOCKS=unwind D -q --hold 0 --no-finalize --thread "$main" "$TP" >>"$T/cwhu.log" 2>&1 && okc=$((okc + 1))
done
check "ctorwait: 3 cycles with --hold 0 and unwinding alone succeed" [ "$okc" -eq 3 ]
finish_target cw
cleanup_state "$TP"

# 1b. A borrowed thread that restores itself gives the loader lock back:
# its call outlives the injector's timeout (the stand-in payload sleeps
# 1.5 s in memlyze_attach), or the injector is killed during the call.
# Held on, the lock would stop every later dlopen (the target hangs).
MLZT_ATTACH_SLEEP_MS=1500 start_target cl ctorwait "$T/libctorwait.so"
main=$(tid_of cl main)
TA() { timeout 30 "$ATTACH" --payload "$TESTLIB" "$@"; }
out=$(TA --timeout 300 --thread "$main" -o "$T/cl1.mlyze" "$TP" 2>&1); rc=$?
check "self-restore: a call past the timeout fails, letting the thread go" \
    bash -c "[ $rc -ne 0 ] && grep -q 'let go: it finishes the call' <<<'$out'"
sleep 2
# A second attach refuses at the safe point if the lock is still held; once
# it is free, the stand-in payload answers "already attached".
TA --timeout 3000 -o "$T/cl2.mlyze" "$TP" >"$T/cl2.err" 2>&1
check "self-restore: the loader lock is free afterwards (timeout)" grep -q 'already attached' "$T/cl2.err"
D -q --no-finalize "$TP" >/dev/null 2>&1
rm -f "$T/cl3.mlyze"; cleanup_state "$TP"
TA -q --thread "$main" -o "$T/cl3.mlyze" "$TP" >/dev/null 2>&1 & inj=$!
sleep 0.6
kill -9 "$inj" 2>/dev/null; wait "$inj" 2>/dev/null
sleep 1.5
cleanup_state "$TP"
TA --timeout 3000 -o "$T/cl4.mlyze" "$TP" >"$T/cl4.err" 2>&1
check "self-restore: the loader lock is free afterwards (injector killed)" grep -q 'already attached' "$T/cl4.err"
D -q --no-finalize "$TP" >/dev/null 2>&1
finish_target cl
cleanup_state "$TP"

# 2. The loader lock is never free: refuse in time, name the holder.
MLZT_CTOR_SLEEP_MS=4000 start_target dl dlopen "$T/libslow.so"
dl=$(tid_of dl dlopen)
t0=$SECONDS
A --timeout 1500 -o "$T/dl.mlyze" "$TP" >"$T/dl.err" 2>&1; rc=$?
check "loader busy: attach refuses within its timeout" [ "$rc" -ne 0 ] && [ $((SECONDS - t0)) -le 8 ]
check "loader busy: one line naming the holder thread and the lock" \
    bash -c "[ \$(wc -l <'$T/dl.err') -eq 1 ] && grep -q 'thread $dl (target) holds the dynamic loader' '$T/dl.err'"
check "loader busy: the refusal names the library whose constructor runs" grep -q 'running a constructor of libslow.so' "$T/dl.err"
check "loader busy: nothing was injected" bash -c "! grep -q memlyze /proc/$TP/maps"
finish_target dl
cleanup_state "$TP"

# The same in its own PID namespace: the lock records the holder by the id
# the target sees; the refusal names it by ours (and unwinds that thread).
if unshare -pf --mount-proc true 2>/dev/null; then
    rm -f "$T/pn.stop" "$T/pn.tids"
    MLZT_CTOR_SLEEP_MS=4000 unshare -pf --mount-proc "$T/target" dlopen "$T/pn.stop" "$T/pn.tids" "$T/libslow.so" \
        >"$T/pn.out" 2>&1 &
    up=$!
    for _ in $(seq 100); do [ "$(cat "$T/pn.tids" 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 0.02; done
    sleep 0.2
    TP=$(pgrep -P "$up" -x target)
    nsdl=$(awk '$1 == "dlopen" { print $2 }' "$T/pn.tids")
    dl=$(for st in /proc/$TP/task/*/status; do
        awk -v n="$nsdl" '/^Pid:/ { p = $2 } /^NSpid:/ { if ($NF == n) print p }' "$st"; done)
    A --timeout 1500 -o "$T/pn.mlyze" "$TP" >"$T/pn.err" 2>&1
    check "pidns: the loader lock's holder is named by its id outside ($dl, $nsdl inside)" \
        bash -c "[ -n '$dl' ] && [ '$dl' != '$nsdl' ] && grep -q 'thread $dl (target) holds the dynamic loader' '$T/pn.err'"
    check "pidns: and the library whose constructor it runs" grep -q 'running a constructor of libslow.so' "$T/pn.err"
    touch "$T/pn.stop"
    wait "$up"
    check "pidns: target ran on correctly" grep -q '^target: all ok' "$T/pn.out"
    cleanup_state "$TP"
else
    skip "pidns: the loader lock's holder named" "unshare -p not permitted here"
fi

# cycles NAME: CYCLES attach/detach pairs; every command must succeed.
cycles() {
    local name=$1 ok=0 bad=0 worst=0 i
    for i in $(seq "$CYCLES"); do
        if A -q -o "$T/$name$i.mlyze" "$TP" 2>>"$T/$name.err"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
        if D -q --no-finalize "$TP" 2>>"$T/$name.err"; then ok=$((ok + 1)); else bad=$((bad + 1)); fi
    done
    check "$name: $CYCLES attach/detach cycles, every command succeeds" [ "$bad" -eq 0 ]
    [ "$bad" -eq 0 ] || sort "$T/$name.err" | uniq -c | head -5
}

# 3. Thread-per-request: the main thread keeps making threads afterwards.
start_target th threads
cycles threads
m0=$(awk '$1 == "made" { n = $2 } END { print n + 0 }' "$T/th.tids"); sleep 1
m1=$(awk '$1 == "made" { n = $2 } END { print n + 0 }' "$T/th.tids")
check "threads: still creating and joining threads afterwards ($m0 -> $m1)" [ "$m1" -gt "$m0" ]
finish_target th
cleanup_state "$TP"

# 4. A main thread that forks every 2 ms.
start_target fk forks
cycles forks
finish_target fk
cleanup_state "$TP"

# 5. Other situations users meet: a child between vfork and exec (refused:
# it runs on its parent's memory), and a thread inside a signal handler.
start_target vf vfork
vc=$(tid_of vf vchild)
A -o "$T/vf.mlyze" "$vc" >"$T/vf.err" 2>&1; rc=$?
check "vfork: the child before its exec is refused, naming the cause" \
    bash -c "[ $rc -ne 0 ] && grep -q 'shares its memory with its parent' '$T/vf.err'"
A --timeout 1000 -o "$T/vfp.mlyze" "$TP" >"$T/vfp.err" 2>&1; rc=$?
check "vfork: the parent waiting for it is refused in time, naming the waiting thread" \
    bash -c "[ $rc -ne 0 ] && grep -q 'waits inside the kernel' '$T/vfp.err'"
touch "$T/vf.stop.exec"; sleep 0.3
check "vfork: the parent attaches once the child has exec'd" A -q -o "$T/vf2.mlyze" "$TP"
check "vfork: detach" D -q --no-finalize "$TP"
finish_target vf
cleanup_state "$TP"

start_target ih inhandler
h=$(tid_of ih handler)
check "handler: attach borrowing a thread inside its signal handler" A -q --thread "$h" -o "$T/ih.mlyze" "$TP"
check "handler: detach borrowing it again" D -q --no-finalize --thread "$h" "$TP"
finish_target ih
cleanup_state "$TP"

# Payload state known from outside: attached twice, detached twice.
start_target st single
A -q -o "$T/st.mlyze" "$TP"
A -o "$T/st2.mlyze" "$TP" >"$T/st.err" 2>&1
check "state: a second attach says it is attached already" grep -q 'is already attached' "$T/st.err"
D -q --no-finalize "$TP"
D "$TP" >"$T/st.err" 2>&1
check "state: a second detach says the payload is loaded but inactive" grep -q 'loaded but inactive' "$T/st.err"
# A record left by a dead process that had the same pid is not taken for
# this process's (the start time tells them apart).
A -q -o "$T/st3.mlyze" "$TP"
printf 'output=%s\nspool=/tmp/memlyze-%d/spool.1\nrate=1\nattached_at=1\nstart_ticks=1\n' "$T/wrong.mlyze" "$TP" \
    > "/tmp/memlyze-$TP/state"
D "$TP" >"$T/st3.err" 2>&1
check "state: a stale record of another process with this pid is ignored" \
    bash -c "[ ! -e '$T/wrong.mlyze' ] && grep -q 'no spool recorded' '$T/st3.err'"
finish_target st
cleanup_state "$TP"

# 6. The built-in layout is the one debug info gives (when it is installed).
start_target lk single
if ls /usr/lib/debug/.build-id >/dev/null 2>&1; then
    a=$(A -v -o "$T/lk1.mlyze" "$TP" 2>&1 | grep -o 'glibc locks located.*')
    D -q --no-finalize "$TP"
    mkdir -p "$T/nodebug"
    b=$(MEMLYZE_DEBUG_DIR="$T/nodebug" A -v -o "$T/lk2.mlyze" "$TP" 2>&1 | grep -o 'glibc locks located.*')
    D -q --no-finalize "$TP"
    check "layout: read from debug info" grep -q 'debug info' <<<"$a"
    check "layout: the built-in table gives the same lock addresses" \
        [ -n "$b" ] && [ "${a#*: loader}" = "${b#*: loader}" ] && grep -q 'built-in layout of glibc' <<<"$b"
else
    echo "SKIP: layout: no debug info installed (libc6-dbg)"
fi
finish_target lk
cleanup_state "$TP"
finish
