#!/usr/bin/env bash
# memlyze-attach / memlyze-detach machinery with a stand-in payload
# (tests/targets/attach_testlib.c, same entry points as libmemlyze.so):
# remote calls in a single-threaded program, reuse of the mapped payload,
# refusals, a process with its own SIGSEGV/SIGTRAP handlers, a SIGSTOPped
# process, a process in its own mount namespace, one in its own PID namespace.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
A() { timeout 30 "$ATTACH" --payload "$TESTLIB" "$@"; }
D() { timeout 30 "$DETACH" "$@"; }

# ---- single-threaded: remote mmap, memfd, dlopen, calls; the thread resumes
start_target single single
out=$(A -o "$T/s.mlyze" "$TP" 2>&1)
check "single: attach succeeds with one line" bash -c "[ \$(wc -l <<<'$out') -eq 1 ] && grep -q 'attached to $TP (target)' <<<'$out'"
check "single: the payload ran with our config" grep -q "rate=524288;spool=/tmp/memlyze-$TP/spool" /tmp/memlyze-$TP/spool.*.testlib
check "single: payload loaded from a memfd" grep -q '/memfd:memlyze-payload' "/proc/$TP/maps"
# The memfd stays open on purpose: the loader names the payload /proc/PID/fd/N,
# which debuggers open to read its symbols (see injector/load.c).
check "single: no scratch page left, exactly one memfd kept" bash -c "[ \$(ls -l /proc/$TP/fd | grep -c memfd) -eq 1 ] && [ \$(grep -c 'rwxp\|r-xp 00000000 00:00 0 *$' /proc/$TP/maps) -eq 0 ]"
check "single: second attach refused (already attached)" bash -c "out=\$('$ATTACH' --payload '$TESTLIB' -o '$T/s2.mlyze' $TP 2>&1); [ \$? -ne 0 ] && grep -q 'already attached' <<<\"\$out\""
check "single: detach" D "$TP"
check "single: attach again reuses the mapped payload" bash -c "'$ATTACH' --payload '$TESTLIB' -o '$T/s3.mlyze' $TP | grep -q 'payload reused' && [ \$(grep -c 'r-xp.*memfd:memlyze-payload' /proc/$TP/maps) -eq 1 ]"
check "single: detach again" D -q "$TP"
check "single: detach when not attached is a one-line error" bash -c "out=\$('$DETACH' $TP 2>&1); [ \$? -ne 0 ] && [ \$(wc -l <<<\"\$out\") -eq 1 ]"
finish_target single
cleanup_state "$TP"

# ---- refusals, each one line and non-zero
check "refuse: no such pid" bash -c "'$ATTACH' 999999 2>&1 | grep -q 'no such process'; [ \${PIPESTATUS[0]} -ne 0 ]"
check "refuse: --help exits 0" "$ATTACH" --help
check "refuse: detach --help exits 0" "$DETACH" --help
# --rate is read as memlyze run reads it: a sign or an overflow is a usage
# error (-1 attached at 2^64-1 B and lost the trace at detach), 1g is a size.
for r in -1 0 18014398509481985k 12x; do
    check "refuse: --rate $r is a usage error" bash -c "'$ATTACH' -r '$r' 999999 2>&1 | grep -q 'bad --rate'; [ \${PIPESTATUS[0]} -eq 2 ]"
done
check "--rate 1g is taken (as by memlyze run)" bash -c "'$ATTACH' -r 1g 999999 2>&1 | grep -q 'no such process'"
printf '#include <unistd.h>\nint main(void){for(;;)pause();}\n' >"$T/st.c"
if cc -static -o "$T/st" "$T/st.c" 2>/dev/null; then
    "$T/st" & SP=$!
    sleep 0.1
    check "refuse: statically linked" bash -c "'$ATTACH' --payload '$TESTLIB' $SP 2>&1 | grep -q 'statically linked'"
    kill $SP; wait $SP 2>/dev/null
else
    skip "refuse: statically linked" "cc -static fails: no static libc (Debian package libc6-dev)"
fi
sleep 30 & SL=$!
if command -v strace >/dev/null; then
    strace -p $SL -o /dev/null 2>/dev/null & STP=$!
    for _ in $(seq 50); do grep -q 'TracerPid:[[:space:]]*[1-9]' /proc/$SL/status && break; sleep 0.05; done
    check "refuse: already traced by another tracer" bash -c "'$ATTACH' --payload '$TESTLIB' $SL 2>&1 | grep -q 'already traced by $STP (strace)'"
    kill $STP; wait $STP 2>/dev/null
    # strace -p TID follows one thread: another thread than the main one.
    start_target traced churn 2
    tid=$(ls "/proc/$TP/task" | grep -vx "$TP" | head -1)
    strace -p "$tid" -o /dev/null 2>/dev/null & STP=$!
    for _ in $(seq 50); do grep -q 'TracerPid:[[:space:]]*[1-9]' "/proc/$TP/task/$tid/status" && break; sleep 0.05; done
    check "refuse: a thread already traced by another tracer" bash -c \
        "'$ATTACH' --payload '$TESTLIB' $TP 2>&1 | grep -q '(its thread $tid) is already traced by $STP (strace)'"
    kill $STP; wait $STP 2>/dev/null
    finish_target traced
else
    skip "refuse: already traced by another tracer" "strace not installed"
    skip "refuse: a thread already traced by another tracer" "strace not installed"
fi
kill $SL; wait $SL 2>/dev/null
start_target strict strict
sleep 0.1
check "refuse: seccomp strict mode" bash -c "'$ATTACH' --payload '$TESTLIB' $TP 2>&1 | grep -q 'seccomp strict mode'"
kill -9 "$TP"; wait "$TP" 2>/dev/null
start_target seccomp seccomp
check "refuse: seccomp filter without --allow-seccomp" bash -c "'$ATTACH' --payload '$TESTLIB' $TP 2>&1 | grep -q 'seccomp filter'"
check "seccomp: --allow-seccomp attaches under an allow-all filter" A -q --allow-seccomp -o "$T/sc.mlyze" "$TP"
check "seccomp: detach" D -q "$TP"
finish_target seccomp
cleanup_state "$TP"
# A filter that refuses clone: the payload cannot start its drain thread,
# and says that (it said it could not open its spool file).
start_target noclone noclone
check "seccomp without clone: the refusal names the drain thread" \
    bash -c "'$ATTACH' --allow-seccomp -o '$T/nc.mlyze' $TP 2>&1 | grep -q \"cannot start the profiler's drain thread\""
finish_target noclone
cleanup_state "$TP"
# timeout(1) waits in sigsuspend, its only thread: nothing to borrow, and the
# refusal says why.
timeout 30 sleep 30 & SU=$!
for _ in $(seq 50); do [ "$(cut -d' ' -f1 /proc/$SU/syscall 2>/dev/null)" = 130 ] && break; sleep 0.05; done
check "refuse: the only thread waits in sigsuspend, and the refusal says so" bash -c \
    "'$ATTACH' --timeout 300 --payload '$TESTLIB' -o '$T/su.mlyze' $SU 2>&1 | grep -q 'swaps its signal mask' &&
     [ \${PIPESTATUS[0]} -ne 0 ] && [ ! -e /tmp/memlyze-$SU ]"
kill $SU; wait $SU 2>/dev/null
cp "$TESTLIB" "$T/evil.so"; chmod 666 "$T/evil.so"
start_target refuse single
check "refuse: payload writable by others" bash -c "'$ATTACH' --payload '$T/evil.so' $TP 2>&1 | grep -q 'writable by everyone'"
check "refuse: nothing was injected" bash -c "! grep -q memlyze /proc/$TP/maps"
check "refuse: -o in a directory that does not exist, before anything is injected" bash -c \
    "'$ATTACH' -o '$T/no/such/dir/x.mlyze' $TP 2>&1 | grep -q 'cannot write the trace into $T/no/such/dir: No such file' &&
     [ \${PIPESTATUS[0]} -ne 0 ] && ! grep -q memlyze /proc/$TP/maps && [ ! -e /tmp/memlyze-$TP ]"
finish_target refuse

# ---- own SIGSEGV / SIGTRAP handlers: our int3 never reaches them
start_target handlers handlers
check "handlers: attach" A -q -o "$T/h.mlyze" "$TP"
check "handlers: detach" D -q "$TP"
finish_target handlers
cleanup_state "$TP"

# ---- a group-stopped process: attach works and leaves it stopped
start_target stopped churn 4
kill -STOP "$TP"
for _ in $(seq 50); do [ "$(state_of $TP)" = T ] && break; sleep 0.02; done
check "sigstop: attach to a stopped process" A -q -o "$T/st.mlyze" "$TP"
sleep 0.2
check "sigstop: still stopped after attach" test "$(state_of $TP)" = T
check "sigstop: detach while stopped is refused cleanly" bash -c "'$DETACH' $TP 2>&1 | grep -q 'is stopped'"
check "sigstop: still stopped" test "$(state_of $TP)" = T
kill -CONT "$TP"
check "sigstop: detach after SIGCONT" D -q "$TP"
finish_target stopped
cleanup_state "$TP"

# ---- detach after the target forked: the child has the payload too
start_target fork fork
check "fork: attach" A -q -o "$T/f.mlyze" "$TP"
touch "$T/fork.stop.fork"
for _ in $(seq 100); do grep -q '^child ' "$T/fork.tids" && break; sleep 0.02; done
child=$(tid_of fork child)
check "fork: the child inherited the payload" grep -q memfd:memlyze-payload "/proc/$child/maps"
check "fork: detach the child" D -q "$child"
check "fork: detach the parent" D -q "$TP"
finish_target fork
cleanup_state "$TP"

# ---- an unprivileged user on its own process (no map_files, no CAP_SYS_NICE)
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null && id nobody >/dev/null 2>&1; then
    NR="$T/nr"; mkdir -p "$NR/bin" "$NR/run"; chmod 711 "$T"; chmod 755 "$NR" "$NR/bin"; chmod 777 "$NR/run"
    cp "$ATTACH" "$DETACH" "$T/target" "$NR/bin/"; cp "$TESTLIB" "$NR/libmlzt.so"; chmod 755 "$NR"/bin/* "$NR/libmlzt.so"
    AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
    $AS_NOBODY "$NR/bin/target" single "$NR/run/stop" "$NR/run/tids" >"$NR/run/out" 2>&1 &
    TP=$!
    for _ in $(seq 100); do [ -s "$NR/run/tids" ] && break; sleep 0.02; done
    check "nonroot: attach as the same user" $AS_NOBODY "$NR/bin/memlyze-attach" -q --payload "$NR/libmlzt.so" -o "$NR/run/x.mlyze" "$TP"
    check "nonroot: detach (payload found without map_files)" $AS_NOBODY "$NR/bin/memlyze-detach" -q "$TP"
    check "nonroot: attach again reuses the payload" bash -c "$AS_NOBODY '$NR/bin/memlyze-attach' --payload '$NR/libmlzt.so' -o '$NR/run/y.mlyze' $TP | grep -q 'payload reused'"
    check "nonroot: detach again" $AS_NOBODY "$NR/bin/memlyze-detach" -q "$TP"
    touch "$NR/run/stop"; wait "$TP"
    check "nonroot: target ran on correctly" grep -q '^target: all ok' "$NR/run/out"
    cleanup_state "$TP"
else
    skip "nonroot: attach and detach as an ordinary user" "needs root to switch to nobody, and setpriv"
fi

# ---- its own mount namespace, a tmpfs over the payload's folder: memfd still works
if unshare -m true 2>/dev/null; then
    mkdir -p "$T/plib" && cp "$TESTLIB" "$T/plib/libmlzt.so"
    rm -f "$T/ns.stop" "$T/ns.tids"
    unshare -m sh -c "mount -t tmpfs none '$T/plib' && exec '$T/target' single '$T/ns.stop' '$T/ns.tids'" >"$T/ns.out" 2>&1 &
    TP=$!
    for _ in $(seq 100); do [ -s "$T/ns.tids" ] && break; sleep 0.02; done
    check "mntns: payload path invisible to the target" bash -c "[ ! -e /proc/$TP/root$T/plib/libmlzt.so ]"
    check "mntns: attach" timeout 30 "$ATTACH" -q --payload "$T/plib/libmlzt.so" -o "$T/ns.mlyze" "$TP"
    check "mntns: detach" D -q "$TP"
    finish_target ns
    cleanup_state "$TP"
else
    skip "mntns: payload invisible to the target" "unshare -m not permitted here"
fi

# ---- its own PID namespace (a container): pid 1 there. The loader lock
# records its owner by the tid the target sees, and the memfd is named by
# the target's own pid.
if unshare -pf --mount-proc true 2>/dev/null; then
    rm -f "$T/pn.stop" "$T/pn.tids"
    unshare -pf --mount-proc "$T/target" single "$T/pn.stop" "$T/pn.tids" >"$T/pn.out" 2>&1 &
    up=$!
    for _ in $(seq 100); do [ -s "$T/pn.tids" ] && break; sleep 0.02; done
    TP=$(pgrep -P "$up" -x target)
    check "pidns: the target is pid 1 in its namespace" bash -c "grep -q '^NSpid:[[:space:]]*$TP[[:space:]]*1\$' /proc/$TP/status"
    check "pidns: attach" A -q -o "$T/pn.mlyze" "$TP"
    check "pidns: the payload ran" grep -q "spool=/tmp/memlyze-$TP/spool" /tmp/memlyze-$TP/spool.*.testlib
    check "pidns: detach" D -q "$TP"
    touch "$T/pn.stop"
    wait "$up"
    check "pidns: target ran on correctly" grep -q '^target: all ok' "$T/pn.out"
    cleanup_state "$TP"
else
    skip "pidns: a process in its own PID namespace" "unshare -p not permitted here"
fi
finish
