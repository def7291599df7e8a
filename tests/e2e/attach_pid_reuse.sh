#!/usr/bin/env bash
# attach_pid_reuse.sh - a process exits while attached (killed), and its pid
# is given to a new one before anyone detaches. The dead one's recording is
# its trace, not lost: memlyze-detach PID writes it (it deleted the record
# and left the spool in /tmp for good), memlyze-snapshot and memlyze-attach
# name the earlier process instead of calling the new one exec'd or
# attached. The reuse is forced in a pid namespace (ns_last_pid).
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_pid_reuse" "no libmemlyze.so in the build"; finish; }
unshare -pf --mount-proc true 2>/dev/null || { skip "attach_pid_reuse" "unshare -p not permitted here"; finish; }

build_linecmd
cat > "$T/inner.sh" <<EOF
set -u
B='$B'; T='$T'; MEMLYZE='$MEMLYZE'
exec 3>&1
mkfifo "\$T/a.in"
"\$T/linecmd" <"\$T/a.in" >"\$T/a.out" &
A=\$!
exec 4>"\$T/a.in"
for _ in \$(seq 100); do grep -q ready "\$T/a.out" && break; sleep 0.05; done
"\$B/bin/memlyze-attach" -q -r 1 -o "\$T/a.mlyze" "\$A" || echo "attach A failed"
echo keep >&4
for _ in \$(seq 100); do grep -q done "\$T/a.out" && break; sleep 0.05; done
mkfifo "\$T/b.in"
sleep 0.5      # the drain puts what it has on disk every ~100 ms: a kill loses less
kill -9 "\$A"; wait "\$A" 2>/dev/null
echo \$((A - 1)) > /proc/sys/kernel/ns_last_pid     # a builtin: the next fork gets A
"\$T/linecmd" <"\$T/b.in" >"\$T/b.out" &
Bp=\$!
exec 5>"\$T/b.in"
for _ in \$(seq 100); do grep -q ready "\$T/b.out" && break; sleep 0.05; done
echo "reused \$([ "\$Bp" = "\$A" ] && echo yes || echo no)"
echo "snapshot: \$("\$MEMLYZE" snapshot -o "\$T/s.mlyze" "\$A" 2>&1)"
echo "attach: \$("\$B/bin/memlyze-attach" -q -o "\$T/b.mlyze" "\$A" 2>&1)"
d=\$("\$B/bin/memlyze-detach" "\$A" 2>&1); drc=\$?
echo "detach: \$d rc=\$drc"
echo "left: \$(ls /tmp/memlyze-\$A 2>/dev/null | tr '\n' ' ')"
echo "attach again: \$("\$B/bin/memlyze-attach" -q -o "\$T/b.mlyze" "\$A" 2>&1; echo "rc=\$?")"
echo "detach again: \$("\$B/bin/memlyze-detach" -q "\$A" 2>&1; echo "rc=\$?")"
exec 5>&-; wait "\$Bp"
echo "b exit \$?"
rm -rf "/tmp/memlyze-\$A"
EOF
out=$(timeout 120 unshare -pf --mount-proc bash "$T/inner.sh" 2>&1)
[ -n "${DEBUG_REUSE:-}" ] && echo "$out"
line() { grep "^$1: " <<<"$out" | head -1; }
check "the pid was reused" grep -qx "reused yes" <<<"$out"
check "snapshot of the new process names the earlier one's record (not an exec)" \
    bash -c 'grep -q "record for pid .* is of an earlier process that exited while attached" <<<"$0"' "$(line snapshot)"
check "attach is refused until that trace is written, saying so" \
    bash -c 'grep -q "is of an earlier process that exited while attached: memlyze-detach .* writes its trace first" <<<"$0"' "$(line attach)"
check "detach writes the earlier process's trace (rc 0)" \
    bash -c 'grep -q "an earlier one: the pid is now another process.s.*trace up to its exit" <<<"$0" && grep -q "rc=0" <<<"$0"' "$(line detach)"
check "... a valid trace with its 100 kept blocks" test "$(kept_bytes "$T/a.mlyze" 2>/dev/null)" = 100000
check "... and nothing is left in /tmp" test "$(line left)" = "left: "
check "the new process can then be attached and detached" \
    bash -c 'grep -q "rc=0" <<<"$0" && grep -q "rc=0" <<<"$1"' "$(line 'attach again')" "$(line 'detach again')"
check "the new process exits 0" grep -qx "b exit 0" <<<"$out"
finish
