#!/usr/bin/env bash
# lldb script (scripts/lldb/memlyze.py): `memlyze snapshot` on a live
# process equals `memlyze snapshot PID` at the same stop; on a core file (from
# gcore) of a process started with `memlyze run` it equals the live process's
# snapshot and names the known sites; status, top, help, one-line errors;
# attach/detach through lldb's expression evaluation, output unchanged.
# Skipped, saying so, where lldb (with its Python) is not installed.
. "$(dirname "$0")/lib.sh"
export PYTHONDONTWRITEBYTECODE=1      # no __pycache__ next to the scripts
LLDBPY="$ROOT/scripts/lldb/memlyze.py"
CANON="$ROOT/tests/e2e/dbg_canon.py"
LIB="$B/lib/libmemlyze.so"
find_lldb() {   # sets LLDB and LLDB_PY (the PYTHONPATH it needs), or returns 1
    LLDB=""; LLDB_PY=${PYTHONPATH:-}
    for c in lldb lldb-19 lldb-18 lldb-17 lldb-16 lldb-15 lldb-14; do
        command -v "$c" >/dev/null && { LLDB=$(command -v "$c"); break; }
    done
    [ -n "$LLDB" ] || return 1
    PYTHONPATH=$LLDB_PY "$LLDB" --batch -o 'script print(6*7)' 2>&1 | grep -qx 42 && return 0
    # Debian's lldb-14 does not find its own Python package
    # (lldb.embedded_interpreter) unless told where it is.
    local d
    for d in "$(dirname "$(readlink -f "$LLDB")")"/../lib/python3*/dist-packages; do
        [ -f "$d/lldb/embedded_interpreter.py" ] && LLDB_PY="$(cd "$d" && pwd)${LLDB_PY:+:$LLDB_PY}"
    done
    PYTHONPATH=$LLDB_PY "$LLDB" --batch -o 'script print(6*7)' 2>&1 | grep -qx 42
}
if ! find_lldb; then
    skip "lldb commands" "lldb with its Python not installed; Debian: lldb python3-lldb-14"
    finish
fi
# L LLDB-ARGS... -- COMMANDS...: the script imported, then COMMANDS, all of
# them even after an error (lldb's batch mode stops at the first otherwise).
NCMD=0
L() {
    local a=() f="$T/lldb.cmds.$((++NCMD))"
    while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done
    shift
    printf '%s\n' "command script import $LLDBPY" "$@" > "$f"
    PYTHONPATH=$LLDB_PY timeout 120 "$LLDB" --no-lldbinit --batch "${a[@]}" -o "command source -e false $f" 2>&1
}
one_error() { [ "$(grep -c '^error: memlyze: ' <<<"$1")" -eq 1 ] && grep -q "^error: memlyze: .*$2" <<<"$1" && ! grep -q Traceback <<<"$1"; }
site() {
    python3 -c "
import json, sys; d=json.load(open('$1'))
print(int(round(sum(s['live_bytes'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('$2 ')))))"
}

# 1. A live process, 8 threads churning until lldb stops them.
cc -O2 -g -pthread -o "$T/holder" "$ROOT/tests/targets/holder.c" || fail "build holder"
mkfifo "$T/in"
MEMLYZE_MODE=got MEMLYZE_RATE=1 MEMLYZE_SPOOL="$T/spool" LD_PRELOAD="$LIB" "$T/holder" 8 < "$T/in" > "$T/out" 2>&1 & HPID=$!
exec {IN}>"$T/in"
for _ in $(seq 100); do grep -q ready "$T/out" 2>/dev/null && break; sleep 0.05; done
out=$(L -p "$HPID" -- 'memlyze status' "memlyze snapshot $T/lldb.mlyze" \
      "platform shell '$MEMLYZE' snapshot -q -o '$T/cli.mlyze' $HPID" 'memlyze top 3' 'help memlyze' \
      'memlyze frob' "memlyze snapshot $T/lldb.mlyze" 'process detach')
printf '%s\n' "$out" > "$T/lldb.live.log"
check "lldb snapshot valid" "$MEMLYZE" validate "$T/lldb.mlyze"
check "lldb snapshot is of kind snapshot, rate 1" bash -c "python3 '$CANON' '$T/lldb.mlyze' --meta | grep -q 'kind=snapshot rate=1 pid=$HPID'"
python3 "$CANON" "$T/lldb.mlyze" --funcs '^(site_|churn$|main$)' > "$T/lldb.canon"
python3 "$CANON" "$T/cli.mlyze" --funcs '^(site_|churn$|main$)' > "$T/cli.canon"
check "same stop: lldb and memlyze snapshot PID have the same samples and stacks" \
    bash -c "[ \$(wc -l < '$T/lldb.canon') -ge 1124 ] && diff '$T/lldb.canon' '$T/cli.canon'"
"$MEMLYZE" top --json -n 50 "$T/lldb.mlyze" > "$T/lldb.json"
check "lldb snapshot: site_1m exact (4194304 B)" test "$(site "$T/lldb.json" site_1m)" = 4194304
check "lldb snapshot: site_16 exact (16000 B)" test "$(site "$T/lldb.json" site_16)" = 16000
check "status in lldb: attached, counters, tables" bash -c "grep -q '^state: attached (GOT mode)' <<<\"\$0\" &&
    grep -q '^counters: samples [1-9]' <<<\"\$0\" && grep -q '^heap map: ' <<<\"\$0\" && grep -q '^stack table: [1-9]' <<<\"\$0\"" "$out"
check "top in lldb: site_1m first" bash -c "grep -A1 '^rank' <<<\"\$0\" | grep -q '^   1  4.00 MiB .*site_1m (holder.c:'" "$out"
check "help memlyze in lldb lists every subcommand" bash -c "for c in status snapshot top attach detach; do
    grep -q \"^memlyze \$c\" <<<\"\$0\" || exit 1; done" "$out"
check "unknown subcommand: one line" bash -c "grep -q \"^error: memlyze: unknown command 'frob'\" <<<\"\$0\"" "$out"
check "existing file not replaced: one line" bash -c "grep -q '^error: memlyze: $T/lldb.mlyze exists: not replaced' <<<\"\$0\"" "$out"
exec {IN}>&-
wait "$HPID"
check "target output unchanged under lldb" test "$(tail -1 "$T/out")" = "held 1124"

# 2. A core file (gcore) of a process started with memlyze run.
if command -v gcore >/dev/null; then
    cc -O2 -g -o "$T/dbg_crash" "$ROOT/tests/targets/dbg_crash.c" || fail "build dbg_crash"
    mkfifo "$T/cin"
    MEMLYZE_MAP_LOG2=12 "$MEMLYZE" run -r 1 -o "$T/run.mlyze" -- "$T/dbg_crash" wait < "$T/cin" > "$T/cout" 2>&1 & RPID=$!
    exec {CIN}>"$T/cin"
    for _ in $(seq 100); do grep -q ready "$T/cout" 2>/dev/null && break; sleep 0.05; done
    CPID=$(pgrep -P "$RPID" dbg_crash | head -1)
    "$MEMLYZE" snapshot -q -o "$T/live.mlyze" "$CPID"
    gcore -o "$T/gc" "$CPID" > /dev/null 2>&1
    exec {CIN}>&-
    wait "$RPID"
    out=$(L -c "$T/gc.$CPID" "$T/dbg_crash" -- 'memlyze status' "memlyze snapshot $T/core.mlyze" 'memlyze top 3' \
          'memlyze attach')
    printf '%s\n' "$out" > "$T/lldb.core.log"
    check "core: lldb snapshot valid" "$MEMLYZE" validate "$T/core.mlyze"
    python3 "$CANON" "$T/core.mlyze" --funcs '^(crash_|inl_alloc$|main$)' > "$T/core.canon"
    python3 "$CANON" "$T/live.mlyze" --funcs '^(crash_|inl_alloc$|main$)' > "$T/live.canon"
    check "core: same samples and stacks as memlyze snapshot PID of the live process" \
        bash -c "[ \$(wc -l < '$T/core.canon') -ge 235 ] && diff '$T/core.canon' '$T/live.canon'"
    "$MEMLYZE" top --json -n 50 "$T/core.mlyze" > "$T/core.json"
    check "core: crash_big exact (1000000 B)" test "$(site "$T/core.json" crash_big)" = 1000000
    check "core: crash_small exact (20000 B)" test "$(site "$T/core.json" crash_small)" = 20000
    check "core: counters named (strings read from the module file)" bash -c "grep -q '^counters: samples 2[0-9][0-9], ' <<<\"\$0\"" "$out"
    check "core: attach refused, one line" one_error "$(grep '^error: ' <<<"$out")" "a core file cannot be profiled"
    rm -f "$T/gc.$CPID"
else
    skip "lldb core file" "gcore (gdb) not installed"
fi

# 3. attach / detach round trip, each in its own lldb session.
export MEMLYZE_PAYLOAD="$LIB" MEMLYZE_BIN="$MEMLYZE"
cc -O2 -g -o "$T/dbg_work" "$ROOT/tests/targets/dbg_work.c" || fail "build dbg_work"
printf 'work\nwork\nwork\nwork\n' | "$T/dbg_work" > "$T/plain.out"
wait_lines() { for _ in $(seq 100); do [ "$(wc -l < "$1" 2>/dev/null || echo 0)" -ge "$2" ] && return; sleep 0.05; done; }
mkfifo "$T/win"
"$T/dbg_work" < "$T/win" > "$T/prof.out" 2>&1 & WPID=$!
exec {WIN}>"$T/win"
echo work >&"$WIN"; wait_lines "$T/prof.out" 2
out=$(L -p "$WPID" -- "memlyze attach --rate 1 --output $T/att.mlyze" 'memlyze status' 'process detach')
check "lldb attach: started" bash -c "grep -q '^memlyze: attached to process $WPID, rate 1 B (exact)' <<<\"\$0\" &&
    grep -q '^state: attached (GOT mode)' <<<\"\$0\"" "$out"
echo work >&"$WIN"; echo work >&"$WIN"; wait_lines "$T/prof.out" 4
out=$(L -p "$WPID" -- 'memlyze detach' 'process detach')
check "lldb detach: trace written" bash -c "grep -q '^memlyze: detached from process $WPID; trace written to $T/att.mlyze' <<<\"\$0\"" "$out"
echo work >&"$WIN"
exec {WIN}>&-
wait "$WPID"
check "lldb attach/detach: program output unchanged" cmp "$T/plain.out" "$T/prof.out"
check "lldb attach/detach: trace valid" "$MEMLYZE" validate "$T/att.mlyze"
"$MEMLYZE" top --json -n 20 "$T/att.mlyze" > "$T/att.json"
check "lldb attach/detach: work_keep live exactly 2 rounds (20000 B)" test "$(site "$T/att.json" work_keep)" = 20000

# 4. No payload: one line.
sleep 60 & SPID=$!
out=$(L -p "$SPID" -- 'memlyze snapshot x.mlyze' 'process detach')
check "no payload: one line" one_error "$out" "no memlyze payload in this process"
kill "$SPID"; wait "$SPID" 2>/dev/null
finish
