#!/usr/bin/env bash
# memlyze heapdump / leakcheck / retainers / top --retained on a target of
# known shape (tests/targets/graph.c), read back by an independent .arc
# decoder (tests/arc/arc_decode.py); every rule of the .arc format broken in
# hand-made files (tests/arc/make_cases.py) must be rejected at its offset.
. "$(dirname "$0")/lib.sh"
ARC="$ROOT/tests/arc"

# ---- hand-made .arc files: memlyze validate and the Python decoder agree
python3 "$ARC/make_cases.py" "$T/cases" > "$T/cases.txt" || fail "make cases"
while read -r name rule off; do
    out=$("$MEMLYZE" validate "$T/cases/$name.arc" 2>&1); rc=$?
    py=$(python3 "$ARC/arc_decode.py" "$T/cases/$name.arc" 2>&1)
    if [ "$rule" = ok ]; then
        check "validate accepts $name" test $rc -eq 0
        check "decoder accepts $name" bash -c "printf '%s' '$py' | grep -q '\"objects\"'"
    else
        check "validate rejects $name: $rule at byte $off" bash -c "[ $rc -eq 1 ] && printf '%s' \"\$1\" | grep -q 'invalid: $rule at byte $off:'" _ "$out"
        check "decoder rejects $name: $rule at byte $off" bash -c "printf '%s' \"\$1\" | grep -q '^invalid: $rule at byte $off:'" _ "$py"
    fi
done < "$T/cases.txt"

# ---- the known heap
cc -O1 -g -fno-optimize-sibling-calls -fno-omit-frame-pointer -pthread -o "$T/graph" "$ROOT/tests/targets/graph.c" || fail "build graph"
start_graph() {   # start_graph NAME [RATE]: runs it under memlyze run; sets GPID, GIN
    mkfifo "$T/in.$1"
    "$MEMLYZE" run ${2:+-r $2} -o "$T/run.$1.mlyze" -- "$T/graph" < "$T/in.$1" > "$T/out.$1" 2>"$T/err.$1" &
    RUNPID=$!
    exec {GIN}>"$T/in.$1"
    for _ in $(seq 100); do grep -q ready "$T/out.$1" 2>/dev/null && break; sleep 0.05; done
    GPID=$(awk '/ready/ {print $2}' "$T/out.$1")
}
start_graph exact 1
out=$("$MEMLYZE" heapdump -o "$T/d1.arc" "$GPID" 2>&1)
check "heapdump writes the dump and its snapshot" test -s "$T/d1.arc" -a -s "$T/d1.mlyze"
check "heapdump prints the pause" bash -c "printf '%s' '$out' | grep -q 'target paused [0-9.]* ms'"
check "dump valid (memlyze validate)" "$MEMLYZE" validate "$T/d1.arc" "$T/d1.mlyze"
# A target another tracer holds: the error names it (it blamed the kernel).
if command -v strace >/dev/null; then
    strace -p "$GPID" -o /dev/null 2>/dev/null & STP=$!
    for _ in $(seq 100); do grep -q "^TracerPid:[[:space:]]*$STP" "/proc/$GPID/status" && break; sleep 0.05; done
    out=$("$MEMLYZE" heapdump -o "$T/traced.arc" "$GPID" 2>&1)
    kill "$STP"; wait "$STP" 2>/dev/null
    check "heapdump of a traced process names its tracer" bash -c "grep -q 'already traced by $STP (strace)' <<<\"\$0\"" "$out"
else
    skip "heapdump of a traced process" "strace not installed (make deps)"
fi
# Roots: the program's two threads (main, holder), not the payload's drain thread.
check "roots: the stacks of the program's 2 threads, not the profiler's" bash -c "'$MEMLYZE' dump '$T/d1.mlyze' |
    grep -o '\"kind\":\"stack\"' | wc -l | grep -qx 2"
python3 "$ARC/arc_decode.py" "$T/d1.arc" > "$T/d1.json"
check "independent decoder reads the dump" grep -q '"objects"' "$T/d1.json"
check "snapshot names the dump and its id" bash -c "'$MEMLYZE' dump '$T/d1.mlyze' | grep -q '\"heapdump\":{\"id\":\"[0-9a-f]\{16\}\",\"arc\":\"d1.arc\"'"

"$MEMLYZE" leakcheck "$T/d1.arc" > "$T/leak1.txt" 2>&1
check "leakcheck: exactly 3 objects, 240 B in 2 sites" grep -q 'definitely leaked: 3 objects, 240 B in 2 sites' "$T/leak1.txt"
check "leakcheck: the unreachable cycle (2 x 64 B)" grep -Eq '^ +128 +2  cycle_node \(graph.c:[0-9]+\)' "$T/leak1.txt"
check "leakcheck: the XOR-hidden object (112 B)" grep -Eq '^ +112 +1  xor_obj \(graph.c:[0-9]+\)' "$T/leak1.txt"
check "leakcheck: the interior pointer keeps mid_obj" bash -c "! grep -q mid_obj '$T/leak1.txt'"
check "leakcheck: the thread's stack keeps stack_only" bash -c "! grep -q stack_only '$T/leak1.txt'"
unr=$(python3 -c "import json; d=json.load(open('$T/d1.json')); print(d['unreachable'], d['unreachable_bytes'])")
check "decoder's reachability agrees (3 objects, 240 B)" test "$unr" = "3 240"

"$MEMLYZE" retainers --site entry_new "$T/d1.arc" > "$T/ret.txt" 2>&1
check "retainers: g_cache (graph.c: from DWARF) -> cache @+16 -> entries -> entry" \
    grep -Eq '^  g_cache \(graph.c\) @\+0 -> cache_new \(graph.c:[0-9]+\) @\+16 -> entries_new \(graph.c:[0-9]+\) @\+0 -> entry_new \(graph.c:[0-9]+\)$' "$T/ret.txt"
"$MEMLYZE" retainers --site list_node -n 1 "$T/d1.arc" > "$T/ret.txt" 2>&1
check "retainers: list heads hang off g_table" grep -Eq '^  g_table \(graph.c\) @\+[0-9]+ -> list_node \(graph.c:[0-9]+\)$' "$T/ret.txt"
"$MEMLYZE" retainers --site stack_only "$T/d1.arc" > "$T/ret.txt" 2>&1
check "retainers: only a thread's stack holds stack_only" grep -Eq '^  thread [0-9]+ stack @\+[0-9]+ -> stack_only \(graph.c:[0-9]+\)$' "$T/ret.txt"
mid=$("$MEMLYZE" dump "$T/d1.mlyze" | awk '/^alloc .* size=96 /{sub("addr=","",$4); print $4}')
"$MEMLYZE" retainers --addr "$(printf '%#x' $((mid + 50)))" "$T/d1.arc" > "$T/ret.txt" 2>&1
check "retainers --addr: g_mid points 40 bytes into mid_obj" grep -Eq '^  g_mid \(graph.c\) @\+0 -> mid_obj \(graph.c:[0-9]+\) \[\+40\]$' "$T/ret.txt"
"$MEMLYZE" retainers --site xor_obj "$T/d1.arc" > "$T/ret.txt" 2>&1
check "retainers: the XOR-hidden object has no chain" grep -q '0 reachable, 1 unreachable' "$T/ret.txt"

"$MEMLYZE" top --retained -n 40 "$T/d1.arc" > "$T/top1.txt" 2>&1
check "top --retained: g_table retains the 200 list nodes (9600 B)" grep -Eq '^ +[0-9]+ +9600 .* 200  global  g_table \(graph.c\)$' "$T/top1.txt"
check "top --retained: g_cache retains 704 B in 18 objects" grep -Eq '^ +[0-9]+ +704 .* 18  global  g_cache \(graph.c\)$' "$T/top1.txt"
check "top --retained: site list_node retains 9600 B" grep -Eq '^ +[0-9]+ +9600 .* 200  site    list_node ' "$T/top1.txt"
check "top --retained: site entries_new retains 640 B" grep -Eq '^ +[0-9]+ +640 .* 17  site    entries_new ' "$T/top1.txt"

# The list grows: 10 more nodes, 480 more bytes retained by g_table.
for _ in $(seq 10); do echo grow >&$GIN; done
for _ in $(seq 100); do grep -q 'ok 210' "$T/out.exact" && break; sleep 0.05; done
"$MEMLYZE" top --retained -n 40 "$GPID" > "$T/top2.txt" 2>&1
check "top --retained PID: g_table grew to 10080 B" grep -Eq '^ +[0-9]+ +10080 .* 210  global  g_table ' "$T/top2.txt"
ntmp=$(ls -d "${TMPDIR:-/tmp}"/memlyze-heapdump.* 2>/dev/null | wc -l)
"$MEMLYZE" leakcheck "$GPID" > "$T/leak2.txt" 2>&1
check "leakcheck PID: still exactly the 3 leaked objects" grep -q 'definitely leaked: 3 objects, 240 B in 2 sites' "$T/leak2.txt"
check "leakcheck PID leaves no temporary files" test "$(ls -d "${TMPDIR:-/tmp}"/memlyze-heapdump.* 2>/dev/null | wc -l)" = "$ntmp"

# --short-pause: the heap read while the (idle) program runs: same verdict.
out=$("$MEMLYZE" heapdump --short-pause -o "$T/sp.arc" "$GPID" 2>&1)
check "heapdump --short-pause: valid dump" "$MEMLYZE" validate "$T/sp.arc"
check "heapdump --short-pause: same 3 leaked objects" bash -c "'$MEMLYZE' leakcheck '$T/sp.arc' | grep -q 'definitely leaked: 3 objects, 240 B in 2 sites'"

# Interrupted while the .arc is put in place (the target still stopped):
# neither half of the dump stays, and the target is free for the next one.
cc -O1 -g -fPIC -shared -o "$T/raise.so" "$ROOT/tests/targets/raise_at_rename.c" -ldl || fail "build raise_at_rename"
{ ( MLZ_TEST_SIGNAL=2 MLZ_TEST_MATCH=.arc. LD_PRELOAD="$T/raise.so" exec "$MEMLYZE" heapdump -q -o "$T/int.arc" "$GPID" ) 2>/dev/null; } 2>/dev/null; rc=$?
check "heapdump ended by SIGINT: no .arc, no snapshot, no .tmp left" bash -c "[ $rc -eq 130 ] && ! ls '$T' | grep -q '^int\.'"
check "after the interrupted dump, the next dump of the same target works" "$MEMLYZE" heapdump -q -o "$T/after.arc" "$GPID"

# Two dumps do not mix: a snapshot from another dump is refused.
"$MEMLYZE" heapdump -q -o "$T/d2.arc" "$GPID"
cp "$T/d2.mlyze" "$T/mix.mlyze"; cp "$T/d1.arc" "$T/mix.arc"
out=$("$MEMLYZE" leakcheck "$T/mix.arc" 2>&1); rc=$?
check "mismatched pair refused" bash -c "[ $rc -eq 1 ] && printf '%s' '$out' | grep -q 'not of the same dump'"
out=$("$MEMLYZE" heapdump -o "$T/d1.arc" "$GPID" 2>&1); rc=$?
check "heapdump never replaces a file" bash -c "[ $rc -eq 1 ] && printf '%s' '$out' | grep -q exists"
exec {GIN}>&-
wait "$RUNPID"; rc=$?
check "target ran to its end after the dumps" bash -c "[ $rc -eq 0 ] && grep -q 'ok 210' '$T/out.exact'"

# ---- sampled mode: refused, naming -r 1, nothing written
start_graph sampled
out=$("$MEMLYZE" heapdump -o "$T/s.arc" "$GPID" 2>&1); rc=$?
check "sampled mode refused with a pointer to -r 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' '$out' | wc -l) -eq 1 ] && printf '%s' '$out' | grep -q -- '-r 1'"
check "sampled refusal leaves no file" bash -c "! test -e '$T/s.arc' && ! test -e '$T/s.mlyze'"
exec {GIN}>&-
wait "$RUNPID"

# ---- attached with memlyze-attach -r 1: objects born since attaching
cc -O1 -g -fPIC -shared -o "$T/libdtls.so" "$ROOT/tests/targets/dtls_lib.c" || fail "build dtls_lib"
mkfifo "$T/in.att"
"$T/graph" "$T/libdtls.so" < "$T/in.att" > "$T/out.att" 2>&1 &
APID=$!
exec {AIN}>"$T/in.att"
for _ in $(seq 100); do grep -q ready "$T/out.att" 2>/dev/null && break; sleep 0.05; done
if timeout 60 "$B/bin/memlyze-attach" -q -r 1 -o "$T/att.mlyze" "$APID" > "$T/att.log" 2>&1; then
    for _ in $(seq 5); do echo grow >&$AIN; done
    for _ in $(seq 100); do grep -q 'ok 205' "$T/out.att" && break; sleep 0.05; done
    check "attached -r 1: heapdump" "$MEMLYZE" heapdump -q -o "$T/attdump.arc" "$APID"
    "$MEMLYZE" top --retained "$T/attdump.arc" > "$T/att.txt" 2>&1
    check "attached: g_table retains the 5 nodes born since (240 B)" grep -Eq '^ +[0-9]+ +240 .* 5  global  g_table \(graph.c\)$' "$T/att.txt"
    # A dlopen'd library's __thread variable holds an object: its TLS block,
    # which ld.so allocated past our hooks, is a root (it was reported leaked).
    echo dtls >&$AIN
    for _ in $(seq 100); do grep -q 'ok 205' "$T/out.att" && [ "$(grep -c 'ok 205' "$T/out.att")" -ge 2 ] && break; sleep 0.05; done
    "$MEMLYZE" leakcheck "$APID" > "$T/attleak.txt" 2>&1
    check "attached: what a dlopen'd library's __thread variable holds is not leaked" \
        bash -c "grep -q '^unreachable from the roots scanned: 0 objects' '$T/attleak.txt' && ! grep -q dtls_obj '$T/attleak.txt'"
    check "attached: detach" timeout 60 "$B/bin/memlyze-detach" -q "$APID"
else
    fail "memlyze-attach -r 1" "$(head -c 300 "$T/att.log")"
fi
exec {AIN}>&-
wait "$APID"

# ---- usage and errors
for c in heapdump leakcheck retainers; do
    check "$c --help" bash -c "'$MEMLYZE' $c --help | grep -q usage"
done
check "heapdump without -o: usage error" bash -c "'$MEMLYZE' heapdump 1 2>/dev/null; [ \$? -eq 2 ]"
check "heapdump -o without .arc: usage error" bash -c "'$MEMLYZE' heapdump -o x.bin 1 2>/dev/null; [ \$? -eq 2 ]"
out=$("$MEMLYZE" heapdump -o "$T/x.arc" 999999999 2>&1); rc=$?
check "no such process: one line, exit 1" bash -c "[ $rc -eq 1 ] && printf '%s' '$out' | grep -q 'no process'"
sleep 30 & SPID=$!
out=$("$MEMLYZE" leakcheck "$SPID" 2>&1); rc=$?
check "no payload: one line naming -r 1" bash -c "[ $rc -eq 1 ] && printf '%s' '$out' | grep -q 'not loaded' && printf '%s' '$out' | grep -q -- '-r 1'"
kill "$SPID"
# Attached to a running program, the memory it allocated before is neither a
# heap object nor a root: 100 blocks kept only in a table allocated before
# the attach look unreachable. leakcheck says so and does not call them
# definitely leaked (it did); from the start (memlyze run) they are kept.
. "$ROOT/tests/targets/attach_helpers.sh"
build_linecmd
talk_start "$T/linecmd"
"$B/bin/memlyze-attach" -q -r 1 -o "$T/stash.mlyze" "$pid" || fail "attach linecmd"
say stash
"$MEMLYZE" leakcheck "$pid" > "$T/leak3.txt" 2>&1
check "leakcheck, attached: a note that memory from before the attach is not scanned" \
    grep -q '^note: memlyze-attach loaded the profiler into the running program: the memory it allocated before is not known, not scanned' "$T/leak3.txt"
# (the last block may still be in a register or on the stack: 99 or 100)
check "... and the table's blocks as unreachable from the roots scanned, not definitely leaked" \
    bash -c "grep -Eq '^unreachable from the roots scanned: (99|100) objects, .* in 1 sites' '$T/leak3.txt' &&
        grep -Eq '^ +[0-9]+ +(99|100)  stash_site ' '$T/leak3.txt' && ! grep -q 'definitely leaked' '$T/leak3.txt'"
"$B/bin/memlyze-detach" -q "$pid"
talk_end
rm -rf "/tmp/memlyze-$pid"
talk_start "$MEMLYZE" run -r 1 -o "$T/stash.run.mlyze" -- "$T/linecmd"
say stash
lp=$(pgrep -P "$pid" -x linecmd)
check "leakcheck, from the start: the table keeps its blocks, no note" \
    bash -c "out=\$('$MEMLYZE' leakcheck '$lp' 2>&1); grep -q '^definitely leaked: ' <<<\"\$out\" && ! grep -q 'stash_site\|^note' <<<\"\$out\""
talk_end

out=$("$MEMLYZE" retainers "$T/d1.arc" 2>&1); rc=$?
check "retainers needs --site or --addr" test $rc -eq 2
out=$("$MEMLYZE" leakcheck "$T/cases/overlap.arc" 2>&1); rc=$?
check "leakcheck on a bad .arc: one line naming the rule" bash -c "[ $rc -eq 1 ] && printf '%s' '$out' | grep -q 'invalid: overlap at byte'"
finish
