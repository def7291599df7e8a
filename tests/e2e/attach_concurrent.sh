#!/usr/bin/env bash
# memlyze's commands against each other and against the target's forks:
#  - a snapshot of a fork child of an attached process: the child's heap map
#    copy describes the parent's heap (it was read as the child's); attach
#    of that child names its inherited slots (it said "already attached");
#  - a snapshot while memlyze-detach frees the stack table (every sample
#    came out with no frames, in a valid file);
#  - memlyze watch across a detach and a new attach between two refreshes
#    (the new session's samples were put under the old session's sites);
#  - two memlyze-attach at once: one is refused before it touches anything
#    (a refused one dropped the other's record, which then failed at its
#    commit with the profiler started, and detach lost the trace).
# Each interleaving is made certain with gdb holding one command.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_concurrent" "no libmemlyze.so in the build"; finish; }
command -v gdb >/dev/null || { skip "attach_concurrent" "gdb not installed"; finish; }
ATTACH="$B/bin/memlyze-attach"; DETACH="$B/bin/memlyze-detach"
build_linecmd

# ---- a fork child
talk_start "$T/linecmd"
check "fork: attach" "$ATTACH" -q -r 1 -o "$T/f.mlyze" "$pid"
say keep
ask fork
child=${answer#child }
out=$("$MEMLYZE" snapshot -q -o "$T/child.mlyze" "$child" 2>&1); rc=$?
check "fork: a snapshot of the child is refused, one line (the profiler is its parent's)" \
    bash -c "[ $rc -eq 1 ] && [ \$(wc -l <<<\"\$0\") -eq 1 ] && grep -q 'not attached' <<<\"\$0\" && [ ! -e '$T/child.mlyze' ]" "$out"
# It inherited the patched GOT slots and records nothing: attach says so
# and what to do (it said "already attached"); after that, a fresh start.
out=$("$ATTACH" -q -o "$T/c.mlyze" "$child" 2>&1); rc=$?
check "fork: attach of the child refused, naming the inherited slots and the way out" \
    bash -c "[ $rc -ne 0 ] && grep -q 'was forked by an attached process.*memlyze-detach $child puts them back' <<<\"\$0\"" "$out"
check "fork: detach of the child puts its slots back" "$DETACH" -q --no-finalize "$child"
check "fork: then the child attaches" "$ATTACH" -q -r 1 -o "$T/c.mlyze" "$child"
check "fork: ... and detaches, its trace valid" bash -c "'$DETACH' -q '$child' && '$MEMLYZE' validate '$T/c.mlyze'"
cleanup_state "$child"
kill "$child"
check "fork: the parent's snapshot still has its blocks" \
    "$MEMLYZE" snapshot -q -o "$T/parent.mlyze" "$pid"
check "fork: ... 100 x 1000 B at kept_site" test "$(kept_bytes "$T/parent.mlyze")" = 100000
check "fork: detach" "$DETACH" -q "$pid"
talk_end
cleanup_state "$pid"

# ---- a snapshot held by gdb while memlyze-detach runs
talk_start "$T/linecmd"
"$ATTACH" -q -r 1 -o "$T/d.mlyze" "$pid"
say keep
out=$(G -ex 'break read_stacks' -ex "run snapshot -q -o $T/sd.mlyze $pid" \
        -ex "shell '$DETACH' -q $pid" -ex continue --args "$MEMLYZE")
check "snapshot during a detach: fails naming the detach, no file" \
    bash -c "grep -q 'memlyze was detached from process $pid while its heap was read' <<<\"\$0\" && [ ! -e '$T/sd.mlyze' ]" "$out"
check "... and the detach wrote its trace" test "$(kept_bytes "$T/d.mlyze")" = 100000
talk_end
cleanup_state "$pid"

# ---- watch across a detach and a new attach between two refreshes
talk_start "$T/linecmd"
"$ATTACH" -q -r 1 -o "$T/w1.mlyze" "$pid"
say keep
"$MEMLYZE" watch -i 6 "$pid" > "$T/watch.out" 2>&1 &
wpid=$!
for _ in $(seq 100); do [ -s "$T/watch.out" ] && break; sleep 0.05; done
"$DETACH" -q "$pid"
"$ATTACH" -q -r 1 -o "$T/w2.mlyze" "$pid"
say keep
for _ in $(seq 200); do kill -0 "$wpid" 2>/dev/null || break; sleep 0.05; done
kill -0 "$wpid" 2>/dev/null && kill "$wpid"
wait "$wpid" 2>/dev/null
check "watch: a new session stops it, saying so" grep -q "memlyze was detached from process $pid (and attached again)" "$T/watch.out"
"$DETACH" -q "$pid"
talk_end
cleanup_state "$pid"

# ---- two memlyze-attach at once: A held by gdb once it has made its
# state directory, B meanwhile
talk_start "$T/linecmd"
out=$(G -ex 'break mlz__session_begin' -ex "run -q -r 1 -o $T/a.mlyze $pid" \
        -ex "shell '$ATTACH' -q -r 1 -o '$T/b.mlyze' $pid > '$T/b.out' 2>&1; echo \$? >> '$T/b.out'" \
        -ex continue --args "$ATTACH")
check "two attaches: the second is refused, naming the first, one line" \
    bash -c "grep -q '^memlyze-attach: another memlyze-attach is running on process $pid\$' '$T/b.out' && [ \$(wc -l < '$T/b.out') -eq 2 ] && [ \"\$(tail -1 '$T/b.out')\" = 1 ]"
check "... the first succeeds" bash -c "grep -q 'exited normally' <<<\"\$0\" && ! grep -q 'memlyze-attach:' <<<\"\$0\"" "$out"
say keep
check "... its detach writes the trace" "$DETACH" -q "$pid"
check "... with the blocks" test "$(kept_bytes "$T/a.mlyze")" = 100000
check "... and nothing is left in /tmp" test ! -e "/tmp/memlyze-$pid"
talk_end
cleanup_state "$pid"
finish
