#!/usr/bin/env bash
# The spool cannot grow (here: the target lowered its own file-size limit
# to 1 MiB after the attach, as a full disk would stop it too). The payload
# keeps what it wrote, unsealed; memlyze-detach writes the trace from it,
# says why it is short, exits 1 and leaves nothing in /tmp. (It deleted the
# spool, said "the payload wrote no spool" and exited 0.) The same for a
# target that drops root after the attach.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_spool_full" "no libmemlyze.so in the build"; finish; }

build_linecmd

talk_start "$T/linecmd"
check "attach" "$B/bin/memlyze-attach" -q -r 1 -o "$T/t.mlyze" "$pid"
say limit
say keep
say churn
say churn
out=$("$B/bin/memlyze-detach" -q "$pid" 2>&1); rc=$?
check "detach: exit 1, naming the file-size limit" \
    bash -c "[ $rc -eq 1 ] && grep -q \"could not finish writing its spool (it reached its file-size limit of 1048576 bytes)\" <<<\"\$0\"" "$out"
check "the trace is written from what the spool holds" "$MEMLYZE" validate "$T/t.mlyze"
check "... with the kept blocks, made before the spool filled" \
    bash -c "'$MEMLYZE' top --json '$T/t.mlyze' | python3 -c \"
import json, sys
s = [x for x in json.load(sys.stdin)['sites'] if x['frames'][0].startswith('kept_site ')]
sys.exit(not s or sum(x['live_bytes'] for x in s) != 100000)\""
check "nothing is left in /tmp" test ! -e "/tmp/memlyze-$pid"
say churn
talk_end
check "the target ran on and exited normally" test "$talk_rc" -eq 0
cleanup_state "$pid"

# A daemon dropping root after the attach may no longer write in the
# root-owned spool directory: the seal fails the same way, and the cause
# is named.
if [ "$(id -u)" = 0 ]; then
    talk_start "$T/linecmd"
    "$B/bin/memlyze-attach" -q -r 1 -o "$T/u.mlyze" "$pid" || fail "attach (uid drop)"
    say keep
    say churn
    say drop
    out=$("$B/bin/memlyze-detach" -q "$pid" 2>&1); rc=$?
    check "uid dropped: exit 1, naming the new uid" \
        bash -c "[ $rc -eq 1 ] && grep -q 'the process now runs as uid 65534' <<<\"\$0\"" "$out"
    check "uid dropped: the trace holds the kept blocks" \
        bash -c "'$MEMLYZE' top --json '$T/u.mlyze' | grep -q '\"live_bytes\": *100000'"
    check "uid dropped: nothing is left in /tmp" test ! -e "/tmp/memlyze-$pid"
    talk_end
    cleanup_state "$pid"
else
    skip "uid dropped after attach" "needs root"
fi
finish
