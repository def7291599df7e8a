#!/usr/bin/env bash
# memlyze replay: a synthetic trace whose fragmentation differs between
# allocators in a known direction (8-byte blocks: glibc's smallest chunk is
# 32 bytes, the size-class allocators have an 8-byte class), a recorded
# redis trace replayed under every installed allocator, threads, --timing,
# sampled traces refused unless --force, bad allocators and files.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/e2e/reports/lib_reports.sh"
. "$ROOT/tests/targets/redis.sh"
SYN="$ROOT/tests/e2e/interop/synth_trace.py"
LIBDIR=/usr/lib/x86_64-linux-gnu

check "replay --help" bash -c "'$MEMLYZE' replay --help | grep -q '^usage: memlyze replay'"
have() { [ -e "$LIBDIR/$1" ]; }

# ---- the known direction
python3 "$SYN" tiny 200000 > "$T/tiny.dump" && "$MEMLYZE" undump -o "$T/tiny.mlyze" "$T/tiny.dump" >/dev/null
"$MEMLYZE" replay --json "$T/tiny.mlyze" > "$T/tiny.json"
check "tiny: replayed: 200000 allocations, all live at the end, 1.5 MiB" python3 -c "
import json; d = json.load(open('$T/tiny.json'))
assert d['allocations'] == 200000 and d['frees'] == 0 and d['peak_live_bytes'] == 1600000 == d['live_at_end_bytes'], d
assert not d['estimate']"
check "tiny: every allocator's RSS holds the live bytes (the blocks were really made)" python3 -c "
import json; d = json.load(open('$T/tiny.json'))
for a in d['allocators']:
    assert 'error' not in a, a
    assert a['rss_at_live_peak_bytes'] >= 0.95 * d['peak_live_bytes'] and a['peak_rss_bytes'] >= 0.95 * d['peak_live_bytes'], a"
check "tiny: glibc's row runs glibc's malloc" python3 -c "
import json; d = json.load(open('$T/tiny.json'))
g = [a for a in d['allocators'] if a['allocator'] == 'glibc'][0]
assert 'libc.so' in g['library'], g"
for a in jemalloc:libjemalloc.so.2 tcmalloc:libtcmalloc_minimal.so.4 mimalloc:libmimalloc.so.2; do
    name=${a%%:*} so=${a#*:}
    if ! have "$so"; then skip "$name not installed (make deps installs it)"; continue; fi
    check "tiny: $name is preloaded, and glibc's fragmentation is over 2.5 times $name's" python3 -c "
import json; d = json.load(open('$T/tiny.json'))
r = {a['allocator']: a for a in d['allocators']}
assert '$so' in r['$name']['library'], r['$name']
assert r['glibc']['fragmentation'] > 2.5 * r['$name']['fragmentation'], (r['glibc'], r['$name'])"
done
check "tiny: the table has one row per allocator" bash -c \
    "'$MEMLYZE' replay --allocator glibc,$LIBDIR/libjemalloc.so.2 '$T/tiny.mlyze' > '$T/tiny.txt' && grep -q '^glibc ' '$T/tiny.txt' && grep -q 'libjemalloc.so.2 .*libjemalloc.so.2$' '$T/tiny.txt' && grep -q 'fragmentation' '$T/tiny.txt'"

# ---- threads and --timing: 40 blocks 10 ms apart from two threads
python3 "$SYN" timed 40 > "$T/timed.dump" && "$MEMLYZE" undump -o "$T/timed.mlyze" "$T/timed.dump" >/dev/null
"$MEMLYZE" replay --allocator glibc --json "$T/timed.mlyze" > "$T/fast.json"
"$MEMLYZE" replay --allocator glibc --json --timing "$T/timed.mlyze" > "$T/slow.json"
check "timed: two recorded threads, frees matched" python3 -c "
import json; d = json.load(open('$T/fast.json'))
assert d['threads'] == 2 and d['allocations'] == 40 and d['frees'] == 40 and d['live_at_end_bytes'] == 0, d"
check "timed: --timing keeps the recorded 0.4 s, without it the replay is faster" python3 -c "
import json
fast = json.load(open('$T/fast.json'))['allocators'][0]['time_s']
slow = json.load(open('$T/slow.json'))['allocators'][0]['time_s']
assert slow >= 0.38 and fast < 0.2, (fast, slow)"

# ---- sampled traces, snapshots, bad allocators
known_trace "$T/ks.mlyze" 4096
"$MEMLYZE" replay --allocator glibc "$T/ks.mlyze" > /dev/null 2> "$T/ks.err"
rc=$?
check "sampled: refused without --force, one line that says why" bash -c \
    "[ $rc -eq 1 ] && [ \$(wc -l < '$T/ks.err') -eq 1 ] && grep -q 'sampled trace (rate 4096).*--force' '$T/ks.err'"
check "sampled --force: labelled an estimate" bash -c "'$MEMLYZE' replay --force --allocator glibc '$T/ks.mlyze' | grep -q '^ESTIMATE: a sampled trace (rate 4096)'"
check "sampled --force: the weights scale the blocks (site_malloc alone holds ~100000 B live)" bash -c \
    "'$MEMLYZE' replay --force --allocator glibc --json '$T/ks.mlyze' | python3 -c \"import json,sys; d = json.load(sys.stdin); assert d['estimate'] and 200000 < d['live_at_end_bytes'] < 1000000, d\""
# An address allocated again without a FREE: the old block (every one of
# its weighted copies) is freed before the new one counts.
printf '%s\n' 'mlyze-dump 1' 'header version=1 start_us=1000000 flags=0x1 stream_len=0 event_count=0 raw_len=0' \
    'meta {"kind":"trace","stack_traces":{"0":[{"file_id":0,"line":1,"func_id":0}]},"files":{"0":"a.c"},"functions":{"0":"f"},"rate":RATE}' \
    'alloc dt=0 t=0 addr=0x1000 size=SIZE stack=0 thread=1' 'alloc dt=1000 t=0 addr=0x1000 size=SIZE stack=0 thread=1' \
    'alloc dt=1000 t=0 addr=0x2000 size=50 stack=0 thread=1' 'free dt=1000 t=0 addr=0x2000' \
    'free dt=1000 t=0 addr=0x1000' 'end events=5' > "$T/again.in"
sed 's/RATE/1/; s/SIZE/100/g' "$T/again.in" > "$T/again1.txt"
sed 's/RATE/1024/; s/SIZE/16/g' "$T/again.in" > "$T/again2.txt"
"$MEMLYZE" undump -o "$T/again1.mlyze" "$T/again1.txt"
"$MEMLYZE" undump -o "$T/again2.mlyze" "$T/again2.txt"
check "address again without a FREE, exact: peak 150 B (not 250), nothing live at the end" bash -c \
    "'$MEMLYZE' replay --allocator glibc --json '$T/again1.mlyze' | python3 -c \"import json,sys; d = json.load(sys.stdin); assert d['peak_live_bytes'] == 150 and d['live_at_end_bytes'] == 0, d\""
check "address again without a FREE, weighted: every copy of the old block freed" bash -c \
    "'$MEMLYZE' replay --force --allocator glibc --json '$T/again2.mlyze' | python3 -c \"import json,sys; d = json.load(sys.stdin); assert d['live_at_end_bytes'] == 0, d\""
check "bad allocator name: usage error" bash -c "'$MEMLYZE' replay --allocator nosuch '$T/tiny.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
check "missing library path: its row says so, exit 1, the others still run" bash -c \
    "'$MEMLYZE' replay --allocator glibc,/nonexistent/libx.so '$T/timed.mlyze' > '$T/bad.txt'; [ \$? -eq 1 ] && grep -q '^/nonexistent/libx.so /nonexistent/libx.so: No such file' '$T/bad.txt' && grep -q '^glibc .*libc.so' '$T/bad.txt'"
check "a library that is no allocator still replays (malloc stays glibc's, the row says which)" bash -c \
    "'$MEMLYZE' replay --allocator $LIBDIR/libz.so.1 '$T/timed.mlyze' | grep -q 'libc.so.6$'"
check "not a trace: one line" bash -c "'$MEMLYZE' replay '$T/tiny.dump' 2>&1 >/dev/null | grep -q 'memlyze replay: .*tiny.dump'"

# ---- a recorded redis trace (exact), replayed under every installed allocator
start_redis || finish
check "redis: attach in exact mode" "$B/bin/memlyze-attach" -q -r 1 -o "$T/redis.mlyze" "$RP"
redis-benchmark -p "$PORT" -n 50000 -c 10 -r 20000 -d 256 -t set,lpush,get -q > "$T/bench.txt" 2>&1
"$MEMLYZE" snapshot -q -o "$T/redis.snap.mlyze" "$RP"
check "a snapshot is no trace: one line naming it a snapshot, exit 1" bash -c \
    "'$MEMLYZE' replay '$T/redis.snap.mlyze' 2>'$T/snap.err' >/dev/null; [ \$? -eq 1 ] && grep -q 'a snapshot, not a trace' '$T/snap.err'"
check "redis: detach writes the trace" "$B/bin/memlyze-detach" -q "$RP"
kill "$RP" 2>/dev/null; wait "$RP" 2>/dev/null
"$MEMLYZE" replay --json "$T/redis.mlyze" > "$T/redis.json"
check "redis: every installed allocator replayed it; RSS holds the live bytes; fragmentation sane" python3 -c "
import json; d = json.load(open('$T/redis.json'))
assert d['allocations'] > 50000 and d['peak_live_bytes'] > 1000000, d
names = [a['allocator'] for a in d['allocators']]
assert names[0] == 'glibc' and len(names) >= 2, names
for a in d['allocators']:
    assert 'error' not in a, a
    assert a['peak_rss_bytes'] >= 0.9 * d['peak_live_bytes'], a
    assert 0.9 < a['fragmentation'] < 4, a
    assert a['minor_faults'] > 0 and a['time_s'] > 0, a"
"$MEMLYZE" replay "$T/redis.mlyze" | tee "$T/redis.txt" | sed 's/^/    /'
finish
