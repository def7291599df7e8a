#!/usr/bin/env bash
# The module table and the loader's lock, under fork and dlopen churn.
# 1. glibc's fork resets ld.so's load lock in the child but not the one
#    dl_iterate_phdr takes: a program thread walking the modules while
#    another forks leaves the child that lock held. The profiler's child
#    (memlyze run --follow-fork) walked the modules to set itself up and
#    waited forever (the program's child only mallocs and exits): it must
#    not walk until the program shows the lock free.
# 2. A refresh of the module table asked for after a dlopen, while another
#    refresh ran, gave up: the running one had walked the modules before the
#    library came, and the blocks allocated right after the dlopen lost
#    their callers (one site split in two).
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"

cc -O1 -g -pthread -o "$T/phdr_fork" "$ROOT/tests/targets/phdr_fork.c" || fail "build phdr_fork"
cd "$T"
for mode in walker childwalk; do
    out=$(timeout 120 "$MEMLYZE" run --follow-fork -r 1 -o "$T/$mode.mlyze" -- "$T/phdr_fork" $mode 150 2>&1); rc=$?
    check "run --follow-fork, $mode: every child ends with its status, no hang (exit 19)" test $rc -eq 19
    check "... and every child has its trace with its 100 blocks" \
        test "$(grep -c "wrote $T/$mode.phdr_fork.[0-9]*.mlyze: phdr_fork (pid [0-9]*), 10[0-9] allocations" <<<"$out")" -eq 150
    pkill -9 -f "$T/phdr_fork" 2>/dev/null
done
cd - >/dev/null

[ -n "$REAL_PAYLOAD" ] || { skip "fork_safety: dlopen churn" "no libmemlyze.so in the build"; finish; }

# A child forked by a process memlyze was detached from runs unprofiled; a
# later attach to it must still get a module table (it waited, with no
# table, for a dlopen that proves the loader's lock free, which a server
# child may never do).
modules_of() { "$MEMLYZE" dump "$1" | sed -n 's/^meta //p' | python3 -c "import json, sys; print(len(json.load(sys.stdin)['modules']))"; }
build_linecmd
talk_start "$T/linecmd"
"$B/bin/memlyze-attach" -q -r 1 -o "$T/parent.mlyze" "$pid" && "$B/bin/memlyze-detach" -q "$pid" || fail "attach/detach linecmd"
ask fork
cpid=${answer#child }
check "attach to the child of a detached process" "$B/bin/memlyze-attach" -q -r 1 -o "$T/child.mlyze" "$cpid"
check "... and detach" "$B/bin/memlyze-detach" -q "$cpid"
check "... its trace names the child's modules (the table was built)" test "$(modules_of "$T/child.mlyze")" -ge 3
kill "$cpid" 2>/dev/null
talk_end
cleanup_state "$pid"
cleanup_state "$cpid"
for k in 0 1 2 3 4 5 6 7; do
    cc -O1 -g -fPIC -shared -DID=$k -o "$T/libchurn$k.so" "$ROOT/tests/targets/dlchurn_lib.c" &&
    cc -O1 -g -fPIC -shared -DID=0 -o "$T/libkeep$k.so" "$ROOT/tests/targets/dlchurn_lib.c" || fail "build libs"
done
cc -O1 -g -pthread -o "$T/dlchurn" "$ROOT/tests/targets/dlchurn.c" || fail "build dlchurn"
keep_sites() {   # "COUNT CALLERS" of each site allocating in lib_alloc
    "$MEMLYZE" top --json -n 100 "$1" | python3 -c "
import json, sys
for s in json.load(sys.stdin)['sites']:
    if s['frames'] and s['frames'][0].startswith('lib_alloc') and int(s['live_count']) >= 1 and s['live_bytes'] >= 1000:
        print(int(s['live_count']), ','.join(f.split(' ')[0] for f in s['frames'][1:3]))"; }
for round in 1 2 3; do
    talk_start "$T/dlchurn" "$T"
    # The loader's lock is seldom free here: memlyze-attach may refuse (and say so); try again.
    for _ in $(seq 20); do
        "$B/bin/memlyze-attach" -q -r 1 --timeout 2000 -o "$T/dl$round.mlyze" "$pid" 2>"$T/att.err"; arc=$?
        [ $arc -eq 0 ] && break
        sleep 0.3
    done
    [ $arc -eq 0 ] || fail "attach dlchurn" "$(cat "$T/att.err")"
    say keep
    say keep
    "$B/bin/memlyze-detach" -q "$pid" || fail "detach dlchurn"
    talk_end
    cleanup_state "$pid"
    sites=$(keep_sites "$T/dl$round.mlyze")
    check "dlopen churn, round $round: the 800 kept blocks are one site, lib_keep <- main" test "$sites" = "800 lib_keep,main"
done
finish
