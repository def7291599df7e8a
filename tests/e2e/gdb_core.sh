#!/usr/bin/env bash
# gdb script on core files of a process started with `memlyze run`: one
# made by gcore while the program waits (its snapshot equals the one
# `memlyze snapshot PID` took of the live process just before), and one from
# a crash (SIGABRT): both give valid snapshots whose `memlyze top` names the
# known sites exactly. Cores without the payload, or with the payload but
# without its tables, get one-line errors; attach refuses a core.
. "$(dirname "$0")/lib.sh"
export PYTHONDONTWRITEBYTECODE=1      # no __pycache__ next to the scripts
GDBPY="$ROOT/scripts/gdb/memlyze.py"
CANON="$ROOT/tests/e2e/dbg_canon.py"
if ! command -v gdb >/dev/null || ! command -v gcore >/dev/null || ! gdb -nx -batch -ex 'python print(1)' >/dev/null 2>&1; then
    skip "gdb core files" "gdb with Python and gcore not installed; make deps"
    finish
fi
one_error() { [ "$(grep -c '^memlyze: ' <<<"$1")" -eq 1 ] && grep -q "^memlyze: .*$2" <<<"$1" && ! grep -q Traceback <<<"$1"; }
site() {
    python3 -c "
import json, sys; d=json.load(open('$1'))
print(int(round(sum(s['live_bytes'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('$2 ')))))"
}
known_sites() {   # known_sites LABEL FILE: the three sites of dbg_crash, exact
    "$MEMLYZE" top --json -n 50 "$2" > "$2.json"
    check "$1: crash_big exact (1000000 B)" test "$(site "$2.json" crash_big)" = 1000000
    check "$1: crash_small exact (20000 B)" test "$(site "$2.json" crash_small)" = 20000
    check "$1: inlined inl_alloc in crash_inline exact (90000 B)" bash -c "
        [ \"\$(python3 -c \"
import json; d=json.load(open('$2.json'))
print(int(sum(s['live_bytes'] for s in d['sites'] if s['frames'][0].startswith('inl_alloc (dbg_crash.c:') and
      s['frames'][0].endswith('[inlined]') and s['frames'][1].startswith('crash_inline (dbg_crash.c:'))))\")\" = 90000 ]"
}
cc -O2 -g -o "$T/dbg_crash" "$ROOT/tests/targets/dbg_crash.c" || fail "build dbg_crash"
# A small heap map keeps the cores small (the map is sized for exact mode).
export MEMLYZE_MAP_LOG2=12

# 1. gcore of a waiting program, started with memlyze run (LD_PRELOAD).
mkfifo "$T/in"
"$MEMLYZE" run -r 1 -o "$T/run.mlyze" -- "$T/dbg_crash" wait < "$T/in" > "$T/out" 2>&1 & RPID=$!
exec {IN}>"$T/in"
for _ in $(seq 100); do grep -q ready "$T/out" 2>/dev/null && break; sleep 0.05; done
CPID=$(pgrep -P "$RPID" dbg_crash | head -1)
"$MEMLYZE" snapshot -q -o "$T/live.mlyze" "$CPID"
gcore -o "$T/gc" "$CPID" > "$T/gcore.log" 2>&1
check "gcore wrote a core" test -s "$T/gc.$CPID"
exec {IN}>&-
wait "$RPID"
out=$(G "$T/dbg_crash" "$T/gc.$CPID" -ex "source $GDBPY" -ex 'memlyze status' -ex "memlyze snapshot $T/gcore.mlyze" \
      -ex 'memlyze top 3' -ex 'memlyze attach')
printf '%s\n' "$out" > "$T/gcore.gdb.log"
check "gcore: snapshot valid" "$MEMLYZE" validate "$T/gcore.mlyze"
check "gcore: kind snapshot, the process's pid" bash -c "python3 '$CANON' '$T/gcore.mlyze' --meta | grep -q 'kind=snapshot rate=1 pid=$CPID'"
python3 "$CANON" "$T/gcore.mlyze" --funcs '^(crash_|inl_alloc$|main$)' > "$T/gcore.canon"
python3 "$CANON" "$T/live.mlyze" --funcs '^(crash_|inl_alloc$|main$)' > "$T/live.canon"
check "gcore: same samples and stacks as memlyze snapshot PID of the live process" \
    bash -c "[ \$(wc -l < '$T/gcore.canon') -ge 235 ] && diff '$T/gcore.canon' '$T/live.canon'"
known_sites "gcore" "$T/gcore.mlyze"
check "gcore: status names the preloaded payload" bash -c "grep -q '^memlyze payload: .*libmemlyze-preload.so' <<<\"\$0\" &&
    grep -q '^state: sampling (preloaded)' <<<\"\$0\"" "$out"
check "gcore: top in gdb names crash_big first" bash -c "grep -A1 '^rank' <<<\"\$0\" | grep -q 'crash_big (dbg_crash.c:'" "$out"
check "gcore: attach refuses a core file, one line" one_error "$(grep -v '^memlyze payload' <<<"$out" | grep '^memlyze: ')" \
    "a core file cannot be profiled"
rm -f "$T/gc.$CPID"

# 2. A crash (SIGABRT) under memlyze run. The kernel writes the core where
# core_pattern says; if it pipes cores to a handler (systemd-coredump,
# apport) or the core is nowhere to be found, the crash is run under gdb,
# which writes the core at the SIGABRT instead.
pattern=$(cat /proc/sys/kernel/core_pattern 2>/dev/null || echo '|')
core=""
if [ "${pattern:0:1}" != "|" ] && (ulimit -c unlimited) 2>/dev/null; then
    mkdir -p "$T/crash"
    (cd "$T/crash" && ulimit -c unlimited && exec "$MEMLYZE" run -r 1 -o "$T/crash.mlyze" -- "$T/dbg_crash" abort) \
        > "$T/crash.out" 2>&1
    # Every %-specifier becomes a wildcard; a relative pattern is in the crash's cwd.
    glob=$(sed -e 's/%%/%/g' -e 's/%[a-zA-Z]/*/g' <<<"$pattern")
    case "$glob" in /*) ;; *) glob="$T/crash/$glob" ;; esac
    core=$(ls -t $glob* 2>/dev/null | head -1)
    [ -n "$core" ] && [ "$(find "$core" -newer "$T/dbg_crash" 2>/dev/null)" ] || core=""
    [ -n "$core" ] && echo "info: kernel core $core (core_pattern '$pattern')"
fi
if [ -z "$core" ]; then
    echo "info: no kernel core (core_pattern '$pattern'): gdb writes the core at the SIGABRT"
    core="$T/crash.core"
    G -ex 'set follow-fork-mode child' -ex 'set detach-on-fork on' -ex run -ex "generate-core-file $core" -ex kill \
      --args "$MEMLYZE" run -r 1 -o "$T/crash.mlyze" -- "$T/dbg_crash" abort > "$T/crash.gdb.log"
fi
check "crash: a core was written" test -s "$core"
out=$(G "$T/dbg_crash" "$core" -ex "source $GDBPY" -ex "memlyze snapshot $T/crash-snap.mlyze" -ex 'memlyze top 3')
check "crash: snapshot valid" "$MEMLYZE" validate "$T/crash-snap.mlyze"
known_sites "crash" "$T/crash-snap.mlyze"
check "crash: no Python traceback" bash -c "! grep -q Traceback <<<\"\$0\"" "$out"
case "$core" in "$T"/*) rm -f "$core" ;; esac

# 3. Cores without the tables: the payload loaded but never started, and no payload at all.
for kind in loaded none; do
    mkfifo "$T/in.$kind"
    if [ $kind = loaded ]; then LD_PRELOAD="$B/lib/libmemlyze.so" "$T/dbg_crash" wait < "$T/in.$kind" > "$T/out.$kind" 2>&1 &
    else "$T/dbg_crash" wait < "$T/in.$kind" > "$T/out.$kind" 2>&1 &
    fi
    P=$!
    exec {IN}>"$T/in.$kind"
    for _ in $(seq 100); do grep -q ready "$T/out.$kind" 2>/dev/null && break; sleep 0.05; done
    gcore -o "$T/gc.$kind" "$P" > /dev/null 2>&1
    exec {IN}>&-
    wait "$P"
    out=$(G "$T/dbg_crash" "$T/gc.$kind.$P" -ex "source $GDBPY" -ex "memlyze snapshot $T/$kind.mlyze")
    if [ $kind = loaded ]; then
        check "core of a process whose payload never started: one-line error" one_error "$out" "core file without the payload's tables"
    else
        check "core without the payload: one-line error" one_error "$out" "no memlyze payload in this core file"
    fi
    check "core $kind: no file written" test ! -e "$T/$kind.mlyze"
    rm -f "$T/gc.$kind.$P"
done
finish
