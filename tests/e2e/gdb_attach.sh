#!/usr/bin/env bash
# gdb `memlyze attach` / `memlyze detach` round trip on running programs:
# the program's output is unchanged and the trace has the allocations made
# while attached, exactly. The safety rule: a program stopped inside malloc
# with no other thread is refused with one line naming the thread; with
# other threads, the call is made from one at a safe point (and the user's
# breakpoints do not interrupt it).
. "$(dirname "$0")/lib.sh"
export PYTHONDONTWRITEBYTECODE=1      # no __pycache__ next to the scripts
GDBPY="$ROOT/scripts/gdb/memlyze.py"
if ! command -v gdb >/dev/null || ! gdb -nx -batch -ex 'python print(1)' >/dev/null 2>&1; then
    skip "gdb attach" "gdb with Python not installed; make deps"
    finish
fi
export MEMLYZE_PAYLOAD="$B/lib/libmemlyze.so" MEMLYZE_BIN="$MEMLYZE"
one_error() { [ "$(grep -c '^memlyze: ' <<<"$1")" -eq 1 ] && grep -q "^memlyze: .*$2" <<<"$1" && ! grep -q Traceback <<<"$1"; }
json_site() {   # json_site JSON FUNC KEY: KEY summed over sites whose leaf frame is FUNC
    python3 -c "
import json; d=json.load(open('$1'))
print(int(round(sum(s['$3'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('$2 ')))))"
}
wait_lines() { for _ in $(seq 100); do [ "$(wc -l < "$1" 2>/dev/null || echo 0)" -ge "$2" ] && return; sleep 0.05; done; }
cc -O2 -g -o "$T/dbg_work" "$ROOT/tests/targets/dbg_work.c" || fail "build dbg_work"

# The reference: five rounds without any profiler.
printf 'work\nwork\nwork\nwork\nwork\n' | "$T/dbg_work" > "$T/plain.out"

# 1. The same five rounds: one before attach (stopped inside malloc: refused),
# two while attached, one after detach.
mkfifo "$T/in"
"$T/dbg_work" < "$T/in" > "$T/prof.out" 2>&1 & WPID=$!
exec {IN}>"$T/in"
wait_lines "$T/prof.out" 1
(sleep 1; echo work >&"$IN") & EPID=$!
out=$(G -p "$WPID" -ex "source $GDBPY" -ex 'break malloc' -ex continue -ex 'memlyze attach --rate 1' -ex delete)
check "stopped in malloc, single thread: attach refused with one line naming the thread" \
    one_error "$out" "no thread is at a safe point (thread 1, LWP $WPID, is in .*malloc"
wait "$EPID"; wait_lines "$T/prof.out" 2
echo work >&"$IN"; wait_lines "$T/prof.out" 3
cd "$T"
out=$(G -p "$WPID" -ex "source $GDBPY" -ex 'memlyze status' -ex 'memlyze attach --rate 1 --output att.mlyze' \
      -ex 'memlyze status' -ex 'memlyze attach')
cd - >/dev/null
check "attach: loads the payload and starts" bash -c "grep -q '^memlyze: attached to process $WPID, rate 1 B (exact), spool $T/att.mlyze.spool' <<<\"\$0\"" "$out"
check "attach: before, no payload; after, attached" bash -c "grep -q '^memlyze: no memlyze payload in this process' <<<\"\$0\" &&
    grep -q '^state: attached (GOT mode), sampling; pid $WPID; rate 1' <<<\"\$0\"" "$out"
check "attach twice: one-line refusal" bash -c "grep -q '^memlyze: memlyze is already attached in process $WPID' <<<\"\$0\"" "$out"
echo work >&"$IN"; echo work >&"$IN"; wait_lines "$T/prof.out" 5
# A new gdb session: the spool is found through the payload's debug info.
out=$(G -p "$WPID" -ex "source $GDBPY" -ex 'memlyze top 2' -ex 'memlyze detach' -ex 'memlyze detach')
check "top while attached: work_keep, 20 objects of 1000 B" bash -c "grep -q '^   1  19.5 KiB .* 20       20  work_keep (dbg_work.c:' <<<\"\$0\"" "$out"
check "detach: trace written" bash -c "grep -q '^memlyze: detached from process $WPID; trace written to $T/att.mlyze' <<<\"\$0\"" "$out"
check "detach twice: one-line refusal" bash -c "grep -q '^memlyze: memlyze is not attached to process $WPID' <<<\"\$0\"" "$out"
echo work >&"$IN"
exec {IN}>&-
wait "$WPID"
check "program output unchanged by attach and detach" cmp "$T/plain.out" "$T/prof.out"
check "trace valid" "$MEMLYZE" validate "$T/att.mlyze"
check "spool removed after finalize" test ! -e "$T/att.mlyze.spool"
"$MEMLYZE" top --json -n 20 "$T/att.mlyze" > "$T/att.json"
"$MEMLYZE" top --json --by allocated -n 20 "$T/att.mlyze" > "$T/att.alloc.json"
check "trace: work_keep live exactly 2 rounds (20000 B)" test "$(json_site "$T/att.json" work_keep live_bytes)" = 20000
check "trace: work_temp allocated exactly 2 rounds (12800 B), none live" bash -c "
    [ \"\$(python3 -c \"
import json; d=json.load(open('$T/att.alloc.json'))
s=[x for x in d['sites'] if x['frames'][0].startswith('work_temp ')]
print(int(sum(x['alloc_bytes'] for x in s)), int(sum(x['live_bytes'] for x in s)))\")\" = '12800 0' ]"

# 2. A multithreaded program stopped in malloc: the call goes through a safe
# thread, breakpoints stay as the user set them.
cc -O2 -g -pthread -o "$T/holder" "$ROOT/tests/targets/holder.c" || fail "build holder"
mkfifo "$T/hin"
"$T/holder" 4 < "$T/hin" > "$T/holder.out" 2>&1 & HPID=$!
exec {HIN}>"$T/hin"
wait_lines "$T/holder.out" 1
out=$(G -p "$HPID" -ex "source $GDBPY" -ex 'break malloc' -ex continue -ex "memlyze attach --rate 4096 --output $T/mt.mlyze" \
      -ex 'info breakpoints' -ex continue -ex "memlyze detach" -ex delete)
printf '%s\n' "$out" > "$T/mt.log"
check "stopped in malloc, other threads: attach calls from a safe thread" bash -c "
    grep -q '^memlyze: thread [0-9]* (LWP [0-9]*) is in .*malloc.*; calling from thread' <<<\"\$0\" &&
    grep -q '^memlyze: attached to process $HPID, rate 4096 B' <<<\"\$0\"" "$out"
check "the user's breakpoint is still enabled after the call" bash -c "grep -q '^1  *breakpoint  *keep y' <<<\"\$0\"" "$out"
check "detach from a stop in malloc: trace written" bash -c "grep -q '^memlyze: detached from process $HPID; trace written to $T/mt.mlyze' <<<\"\$0\"" "$out"
check "multithreaded trace valid" "$MEMLYZE" validate "$T/mt.mlyze"
exec {HIN}>&-
wait "$HPID"
check "multithreaded program output unchanged" test "$(tail -1 "$T/holder.out")" = "held 1124"
check "no Python traceback" bash -c "! grep -q Traceback '$T/mt.log'"

# 2b. memlyze-attach loads the payload from a memfd, which gdb names by
# /proc/PID/fd/N: a thread stopped inside it is still seen as inside the
# payload, and the detach calls from another (it called from that thread,
# and the detach waited for it, failing half-done).
"$T/holder" 4 < "$T/hin" > "$T/holder2.out" 2>&1 & HPID=$!
exec {HIN}>"$T/hin"
wait_lines "$T/holder2.out" 1
"$B/bin/memlyze-attach" -q -r 4096 -o "$T/mf.mlyze" "$HPID"
out=$(G -p "$HPID" -ex "source $GDBPY" -ex 'break mlz_hook_malloc' -ex continue -ex delete -ex 'memlyze detach')
check "stopped inside the memfd payload: detach calls from another thread" bash -c "
    grep -q '^memlyze: thread [0-9]* (LWP [0-9]*) is in the memlyze payload (mlz_hook_malloc' <<<\"\$0\" &&
    grep -q '^memlyze: detached from process $HPID; trace written to $T/mf.mlyze' <<<\"\$0\"" "$out"
exec {HIN}>&-
wait "$HPID"

# 3. The installed layout (as make install lays it out): attach finds the
# library and detach finds memlyze relative to the scripts, without the
# environment; once the library is loaded, gdb's auto-load hook brings the
# commands by itself.
P="$T/prefix"
mkdir -p "$P/bin" "$P/lib/memlyze" "$P/share/memlyze/gdb" "$P/share/memlyze/lldb"
cp "$MEMLYZE" "$P/bin/memlyze"
cp "$B/lib/libmemlyze.so" "$P/lib/memlyze/libmemlyze.so"
cp "$ROOT/scripts/gdb/memlyze.py" "$P/share/memlyze/gdb/"
cp "$ROOT/scripts/lldb/memlyze.py" "$P/share/memlyze/lldb/"
cp "$ROOT/scripts/gdb/libmemlyze.so-gdb.py" "$P/lib/memlyze/"
mkfifo "$T/iin"
"$T/dbg_work" < "$T/iin" > "$T/inst.out" 2>&1 & WPID=$!
exec {IN}>"$T/iin"
wait_lines "$T/inst.out" 1
out=$(env -u MEMLYZE_PAYLOAD -u MEMLYZE_BIN timeout 120 gdb -q -nx -batch -iex 'set debuginfod enabled off' -p "$WPID" \
      -ex "source $P/share/memlyze/gdb/memlyze.py" -ex "memlyze attach --rate 1 --output $T/inst.mlyze" -ex 'memlyze status' 2>&1)
check "installed: attach loads PREFIX/lib/memlyze/libmemlyze.so" bash -c "grep -q '^memlyze: attached to process $WPID' <<<\"\$0\" &&
    grep -q '^memlyze payload: $P/lib/memlyze/libmemlyze.so' <<<\"\$0\"" "$out"
echo work >&"$IN"; wait_lines "$T/inst.out" 2
out=$(env -u MEMLYZE_PAYLOAD -u MEMLYZE_BIN timeout 120 gdb -q -nx -batch -iex 'set debuginfod enabled off' \
      -iex "add-auto-load-safe-path $P" -p "$WPID" -ex 'memlyze detach' 2>&1)
check "installed: auto-load hook brings the commands; detach runs PREFIX/bin/memlyze finalize" \
    bash -c "grep -q '^memlyze: detached from process $WPID; trace written to $T/inst.mlyze' <<<\"\$0\"" "$out"
exec {IN}>&-
wait "$WPID"
check "installed: trace valid" "$MEMLYZE" validate "$T/inst.mlyze"

# 4. One tool begins, the other ends: both keep memlyze-attach's record
# (/tmp/memlyze-PID/state), so the trace goes where the attach said, and
# nothing is left behind.
mkfifo "$T/xin"
"$T/dbg_work" < "$T/xin" > "$T/x.out" 2>&1 & WPID=$!
exec {IN}>"$T/xin"
wait_lines "$T/x.out" 1
G -p "$WPID" -ex "source $GDBPY" -ex "memlyze attach --rate 1 --output $T/ga.mlyze" > /dev/null
echo work >&"$IN"; wait_lines "$T/x.out" 2
check "gdb attach, memlyze-detach: detach succeeds" "$B/bin/memlyze-detach" -q "$WPID"
"$MEMLYZE" top --json "$T/ga.mlyze" > "$T/ga.json" 2>&1
check "gdb attach, memlyze-detach: the trace is the one gdb's attach named, with the round" \
    test "$(json_site "$T/ga.json" work_keep live_bytes 2>&1)" = 10000
check "gdb attach, memlyze-detach: no spool left" test ! -e "$T/ga.mlyze.spool"
"$B/bin/memlyze-attach" -q -r 1 -o "$T/sa.mlyze" "$WPID"
echo work >&"$IN"; wait_lines "$T/x.out" 3
out=$(G -p "$WPID" -ex "source $GDBPY" -ex 'memlyze detach')
check "memlyze-attach, gdb detach: the trace goes to memlyze-attach's -o" \
    bash -c "grep -q '^memlyze: detached from process $WPID; trace written to $T/sa.mlyze' <<<\"\$0\"" "$out"
check "memlyze-attach, gdb detach: its record and directory are gone" test ! -e "/tmp/memlyze-$WPID"
exec {IN}>&-
wait "$WPID"
finish
