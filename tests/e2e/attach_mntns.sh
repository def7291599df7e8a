#!/usr/bin/env bash
# A target in its own mount namespace (a container) whose program exists
# only there: its module paths name files we cannot see at those paths.
# The snapshot and the trace written at detach must name its functions all
# the same, read through /proc/PID/root. (They showed linecmd+0x1c93.)
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_mntns" "no libmemlyze.so in the build"; finish; }
unshare -m true 2>/dev/null || { skip "attach_mntns" "unshare -m not permitted here"; finish; }

build_linecmd
mkdir -p "$T/box"

# unshare and sh exec: the pid is linecmd's.
talk_start unshare -m sh -c "mount -t tmpfs none '$T/box' && cp '$T/linecmd' '$T/box/' && exec '$T/box/linecmd'"
check "the program is invisible outside its namespace" \
    bash -c "[ ! -e '$T/box/linecmd' ] && grep -q ' $T/box/linecmd\$' /proc/$pid/maps"
check "attach" "$B/bin/memlyze-attach" -q -r 1 -o "$T/mnt.mlyze" "$pid"
say keep
check "snapshot" "$MEMLYZE" snapshot -q -o "$T/snap.mlyze" "$pid"
check "the snapshot names the program's function" test "$(kept_bytes "$T/snap.mlyze")" = 100000
check "detach" "$B/bin/memlyze-detach" -q "$pid"
check "the trace names the program's function" test "$(kept_bytes "$T/mnt.mlyze")" = 100000
talk_end
cleanup_state "$pid"

# A container: its own PID namespace too. The payload knows itself as pid 1
# there, so memlyze-detach tells finalize the pid it is here.
if unshare -pfm --mount-proc true 2>/dev/null; then
    talk_start unshare -pfm --mount-proc sh -c "mount -t tmpfs none '$T/box' && cp '$T/linecmd' '$T/box/' && exec '$T/box/linecmd'"
    tp=$(pgrep -P "$pid" -x linecmd)
    check "container: the program is pid 1 there" bash -c "grep -q '^NSpid:[[:space:]]*$tp[[:space:]]*1\$' /proc/$tp/status"
    check "container: attach" "$B/bin/memlyze-attach" -q -r 1 -o "$T/pn.mlyze" "$tp"
    say keep
    check "container: snapshot" "$MEMLYZE" snapshot -q -o "$T/pn.snap.mlyze" "$tp"
    check "container: the snapshot names the program's function" test "$(kept_bytes "$T/pn.snap.mlyze")" = 100000
    check "container: detach" "$B/bin/memlyze-detach" -q "$tp"
    check "container: the trace names the program's function" test "$(kept_bytes "$T/pn.mlyze")" = 100000
    talk_end
    cleanup_state "$tp"
else
    skip "attach_mntns: a container" "unshare -p not permitted here"
fi

finish
