#!/usr/bin/env bash
# The reader under valgrind (memcheck): every command a user runs on a file,
# on good, damaged and cut files, and a snapshot of a live process, with no
# memory error and no leak (definite or indirect). Each command must also
# exit as it does outside valgrind: 0 on good input, 1 on bad input.
. "$(dirname "$0")/lib.sh"
if ! command -v valgrind >/dev/null; then skip "reader under valgrind" "valgrind not installed (make deps)"; finish; fi
cc -O2 -g -pthread -o "$T/churn" "$ROOT/bench/workloads/churn.c" || fail "build churn"
cc -O2 -g -pthread -o "$T/holder" "$ROOT/tests/targets/holder.c" || fail "build holder"
cd "$T" || exit 1

# Traces to read: sampled (split, the default), the same in v1, and exact.
"$MEMLYZE" run -r 4096 -o s.mlyze ./churn threads 2 20000 >/dev/null 2>&1
"$MEMLYZE" run -r 4096 --format v1 -o v.mlyze ./churn threads 2 20000 >/dev/null 2>&1
"$MEMLYZE" run -r 1 -o x.mlyze ./churn threads 2 5000 >/dev/null 2>&1
for f in s v x; do check "trace $f.mlyze recorded" test -s "$f.mlyze"; done
cp s.mlyze bad.mlyze
printf '\377\377\377\377' | dd of=bad.mlyze bs=1 seek=600 conv=notrunc 2>/dev/null
head -c 3000 v.mlyze > cut.mlyze

# vg WANT_RC CMD...: memlyze CMD under memcheck; an error or a leak exits 99.
vg() {
    local want=$1; shift
    valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --show-leak-kinds=definite,indirect "$MEMLYZE" "$@" > "$T/vg.out" 2> "$T/vg.err"
    local rc=$?
    if [ "$rc" -eq "$want" ]; then pass "valgrind: memlyze $*"
    else fail "valgrind: memlyze $* (exit $rc, want $want)" "$(grep -m 12 '==' "$T/vg.err")"; fi
}
vg 0 validate s.mlyze v.mlyze x.mlyze
vg 0 stats s.mlyze
vg 0 top s.mlyze
vg 0 top --json x.mlyze
vg 0 top --at 0.005 x.mlyze
vg 0 tree s.mlyze
vg 0 leaks x.mlyze
vg 0 temporary x.mlyze
vg 0 diff v.mlyze s.mlyze
vg 0 diff --from 0.001 --to 0.01 x.mlyze
vg 0 dump s.mlyze
cp "$T/vg.out" d.txt
vg 0 undump -o u.mlyze d.txt
vg 0 convert --format v1 -o c1.mlyze s.mlyze
vg 0 convert --format lz4 -o c2.mlyze x.mlyze
vg 0 convert --format split -o c3.mlyze v.mlyze
vg 0 flamegraph -o f.svg s.mlyze
vg 0 flamegraph -o f.html x.mlyze
vg 0 timeline -o t.svg x.mlyze
for e in pprof speedscope folded json heaptrack dumpalloc; do vg 0 export --format "$e" -o "e.$e" x.mlyze; done
vg 0 import heaptrack e.heaptrack -o i1.mlyze
vg 0 import dumpalloc e.dumpalloc -o i2.mlyze
vg 1 validate bad.mlyze
vg 1 top bad.mlyze
vg 1 stats cut.mlyze
vg 1 export --format heaptrack -o no.heaptrack s.mlyze   # sampled: refused

# A snapshot of a live process (read from outside, symbols on a second thread).
mkfifo in
MEMLYZE_MODE=got MEMLYZE_RATE=1 MEMLYZE_SPOOL="$T/spool" LD_PRELOAD="$B/lib/libmemlyze.so" ./holder 4 < in > out &
HPID=$!
exec {HIN}>in
for _ in $(seq 100); do grep -q ready out 2>/dev/null && break; sleep 0.05; done
vg 0 snapshot -q -o snap.mlyze "$HPID"
exec {HIN}>&-
wait "$HPID"
vg 0 top snap.mlyze
cd - >/dev/null
finish
