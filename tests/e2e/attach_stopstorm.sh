#!/usr/bin/env bash
# attach_stopstorm.sh - SIGSTOP and SIGCONT reaching the target while
# memlyze-attach runs its injected call (kill -STOP, a job-control shell):
# the stop is delivered and the call runs through the group stop, where it
# was aborted half-way and the payload refused every later attach ("an
# earlier attach or detach is still running") for the process's life.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_stopstorm" "no libmemlyze.so in the build"; finish; }

build_linecmd
talk_start "$T/linecmd"
tries=${STORM_TRIES:-12} attached=0 aborted="" wedged=""
for i in $(seq "$tries"); do
    ( while kill -STOP "$pid" 2>/dev/null; do
          sleep 0.00$((RANDOM % 9 + 1)); kill -CONT "$pid" 2>/dev/null || exit; sleep 0.00$((RANDOM % 9 + 1))
      done ) &
    storm=$!
    out=$("$B/bin/memlyze-attach" -q -r 1 --timeout 20000 -o "$T/s$i.mlyze" "$pid" 2>&1); rc=$?
    kill "$storm"; wait "$storm" 2>/dev/null; kill -CONT "$pid"
    grep -q "aborted" <<<"$out" && aborted+="try $i: $out; "
    if [ $rc -eq 0 ]; then
        attached=$((attached + 1))
        "$B/bin/memlyze-detach" -q --no-finalize "$pid" >/dev/null 2>&1 || wedged+="try $i: detach failed; "
    fi
    cleanup_state "$pid"
done
check "no injected call aborted by a SIGSTOP ($attached of $tries attaches under the storm went through)" test -z "$aborted"
[ -n "$aborted" ] && echo "$aborted" | head -c 600
check "every attach under the storm could be detached" test -z "$wedged"
check "after the storm: attach" "$B/bin/memlyze-attach" -q -r 1 -o "$T/after.mlyze" "$pid"
say keep
check "after the storm: detach, the kept blocks in the trace" "$B/bin/memlyze-detach" -q "$pid"
check "... 100000 B of them" test "$(kept_bytes "$T/after.mlyze")" = 100000
ask keep
check "the target runs on, not stopped" test "$answer" = done
talk_end
check "and exits 0" test "$talk_rc" -eq 0
cleanup_state "$pid"
finish
