#!/usr/bin/env bash
# Programs whose allocator is not glibc's: jemalloc, tcmalloc and mimalloc,
# preloaded or linked. Each replaces C++'s operator new and delete as well
# as malloc, so a program's new never reaches malloc: the payload hooks the
# operators themselves (and __cxa_begin_catch, for a bad_alloc thrown
# through the new hook). Checked in exact mode, attached and under memlyze
# run: every site of tests/targets/cxx_alloc.cpp (new[], nothrow new,
# aligned new, sized and aligned deletes, a new after a bad_alloc) holds
# exactly its live bytes. And a thread stopped inside such an allocator is
# never borrowed for the injected calls (they allocate through it too):
# attach/detach cycles against a single thread that only mallocs and frees
# under mimalloc and tcmalloc leave it running, its blocks intact.
. "$(dirname "$0")/lib.sh"
ATTACH="$B/bin/memlyze-attach"
DETACH="$B/bin/memlyze-detach"
LIBDIR=/usr/lib/x86_64-linux-gnu
JE=$LIBDIR/libjemalloc.so.2 TC=$LIBDIR/libtcmalloc_minimal.so.4 MI=$LIBDIR/libmimalloc.so.2
P=
trap '[ -n "$P" ] && kill -9 $P 2>/dev/null; rm -rf "$T"' EXIT
command -v g++ >/dev/null || { skip "C++ allocators" "g++ not installed"; finish; }
g++ -O1 -g -o "$T/cxx" "$ROOT/tests/targets/cxx_alloc.cpp" || { fail "build cxx_alloc"; finish; }
cc -O2 -g -o "$T/tight" "$ROOT/tests/targets/alloc_tight.c" || { fail "build alloc_tight"; finish; }
WANT="site_after_throw 1000
site_aligned 2560
site_array 4000
site_nothrow 1200"

# sites FILE: live bytes per site_* function (the first such frame).
sites() {
    "$MEMLYZE" top --json -n 500 --frames 40 "$1" | python3 -c "
import json, sys
from collections import Counter
c = Counter()
for s in json.load(sys.stdin)['sites']:
    for f in s['frames']:
        w = f.split(' ')[0].split('(')[0]
        if w.startswith('site_'):
            c[w] += s['live_bytes']
            break
for k, v in sorted(c.items()): print(k, int(round(v)))"
}
wait_for() { for _ in $(seq 1000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done; return 1; }

# attached NAME LIB [ENV]: attach -r 1 before the allocations, snapshot
# after them, detach; both files hold exactly the sites' bytes.
attached() {
    local name=$1 lib=$2 d="$T/a.$1"
    mkdir -p "$d"
    env ${3:-} LD_PRELOAD="$lib" "$T/cxx" "$d" >"$d/out" 2>&1 &
    P=$!
    wait_for "$d/out" ready || { fail "$name: target started"; return; }
    check "$name: attached (-r 1)" "$ATTACH" -q -r 1 -o "$d/t.mlyze" "$P"
    touch "$d/go"
    wait_for "$d/out" done || { fail "$name: target allocated" "$(cat "$d/out")"; return; }
    "$MEMLYZE" snapshot -q -o "$d/s.mlyze" "$P"
    check "$name: snapshot: every site's live bytes exact" diff <(echo "$WANT") <(sites "$d/s.mlyze")
    check "$name: detached" "$DETACH" -q "$P"
    touch "$d/end"
    wait "$P"
    local rc=$?
    P=
    check "$name: the program exited 0 (rc $rc)" test "$rc" = 0
    check "$name: trace: every site's live bytes exact" diff <(echo "$WANT") <(sites "$d/t.mlyze")
}

# run NAME PROGRAM [LD_PRELOAD]: memlyze run -r 1, which switches to GOT mode.
run() {
    local name=$1 prog=$2 lib=${3:-} d="$T/r.$1"
    mkdir -p "$d"
    LD_PRELOAD="$lib" "$MEMLYZE" run -r 1 -o "$d/r.mlyze" -- "$prog" >"$d/out" 2>"$d/err"
    check "$name: memlyze run says GOT patching, naming the allocator" grep -q "C++'s new from lib.*(--got)" "$d/err"
    check "$name: memlyze run: every site's live bytes exact" diff <(echo "$WANT") <(sites "$d/r.mlyze")
}

attached glibc ""
run_glibc() {
    "$MEMLYZE" run -r 1 -o "$T/g.mlyze" -- "$T/cxx" >/dev/null 2>"$T/g.err"
    check "glibc: memlyze run stays with LD_PRELOAD" bash -c "! grep -q -- '--got' '$T/g.err'"
    check "glibc: memlyze run: every site's live bytes exact" diff <(echo "$WANT") <(sites "$T/g.mlyze")
}
run_glibc

for a in jemalloc:$JE tcmalloc:$TC mimalloc:$MI; do
    name=${a%%:*} lib=${a#*:}
    [ -e "$lib" ] || { skip "$name" "$lib not installed (make deps)"; continue; }
    # mimalloc (built as C) aborts on a failed new instead of throwing
    [ "$name" = mimalloc ] && env=CXX_ALLOC_NO_THROW=1 || env=
    attached "$name" "$lib" "$env"
    [ "$name" = mimalloc ] && continue
    run "$name" "$T/cxx" "$lib"
done
if [ -e "$TC" ] && g++ -O1 -g -o "$T/cxx_tc" "$ROOT/tests/targets/cxx_alloc.cpp" -l:libtcmalloc_minimal.so.4; then
    run "tcmalloc linked" "$T/cxx_tc"
fi

# cycles NAME LIB N: attach + detach N times against alloc_tight.
cycles() {
    local name=$1 lib=$2 n=$3 ok=0 i
    LD_PRELOAD="$lib" "$T/tight" >"$T/tight.out" 2>&1 &
    P=$!
    wait_for "$T/tight.out" ready
    for i in $(seq "$n"); do
        rm -f "$T"/c.mlyze*
        timeout 30 "$ATTACH" -q -o "$T/c.mlyze" "$P" >/dev/null 2>&1 || break
        timeout 30 "$DETACH" -q "$P" >/dev/null 2>&1 || break
        kill -0 "$P" 2>/dev/null || break
        ok=$i
    done
    sleep 0.2
    check "$name: $n attach/detach cycles done ($ok), the target alive and intact" \
        bash -c "kill -0 $P && [ $ok = $n ] && ! grep -q corrupted '$T/tight.out'"
    kill -9 "$P" 2>/dev/null
    wait "$P" 2>/dev/null
    rm -rf "/tmp/memlyze-$P" "$T"/c.mlyze*
    P=
}
for a in mimalloc:$MI:25 tcmalloc:$TC:15; do
    IFS=: read -r name lib n <<<"$a"
    [ -e "$lib" ] && cycles "$name" "$lib" "$n"
done
finish
