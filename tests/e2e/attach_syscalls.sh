#!/usr/bin/env bash
# Syscall restart: threads blocked in read (pipe), futex wait, epoll_wait,
# nanosleep, sigtimedwait and recv on a socket with a timeout must complete
# their call normally after attach/detach, both when they are merely stopped
# and when they are the thread the injector borrows (registers restored
# exactly; the kernel, or the injector, redoes the interrupted call).
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"

start_target block block
check "block: attach (thread chosen by the injector)" timeout 30 "$ATTACH" -q --payload "$TESTLIB" -o "$T/b0.mlyze" "$TP"
check "block: detach" timeout 30 "$DETACH" -q "$TP"
for th in read futex epoll nanosleep sigtimedwait recv; do
    tid=$(tid_of block $th)
    check "block: attach borrowing the thread in $th" \
        timeout 30 "$ATTACH" -q --thread "$tid" --payload "$TESTLIB" -o "$T/b-$th.mlyze" "$TP"
    check "block: detach borrowing the thread in $th" timeout 30 "$DETACH" -q --thread "$tid" "$TP"
done
finish_target block
for th in read futex epoll_wait nanosleep sigtimedwait recv; do
    check "block: $th completed normally" grep -q "^ok $th" "$T/block.out"
done
cleanup_state "$TP"
finish
