#!/usr/bin/env bash
# attach_forkchild.sh - a child forked by an attached process inherits the
# patched GOT slots but records nothing (README). memlyze-attach on it
# says so and what to do (it said "already attached"); memlyze-detach puts
# the slots back, and then it can be attached like any process.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_forkchild" "no libmemlyze.so in the build"; finish; }

build_linecmd
talk_start "$T/linecmd"
check "attach the parent" "$B/bin/memlyze-attach" -q -r 1 -o "$T/p.mlyze" "$pid"
say keep
ask fork
child=${answer#child }
out=$("$B/bin/memlyze-attach" -q -o "$T/c.mlyze" "$child" 2>&1); rc=$?
check "attach of the fork child: refused, naming the inherited slots and the way out" \
    bash -c "[ $rc -ne 0 ] && grep -q 'was forked by an attached process.*memlyze-detach $child puts them back' <<<\"\$0\"" "$out"
check "detach of the child puts its slots back" "$B/bin/memlyze-detach" -q --no-finalize "$child"
check "then the child attaches" "$B/bin/memlyze-attach" -q -r 1 -o "$T/c.mlyze" "$child"
check "... and detaches" "$B/bin/memlyze-detach" -q "$child"
check "... its trace valid" "$MEMLYZE" validate "$T/c.mlyze"
kill "$child" 2>/dev/null
check "the parent detaches, its kept blocks in the trace" "$B/bin/memlyze-detach" -q "$pid"
check "... 100000 B of them" test "$(kept_bytes "$T/p.mlyze")" = 100000
talk_end
cleanup_state "$pid"; cleanup_state "$child"
finish
