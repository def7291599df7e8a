#!/usr/bin/env bash
# memlyze run through wrappers, in exact mode (-r 1): an exec keeps the
# profile going (the real program's sites carry their exact bytes, the
# wrapper's heap is ended by the exec), --follow-fork gives each child that
# execs its own OUT.PROG.PID.mlyze, posix_spawn children are followed only
# with --follow-fork, and an exec into a static or setuid program ends the
# trace with a marker saying why.
. "$(dirname "$0")/lib.sh"

cc -O2 -g -pthread -o "$T/known" "$ROOT/tests/targets/known.c" || fail "build known"
cc -O2 -g -o "$T/execer" "$ROOT/tests/targets/execer.c" || fail "build execer"

site_bytes() {   # site_bytes FILE.json FUNCTION -> live bytes of sites whose leaf frames name FUNCTION
    python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(int(round(sum(s["live_bytes"] for s in d["sites"]
                    if any(f.startswith(sys.argv[2] + " ") for f in s["frames"][:2])))))
PY
}
functions() { "$MEMLYZE" dump "$1" | sed -n 3p | python3 -c "
import json, sys; print('\n'.join(json.loads(sys.stdin.read()[5:])['functions'].values()))"; }
images() { "$MEMLYZE" dump "$1" | sed -n 3p | python3 -c "
import json, sys; print(len(json.loads(sys.stdin.read()[5:]).get('images', [0])))"; }
export -f functions images
export MEMLYZE
# known_exact NAME FILE: the trace holds known's sites, exactly, and nothing
# else live but libc's few blocks.
known_exact() {
    local name=$1 f=$2
    check "$name: valid trace" "$MEMLYZE" validate "$f"
    "$MEMLYZE" top --json -n 100 --frames 8 "$f" > "$f.json" 2>/dev/null
    for want in site_malloc:100000 site_calloc:50000 site_thread:200000 site_realloc:60000; do
        local fn=${want%%:*} bytes=${want#*:}
        check "$name: $fn live bytes exact ($bytes)" test "$(site_bytes "$f.json" "$fn")" = "$bytes"
    done
    check "$name: only the final image's heap is live" python3 -c "
import json, sys; d=json.load(open('$f.json'))
sys.exit(0 if 578 <= d['live_samples'] <= 600 else 1)"
}

# The rows of the issue's table, and nice.
run_row() {   # run_row NAME ARGS... (memlyze run options, --, command)
    local name=$1; shift
    (cd "$T" && "$MEMLYZE" run -r 1 -o "$T/$name.mlyze" "$@") > "$T/$name.out" 2> "$T/$name.err"
    check "$name: program output unchanged" grep -qx "known: 580 blocks held" "$T/$name.out"
}
run_row direct -- "$T/known"
known_exact direct "$T/direct.mlyze"
check "direct: one image, no exec marker" bash -c "! '$MEMLYZE' dump '$T/direct.mlyze' | sed -n 3p | grep -q 'exec: '"

run_row shexec -- sh -c "exec '$T/known'"
known_exact "sh -c exec" "$T/shexec.mlyze"
check "sh -c exec: exec MARKER names the new command line" bash -c "'$MEMLYZE' dump '$T/shexec.mlyze' | sed -n 3p | grep -q '\"exec: $T/known\"'"
check "sh -c exec: summary says the exec was followed" grep -q "1 exec followed" "$T/shexec.err"

run_row gotexec --got -- sh -c "exec '$T/known'"
known_exact "--got sh -c exec (no exec hooks in GOT mode)" "$T/gotexec.mlyze"

run_row env -- env X=1 "$T/known"
known_exact "env X=1" "$T/env.mlyze"
run_row nice -- nice -n 1 "$T/known"
known_exact nice "$T/nice.mlyze"

run_row timeout --follow-fork -- timeout 20 "$T/known"
kid=$(ls "$T" | grep -E '^timeout\.known\.[0-9]+\.mlyze$' | head -1)
check "timeout --follow-fork: child file OUT.PROG.PID.mlyze" test -n "$kid"
check "timeout --follow-fork: no doubled extension" bash -c "! ls '$T' | grep -q 'mlyze\.[0-9]*\.mlyze'"
[ -n "$kid" ] && known_exact "timeout --follow-fork child" "$T/$kid"
check "timeout --follow-fork: OUT is timeout's own trace" bash -c "'$MEMLYZE' dump '$T/timeout.mlyze' | sed -n 3p | grep -q '\"exe\":\"[^\"]*timeout\"'"
check "timeout --follow-fork: one summary line per file" test "$(grep -c '^memlyze run: wrote ' "$T/timeout.err")" = 2

# Three levels of shell scripts, each exec'ing the next.
printf 'exec sh "%s/w2.sh"\n' "$T" > "$T/w1.sh"
printf 'X=2; exec sh "%s/w3.sh"\n' "$T" > "$T/w2.sh"
printf 'exec "%s/known"\n' "$T" > "$T/w3.sh"
run_row wrap3 -- sh "$T/w1.sh"
known_exact "three-level shell wrapper" "$T/wrap3.mlyze"
check "three-level shell wrapper: 4 images, 3 execs followed" test "$(images "$T/wrap3.mlyze")" = 4
check "three-level shell wrapper: summary" grep -q "3 execs followed" "$T/wrap3.err"

# A program that execs itself with a new argument: the first image's 30
# blocks end with the exec; the final image's 40 x 900 B are exact.
(cd "$T" && "$MEMLYZE" run -r 1 -o "$T/self.mlyze" -- ./execer self) > "$T/self.out" 2> "$T/self.err"
check "self exec: final image ran" grep -q "execer: final image" "$T/self.out"
check "self exec: valid trace" "$MEMLYZE" validate "$T/self.mlyze"
"$MEMLYZE" top --json -n 100 --frames 8 "$T/self.mlyze" > "$T/self.json"
check "self exec: site_final live bytes exact (36000)" test "$(site_bytes "$T/self.json" site_final)" = 36000
check "self exec: the old image's site_before is not live" test "$(site_bytes "$T/self.json" site_before)" = 0
check "self exec: MARKER with the new argument" bash -c "functions '$T/self.mlyze' | grep -qx 'exec: ./execer final'"
check "self exec: each image's stacks symbolized against its own modules" bash -c "
    f=\$(functions '$T/self.mlyze'); grep -qx site_before <<<\"\$f\" && grep -qx site_final <<<\"\$f\""
check "self exec: stack ids of the two images do not overlap" python3 -c "
import json, subprocess, sys
lines = subprocess.run(['$MEMLYZE', 'dump', '$T/self.mlyze'], capture_output=True, text=True).stdout.splitlines()
meta = json.loads(lines[2][5:]); funcs = meta['functions']
def names(i): return {funcs[str(fr['func_id'])] for fr in meta['stack_traces'][i]}
ids = [i for i in meta['stack_traces'] if 'site_before' in names(i) or 'site_final' in names(i)]
sys.exit(0 if len(ids) >= 2 and not any('site_before' in names(i) and 'site_final' in names(i) for i in ids) else 1)"
check "self exec: both images' allocations are in the history (70 + libc)" python3 -c "
import json, sys; d=json.load(open('$T/self.json')); sys.exit(0 if d['samples'] >= 70 else 1)"

# An exec that fails (ENOENT) leaves the image running: no marker, the
# profile goes on, and the later exec is followed.
(cd "$T" && "$MEMLYZE" run -r 1 -o "$T/fail.mlyze" -- ./execer fail "$T/known") > "$T/fail.out" 2> "$T/fail.err"
known_exact "failed exec, then exec" "$T/fail.mlyze"
check "failed exec: no 'not profiled' marker" bash -c "! functions '$T/fail.mlyze' | grep -q 'not profiled'"
check "failed exec: 2 images" test "$(images "$T/fail.mlyze")" = 2

# A shell whose exec fails exits 127: its status is kept, its trace written.
(cd "$T" && "$MEMLYZE" run -o "$T/x127.mlyze" -- sh -c 'exec /nonexistent/program') > /dev/null 2>&1
check "exec fails, sh exits 127: status kept" test $? -eq 127
check "exec fails, sh exits 127: trace written and valid" "$MEMLYZE" validate "$T/x127.mlyze"

# posix_spawn (vfork + exec): followed with --follow-fork, not without.
(cd "$T" && "$MEMLYZE" run -r 1 --follow-fork -o "$T/spawn.mlyze" -- ./execer spawn "$T/known") > "$T/spawn.out" 2> "$T/spawn.err"
kid=$(ls "$T" | grep -E '^spawn\.known\.[0-9]+\.mlyze$' | head -1)
check "posix_spawn --follow-fork: child traced into OUT.known.PID.mlyze" test -n "$kid"
[ -n "$kid" ] && known_exact "posix_spawn --follow-fork child" "$T/$kid"
check "posix_spawn --follow-fork: parent's trace is execer's" test "$(site_bytes <("$MEMLYZE" top --json -n 50 --frames 4 "$T/spawn.mlyze") site_before)" = 21000
(cd "$T" && "$MEMLYZE" run -r 1 -o "$T/nospawn.mlyze" -- ./execer spawn "$T/known") > "$T/nospawn.out" 2> "$T/nospawn.err"
check "posix_spawn without --follow-fork: child ran" grep -q "known: 580 blocks held" "$T/nospawn.out"
check "posix_spawn without --follow-fork: no child file" bash -c "! ls '$T' | grep -q '^nospawn\..*\.[0-9]*\.mlyze$'"
check "posix_spawn without --follow-fork: one file written" test "$(grep -c '^memlyze run: wrote ' "$T/nospawn.err")" = 1
check "posix_spawn without --follow-fork: the parent's trace has no known sites" \
    test "$(site_bytes <("$MEMLYZE" top --json -n 50 --frames 4 "$T/nospawn.mlyze") site_malloc)" = 0

# g++ forks and execs cc1plus (and as): each followed child has a trace.
# Sampled: symbolizing every one of cc1plus's stacks (exact mode) against
# its stripped symbol table takes minutes.
if command -v g++ >/dev/null; then
    printf '#include <vector>\n#include <string>\nstd::vector<std::string> v{"a","b"};\nint f(){return (int)v.size();}\n' > "$T/big.cpp"
    (cd "$T" && "$MEMLYZE" run -r 16k --follow-fork -o "$T/gxx.mlyze" -- g++ -c big.cpp -o big.o) > /dev/null 2> "$T/gxx.err"
    cc1=$(ls "$T" | grep -E '^gxx\.cc1plus\.[0-9]+\.mlyze$' | head -1)
    check "g++ --follow-fork: cc1plus has its own trace" test -n "$cc1"
    [ -n "$cc1" ] && check "g++ --follow-fork: cc1plus trace valid" "$MEMLYZE" validate "$T/$cc1"
    [ -n "$cc1" ] && check "g++ --follow-fork: cc1plus's allocations recorded" python3 -c "
import json, subprocess, sys
d = json.loads(subprocess.run(['$MEMLYZE', 'top', '--json', '$T/$cc1'], capture_output=True, text=True).stdout)
sys.exit(0 if d['samples'] > 100 else 1)"
else
    echo "SKIP: g++ --follow-fork (no g++)"
fi

# exec of a static binary: the trace ends with a marker saying why, and the
# old image's heap is ended by it.
if printf '#include <stdio.h>\nint main(void){puts("static ran");return 0;}\n' | cc -static -O2 -x c -o "$T/static_hello" - 2>/dev/null; then
    (cd "$T" && "$MEMLYZE" run -r 1 -o "$T/static.mlyze" -- ./execer exec ./static_hello) > "$T/static.out" 2> "$T/static.err"
    check "static exec: the static program ran" grep -q "static ran" "$T/static.out"
    check "static exec: valid trace" "$MEMLYZE" validate "$T/static.mlyze"
    check "static exec: marker says why" bash -c "functions '$T/static.mlyze' | grep -q '^exec not profiled (static binary'"
    check "static exec: nothing left live" test "$(site_bytes <("$MEMLYZE" top --json "$T/static.mlyze") site_before)" = 0
    check "static exec: summary says so" grep -q "exec'd an image it cannot profile" "$T/static.err"
    check "static exec: no 'died' warning" bash -c "! grep -q 'before its profile was sealed' '$T/static.err'"
else
    echo "SKIP: static exec (no static libc)"
fi

# A wrapper that drops LD_PRELOAD: said so at the end of the trace.
(cd "$T" && "$MEMLYZE" run -r 1 -o "$T/unset.mlyze" -- env -u LD_PRELOAD "$T/known") > "$T/unset.out" 2> "$T/unset.err"
check "env -u LD_PRELOAD: the program ran" grep -q "known: 580 blocks held" "$T/unset.out"
check "env -u LD_PRELOAD: valid trace" "$MEMLYZE" validate "$T/unset.mlyze"
check "env -u LD_PRELOAD: marker says why" bash -c "functions '$T/unset.mlyze' | grep -q '^exec not profiled (LD_PRELOAD removed from its environment)'"

# exec of a setuid program by a non-root user: the loader ignores
# LD_PRELOAD (secure mode); the trace says so.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    chmod 755 "$T"
    mkdir -p "$T/nobody" && chmod 777 "$T/nobody"
    cp "$T/known" "$T/suid_known" && chown root "$T/suid_known" && chmod 4755 "$T/suid_known"
    (cd "$T/nobody" && setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$MEMLYZE" run -r 1 -o "$T/nobody/suid.mlyze" -- "$T/execer" exec "$T/suid_known") > "$T/suid.out" 2> "$T/suid.err"
    check "setuid exec: the setuid program ran" grep -q "known: 580 blocks held" "$T/suid.out"
    check "setuid exec: valid trace" "$MEMLYZE" validate "$T/nobody/suid.mlyze"
    check "setuid exec: marker says why" bash -c "functions '$T/nobody/suid.mlyze' | grep -q '^exec not profiled (setuid program)'"
    # As root the same exec is not secure: it is followed.
    (cd "$T" && "$MEMLYZE" run -r 1 -o "$T/suidroot.mlyze" -- ./execer exec "$T/suid_known") > /dev/null 2>&1
    known_exact "setuid exec as root (no secure mode)" "$T/suidroot.mlyze"
else
    echo "SKIP: setuid exec (needs root and setpriv to run as nobody)"
fi

# Plain LD_PRELOAD (no memlyze run), the same MEMLYZE_SPOOL twice: the
# second process replaces the first one's spool; it is not taken for an
# exec of it. Through a wrapper, the exec'd image writes SPOOL.exec1.
for i in 1 2; do
    LD_PRELOAD="$B/lib/libmemlyze-preload.so" MEMLYZE_SPOOL="$T/plain.spool" MEMLYZE_RATE=1 "$T/known" > /dev/null
done
check "plain preload twice: one spool, no .exec1" bash -c "[ -f '$T/plain.spool' ] && ! ls '$T' | grep -q 'plain.spool.exec'"
LD_PRELOAD="$B/lib/libmemlyze-preload.so" MEMLYZE_SPOOL="$T/plainw.spool" MEMLYZE_RATE=1 sh -c "exec '$T/known'" > /dev/null
check "plain preload through sh -c exec: SPOOL and SPOOL.exec1" test -f "$T/plainw.spool" -a -f "$T/plainw.spool.exec1"
check "plain preload: memlyze finalize stitches the two" "$MEMLYZE" finalize -o "$T/plainw.mlyze" "$T/plainw.spool" "$T/plainw.spool.exec1"
known_exact "plain preload, finalized from two spools" "$T/plainw.mlyze"
check "finalize: spools of two processes are refused, in one line" bash -c "
    out=\$('$MEMLYZE' finalize -o '$T/mixed.mlyze' '$T/plain.spool' '$T/plainw.spool.exec1' 2>&1); rc=\$?
    [ \$rc -ne 0 ] && grep -q 'not an image of' <<<\"\$out\" && [ \$(wc -l <<<\"\$out\") -eq 1 ] && [ ! -e '$T/mixed.mlyze' ]"

# Sampled mode through a wrapper, LZ4-compressed: still one valid trace.
(cd "$T" && "$MEMLYZE" run -z -o "$T/sampled.mlyze" -- sh -c "exec '$T/known'") > /dev/null 2>&1
check "sampled -z sh -c exec: valid trace" "$MEMLYZE" validate "$T/sampled.mlyze"
check "sampled -z sh -c exec: compressed, with its index" test -f "$T/sampled.mlyze.idx"
finish
