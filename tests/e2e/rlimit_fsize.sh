#!/usr/bin/env bash
# rlimit_fsize.sh - a target's RLIMIT_FSIZE never kills it through our
# spool: a write that starts past the limit gets the process SIGXFSZ,
# whose default is death, and the spool is written on the program's own
# threads twice (the first block at attach, on the borrowed thread; the
# last drain at exit, on the exiting one). The writer now checks the limit
# first and fails with EFBIG (format/writer.c).
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "rlimit_fsize" "no libmemlyze.so in the build"; finish; }

build_linecmd

# The limit lowered below the spool's size, then the program exits: the
# exiting thread writes the last events.
talk_start "$T/linecmd"
check "attach -r 1" "$B/bin/memlyze-attach" -q -r 1 -o "$T/exit.mlyze" "$pid"
say churn
say limit
say keep
talk_end
check "a target that lowered its file-size limit exits 0, as its twin (was: killed by SIGXFSZ)" test "$talk_rc" -eq 0
"$B/bin/memlyze-detach" -q "$pid" >/dev/null 2>&1
check "detach after its exit writes what the spool holds" "$MEMLYZE" validate "$T/exit.mlyze"
check "nothing is left in /tmp" test ! -e "/tmp/memlyze-$pid"

# A limit of 300 bytes from the start: the spool's first block, written on
# the thread attach borrows, cannot fit. The attach works or fails in one
# line, and the target lives on.
talk_start prlimit --fsize=300:300 "$T/linecmd"
out=$("$B/bin/memlyze-attach" -q -r 1 -o "$T/small.mlyze" "$pid" 2>&1); rc=$?
check "attach under a 300-byte file-size limit: done, or refused in one line" \
    bash -c "[ $rc -eq 0 ] || [ \$(printf '%s\n' \"\$0\" | wc -l) -eq 1 ]" "$out"
ask keep
check "... and the target goes on" test "$answer" = done
[ $rc -eq 0 ] && "$B/bin/memlyze-detach" -q "$pid" >/dev/null 2>&1
talk_end
check "... and exits 0 (was: killed by SIGXFSZ)" test "$talk_rc" -eq 0
cleanup_state "$pid"
finish
