#!/bin/bash
# interrupted_outputs.sh - a tool ended by a signal while it writes leaves
# no temporary file behind (format/tmp_guard.c), and a file past the size
# limit is a one-line error, not a core dump. A preload raises the signal
# at the instant the finished *.tmp would be put into place.
. "$(dirname "$0")/lib.sh"

cc -O1 -g -fPIC -shared -o "$T/raise.so" "$ROOT/tests/targets/raise_at_rename.c" -ldl || fail "build raise_at_rename"
"$B/bench/bench_reports_gen" "$T/in.mlyze" 20000 >/dev/null || fail "make a trace"
cd "$T" || exit 1

# leftovers NAME: the files beside NAME (the output, its index, any .tmp)
leftovers() { ls -1 "$T" | grep -F "$1" | tr '\n' ' '; }

# interrupted NAME SIG STATUS CMD...: CMD dies by SIG (exit STATUS) and
# leaves nothing named like its output.
interrupted() {
    local name=$1 sig=$2 want=$3; shift 3
    # The shell reports the signal death on its own stderr: not wanted here.
    { ( MLZ_TEST_SIGNAL=$sig LD_PRELOAD="$T/raise.so" exec "$@" ) >/dev/null 2>"$T/err"; } 2>/dev/null
    local rc=$? left
    left=$(leftovers out.)
    if [ "$rc" -eq "$want" ] && [ -z "$left" ]; then pass "$name"
    else fail "$name" "exit $rc (want $want), left: [$left] $(head -c 200 "$T/err")"; fi
    rm -f "$T"/out.*
}

interrupted "convert split, SIGINT at the rename: no OUT, no .tmp, no index" 2 130 \
    "$MEMLYZE" convert --format split -o out.mlyze in.mlyze
interrupted "convert v1, SIGTERM at the rename: nothing left" 15 143 \
    "$MEMLYZE" convert --format v1 -o out.mlyze in.mlyze
interrupted "export (a report), SIGTERM at the rename: nothing left" 15 143 \
    "$MEMLYZE" export --format pprof -o out.pb in.mlyze
interrupted "timeline -o, SIGHUP at the rename: nothing left" 1 129 \
    "$MEMLYZE" timeline -o out.txt in.mlyze

# memlyze run, the program over, ended by SIGTERM while it writes the
# trace (it was deaf to signals then: symbolizing can take minutes): no
# trace and no .tmp, the recording kept where the last line says, and
# memlyze finalize turns it into the trace.
printf '#include <stdlib.h>\nint main(void) { for (int i = 0; i < 1000; i++) free(malloc(100)); return 0; }\n' >"$T/prog.c"
cc -o "$T/prog" "$T/prog.c" || fail "build prog"
{ ( MLZ_TEST_SIGNAL=15 MLZ_TEST_MATCH=out.mlyze LD_PRELOAD="$T/raise.so" exec "$MEMLYZE" run -r 1 -o out.mlyze -- "$T/prog" ) >/dev/null 2>"$T/err"; } 2>/dev/null
rc=$?
left=$(leftovers out.)
kept=$(sed -n 's/.*the recording is kept in \([^ ]*\) .*/\1/p' "$T/err")
if [ "$rc" -eq 143 ] && [ -z "$left" ] && [ -n "$kept" ] && ls "$kept"/spool* >/dev/null 2>&1; then
    pass "memlyze run, SIGTERM while writing the trace: it ends, nothing half-written, the recording kept"
else fail "memlyze run, SIGTERM while writing the trace" "exit $rc, left: [$left] $(head -c 300 "$T/err")"; fi
check "the kept recording finalizes into the trace" "$MEMLYZE" finalize -o "$T/kept.mlyze" "$kept"/spool
check "  with the program's 1000 allocations" bash -c "'$MEMLYZE' stats '$T/kept.mlyze' | grep -Eq '^ +alloc +100[0-9] '"
[ -n "$kept" ] && rm -rf "$kept"
rm -f "$T"/out.*

# An ignored SIGINT (nohup, a background job) stays ignored: the tool
# finishes and the file is there.
( trap '' INT; MLZ_TEST_SIGNAL=2 LD_PRELOAD="$T/raise.so" "$MEMLYZE" convert --format v1 -o out.mlyze in.mlyze ) >/dev/null 2>&1
rc=$?
if [ "$rc" -eq 0 ] && "$MEMLYZE" validate out.mlyze >/dev/null 2>&1; then pass "an ignored SIGINT stays ignored: the output is written"
else fail "an ignored SIGINT stays ignored" "exit $rc, left: $(leftovers out.)"; fi
rm -f "$T"/out.*

# Past RLIMIT_FSIZE: EFBIG named in one line, exit 1, nothing left.
( ulimit -f 64; "$MEMLYZE" convert --format v1 -o out.mlyze in.mlyze ) >/dev/null 2>"$T/err"
rc=$?
left=$(leftovers out.)
if [ "$rc" -eq 1 ] && [ -z "$left" ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "too large" "$T/err"; then
    pass "a file past the size limit: one-line 'too large' error, exit 1, nothing left"
else fail "a file past the size limit" "exit $rc, left: [$left] $(head -c 300 "$T/err")"; fi
rm -f "$T"/out.*
finish
