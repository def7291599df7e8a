# attach_helpers.sh - shared by tests/e2e/attach_*.sh (sourced after lib.sh).
# Builds what the tests need at run time: the injector (unless the build
# already has it), the target programs and a stand-in payload.
ATTACH="$B/bin/memlyze-attach"
DETACH="$B/bin/memlyze-detach"
TGT_SRC="$ROOT/tests/targets"
if [ ! -x "$ATTACH" ] || [ ! -x "$DETACH" ]; then
    # Not in the build yet: build the injector privately, beside the memlyze tool.
    mkdir -p "$T/bin"
    for m in attach detach; do
        cc -std=c11 -O2 -g -Wall -Wextra -D_GNU_SOURCE -I"$ROOT/proc" -I"$ROOT/payload" \
            $(ls "$ROOT"/injector/*.c | grep -v _main.c) "$ROOT"/proc/*.c "$ROOT/injector/${m}_main.c" \
            -lelf -ldw -o "$T/bin/memlyze-$m" || { fail "build memlyze-$m"; exit 1; }
    done
    ln -sf "$MEMLYZE" "$T/bin/memlyze"
    mkdir -p "$T/lib"
    [ -f "$B/lib/libmemlyze.so" ] && ln -sf "$B/lib/libmemlyze.so" "$T/lib/libmemlyze.so"
    ATTACH="$T/bin/memlyze-attach"
    DETACH="$T/bin/memlyze-detach"
fi
cc -O2 -g -pthread -rdynamic -o "$T/target" "$TGT_SRC/attach_target.c" -ldl || { fail "build attach_target"; exit 1; }
cc -O2 -g -shared -fPIC -o "$T/libmlzt.so" "$TGT_SRC/attach_testlib.c" || { fail "build attach_testlib"; exit 1; }
cc -O2 -shared -fPIC -o "$T/libslow.so" "$TGT_SRC/attach_slowlib.c" || { fail "build attach_slowlib"; exit 1; }
cc -O2 -shared -fPIC -o "$T/libctorwait.so" "$TGT_SRC/attach_ctorwait.c" || { fail "build attach_ctorwait"; exit 1; }
chmod 755 "$T"/*.so
TESTLIB="$T/libmlzt.so"
# A real payload exporting the attach entry points, if the build has one.
REAL_PAYLOAD=""
if [ -f "$B/lib/libmemlyze.so" ] && nm -D "$B/lib/libmemlyze.so" 2>/dev/null | grep -q ' T memlyze_attach$'; then
    REAL_PAYLOAD="$B/lib/libmemlyze.so"
fi

# start_target NAME MODE [ARG]: sets TP; the target's files are $T/NAME.*
start_target() {
    local name=$1; shift
    rm -f "$T/$name.stop" "$T/$name.tids"
    "$T/target" "$1" "$T/$name.stop" "$T/$name.tids" "${@:2}" >"$T/$name.out" 2>&1 &
    TP=$!
    local want=1
    case "$1" in block) want=7;; fork) want=1;; churn|bigmalloc) want=$(( ${2:-4} ));; mallocinfo) want=$(( ${2:-4} + 2 ));; dlopen|ctorwait|inhandler) want=2;; vfork) want=3;; esac
    for _ in $(seq 200); do
        [ "$(cat "$T/$name.tids" 2>/dev/null | wc -l)" -ge "$want" ] && break
        sleep 0.02
    done
    sleep 0.2          # let blocking threads reach their syscalls
}
tid_of() { awk -v n="$2" '$1 == n { print $2 }' "$T/$1.tids"; }
# finish_target NAME: tells it to stop, waits (20 s at most), checks its verdict.
finish_target() {
    local name=$1 i
    touch "$T/$name.stop"
    for i in $(seq 400); do kill -0 "$TP" 2>/dev/null || break; sleep 0.05; done
    if kill -0 "$TP" 2>/dev/null; then kill -9 "$TP"; fail "$name: target did not finish (hung)"; return; fi
    wait "$TP"
    local rc=$?
    if [ $rc -eq 0 ] && grep -q '^target: all ok' "$T/$name.out"; then pass "$name: target ran on correctly"
    else fail "$name: target ran on correctly" "exit $rc: $(grep -v '^ok ' "$T/$name.out" | head -5)"; fi
}
state_of() { awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null; }
cleanup_state() { rm -rf "/tmp/memlyze-$1"; }
# A target driven by lines on stdin, answering each with one line: talk_start
# PROG runs it as coproc TGT, sets pid and waits for its first line; say LINE
# sends LINE and waits (30 s at most) for the answer (ask: kept in $answer);
# talk_end closes its stdin and waits for it, leaving its exit status in
# talk_rc.
talk_start() { coproc TGT { exec "$@"; }; pid=$TGT_PID; read -r -t 10 _ <&"${TGT[0]}"; }
say() { echo "$1" >&"${TGT[1]}"; read -r -t 30 _ <&"${TGT[0]}"; }
ask() { echo "$1" >&"${TGT[1]}"; read -r -t 30 answer <&"${TGT[0]}"; }   # the answer in $answer
talk_end() { exec {TGT[1]}>&-; wait "$pid" 2>/dev/null; talk_rc=$?; }
# The line-driven target (tests/targets/linecmd.c) as $T/linecmd, and the
# live bytes of its kept_site in a trace or snapshot.
build_linecmd() { cc -O1 -g -o "$T/linecmd" "$ROOT/tests/targets/linecmd.c" || fail "build linecmd"; }
kept_bytes() {
    "$MEMLYZE" top --json -n 20 "$1" | python3 -c "
import json, sys; d = json.load(sys.stdin)
print(int(round(sum(s['live_bytes'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('kept_site')))))"
}
