#!/usr/bin/env bash
# Deadlock traps. Attach must succeed or fail cleanly within its timeout,
# and the target must keep running correctly either way:
#   - a thread sits in malloc_info() writing into a full pipe;
#   - the thread we would borrow is busy inside malloc (large mmap'ed blocks);
#   - another thread is always inside dlopen (a constructor that sleeps),
#     or the thread we are told to borrow always is;
#   - an injected call outlives the injector's timeout: the thread is let go
#     to finish it and must then resume its own blocked read correctly.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
A() { timeout 30 "$ATTACH" --payload "$TESTLIB" "$@"; }
D() { timeout 30 "$DETACH" "$@"; }
# clean_refusal DESC CMD...: CMD fails, with one line naming the safe point, within 10 s
clean_refusal() {
    local n=$1; shift
    local t0=$SECONDS out rc
    out=$("$@" 2>&1); rc=$?
    if [ $rc -ne 0 ] && [ $((SECONDS - t0)) -le 10 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q 'safe point' <<<"$out"
    then pass "$n"; else fail "$n" "rc=$rc: $out"; fi
}

start_target mi mallocinfo 4
mi=$(tid_of mi mallocinfo)
clean_refusal "mallocinfo: borrowing the thread inside malloc_info fails cleanly" A --timeout 1000 --thread "$mi" -o "$T/mi0.mlyze" "$TP"
check "mallocinfo: nothing injected after the refusal" bash -c "! grep -q memlyze /proc/$TP/maps"
check "mallocinfo: attach picks another thread" A -q --timeout 3000 -o "$T/mi1.mlyze" "$TP"
check "mallocinfo: detach" D -q "$TP"
finish_target mi
cleanup_state "$TP"

start_target big bigmalloc 4
big=$(tid_of big big0)
A -vv --thread "$big" -o "$T/big.mlyze" "$TP" >"$T/big.log" 2>&1
check "inmalloc: attach borrowing a thread that churns large blocks" grep -q "attached to $TP" "$T/big.log"
check "inmalloc: detach" D -q --thread "$big" "$TP"
finish_target big
cleanup_state "$TP"

start_target single single
A -vv -o "$T/sm.mlyze" "$TP" >"$T/sm.log" 2>&1
check "inmalloc: single-threaded churn attaches" grep -q "attached to $TP" "$T/sm.log"
check "inmalloc: detach" D -q "$TP"
finish_target single
cleanup_state "$TP"

MLZT_CTOR_SLEEP_MS=4000 start_target dl dlopen "$T/libslow.so"
dl=$(tid_of dl dlopen)
clean_refusal "dlopen: borrowing the thread that lives in the loader fails cleanly" A --timeout 1000 --thread "$dl" -o "$T/dl0.mlyze" "$TP"
# Another thread holds the loader lock all the time: no thread may be
# borrowed (tests/e2e/attach_locks.sh has the cases where it comes free).
clean_refusal "dlopen: attach while another thread never leaves dlopen fails cleanly" A --timeout 1000 -o "$T/dl1.mlyze" "$TP"
check "dlopen: nothing injected" bash -c "! grep -q memlyze /proc/$TP/maps"
finish_target dl
cleanup_state "$TP"
MLZT_ATTACH_SLEEP_MS=2500 start_target late block
rd=$(tid_of late read)
t0=$SECONDS
out=$(A --timeout 300 --thread "$rd" -o "$T/late.mlyze" "$TP" 2>&1); rc=$?
check "late: a call past the timeout fails in time, naming it" \
    bash -c "[ $rc -ne 0 ] && [ $((SECONDS - t0)) -le 5 ] && grep -q 'let go: it finishes the call' <<<'$out'"
sleep 2.5
check "late: the thread went back to its read" bash -c "[ \"\$(cut -d' ' -f1 /proc/$TP/task/$rd/syscall)\" = 0 ]"
check "late: detach after the late call completed" D -q "$TP"
finish_target late
check "late: its read completed normally" grep -q "^ok read" "$T/late.out"
cleanup_state "$TP"

# The target dies while the attach call runs in it: the attach fails and
# takes its state directory away, though /proc/PID/root is gone by then.
MLZT_ATTACH_SLEEP_MS=1500 start_target dies block
(sleep 0.5; kill -9 "$TP") &
out=$(A -o "$T/dies.mlyze" "$TP" 2>&1); rc=$?
{ wait "$TP"; } 2>/dev/null
check "dies: the attach fails, and leaves no state directory" \
    bash -c "[ $rc -ne 0 ] && [ ! -e /tmp/memlyze-$TP ]"
finish
