#!/usr/bin/env bash
# A detach while the target has no free file descriptor: the payload cannot
# read /proc/self/maps to restore its GOT slots. It still stops sampling and
# seals its spool; memlyze-detach writes the trace, names that cause, exits
# 1, and leaves nothing in /tmp. (It said "GOT slots could not be written",
# wrote no trace and left the spool.) A later attach and detach finish the
# job.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_nofd" "no libmemlyze.so in the build"; finish; }

build_linecmd

talk_start "$T/linecmd"
check "attach" "$B/bin/memlyze-attach" -q -r 1 -o "$T/t1.mlyze" "$pid"
say keep
say fill
out=$("$B/bin/memlyze-detach" -q "$pid" 2>&1); rc=$?
check "detach with no free descriptor: exit 1, naming the cause" \
    bash -c "[ $rc -eq 1 ] && grep -q 'no file descriptor was free to read /proc/self/maps' <<<\"\$0\"" "$out"
check "... and the trace is written all the same, with the blocks" \
    bash -c "'$MEMLYZE' top --json '$T/t1.mlyze' | grep -q '\"live_bytes\": *100000'"
check "... and nothing is left in /tmp" test ! -e "/tmp/memlyze-$pid"
say unfill
check "a later attach works" "$B/bin/memlyze-attach" -q -r 1 -o "$T/t2.mlyze" "$pid"
say keep
check "and its detach succeeds" "$B/bin/memlyze-detach" -q "$pid"
check "the second trace has the second round" \
    bash -c "'$MEMLYZE' top --json '$T/t2.mlyze' | grep -q '\"live_bytes\": *100000'"
talk_end
cleanup_state "$pid"
finish
