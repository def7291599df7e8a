#!/usr/bin/env bash
# The split-stream encoding end to end: the default for `memlyze run`,
# `--format v1` and `-z` still write v1, `memlyze convert` between all three
# (v1 -> split -> v1 byte-identical), files of the older address model,
# seek by time through the index, and damaged files rejected with a rule
# and an offset.
. "$(dirname "$0")/lib.sh"
flags() { "$MEMLYZE" dump "$1" 2>/dev/null | head -2 | tail -1 | sed 's/.*flags=\(0x[0-9a-f]*\).*/\1/'; }

cc -O2 -o "$T/churn" "$ROOT/bench/workloads/churn.c" -lpthread || fail "build churn"
"$MEMLYZE" run -r 1 -o "$T/d.mlyze" -- "$T/churn" threads 1 200000 >/dev/null 2>&1
check "run: split-stream by default (address model 2), metadata compressed" test "$(flags "$T/d.mlyze")" = 0x1d
check "run: split trace valid" "$MEMLYZE" validate "$T/d.mlyze"
check "run: split trace has its index" test -s "$T/d.mlyze.idx"
"$MEMLYZE" run -r 1 --format v1 -o "$T/v.mlyze" -- "$T/churn" threads 1 1000 >/dev/null 2>&1
check "run --format v1: plain v1 stream" test "$(flags "$T/v.mlyze")" = 0x1
"$MEMLYZE" run -r 1 -z -o "$T/z.mlyze" -- "$T/churn" threads 1 1000 >/dev/null 2>&1
check "run -z: v1 in LZ4 blocks" test "$(flags "$T/z.mlyze")" = 0x3

"$MEMLYZE" convert --format v1 -o "$T/d.v1" "$T/d.mlyze"
"$MEMLYZE" convert --format split -o "$T/d2.split" "$T/d.v1"
"$MEMLYZE" convert --format v1 -o "$T/d2.v1" "$T/d2.split"
check "convert: v1 -> split -> v1 byte-identical" cmp "$T/d.v1" "$T/d2.v1"
check "convert: split -> v1 -> split byte-identical" cmp "$T/d.mlyze" "$T/d2.split"
"$MEMLYZE" convert --format lz4 -o "$T/d.lz4" "$T/d2.split"
"$MEMLYZE" convert --format v1 -o "$T/d3.v1" "$T/d.lz4"
check "convert: via lz4 byte-identical too" cmp "$T/d.v1" "$T/d3.v1"
# A v1 file from another writer is unsealed (flags 0): the block files made
# from it say so, and give it back byte for byte.
cat > "$T/uns.txt" <<'EOF'
mlyze-dump 1
header version=1 start_us=1000 flags=0x0 stream_len=0 event_count=0 raw_len=0
meta {"stack_traces":{"1":[]},"files":{},"functions":{}}
alloc dt=1 t=1 addr=0x1000 size=8 stack=1 thread=1
free dt=2 t=3 addr=0x1000
end events=2
EOF
"$MEMLYZE" undump -o "$T/uns.v1" "$T/uns.txt"
for f in split lz4; do
    "$MEMLYZE" convert --format $f -o "$T/uns.$f" "$T/uns.v1"
    "$MEMLYZE" convert --format v1 -o "$T/uns.$f.v1" "$T/uns.$f"
    check "unsealed v1 -> $f -> v1 byte-identical" cmp "$T/uns.v1" "$T/uns.$f.v1"
    "$MEMLYZE" dump "$T/uns.$f" > "$T/uns.$f.txt"
    "$MEMLYZE" undump -o "$T/uns.$f.2" "$T/uns.$f.txt"
    check "unsealed v1's $f file: dump and undump give it back" cmp "$T/uns.$f" "$T/uns.$f.2"
done
sed 's/flags=0x0/flags=0x20/' "$T/uns.txt" > "$T/uns20.txt"
check "flag UNSEALED_V1 on a plain v1 file is rejected" \
    bash -c "! '$MEMLYZE' undump -o '$T/uns20.v1' '$T/uns20.txt' 2>/dev/null || ! '$MEMLYZE' validate '$T/uns20.v1' >/dev/null 2>&1"
# A spool names its stacks in STACK_RAW events of the same block as the
# ALLOCs that use them: the split reader checks them in event order.
cat > "$T/spool.txt" <<'EOF'
mlyze-dump 1
header version=1 start_us=1000 flags=0x1 stream_len=0 event_count=0 raw_len=0
meta {"kind":"spool","stack_traces":{},"files":{},"functions":{}}
ext type=16 dt=0 t=0 len=3 data=010110
alloc dt=1 t=0 addr=0x1000 size=8 stack=1 thread=1
end events=2
EOF
"$MEMLYZE" undump -o "$T/spool.mlyze" "$T/spool.txt"
"$MEMLYZE" convert --format split -o "$T/spool.split" "$T/spool.mlyze"
check "spool -> split: valid (a STACK_RAW before its ALLOC, in one block)" "$MEMLYZE" validate "$T/spool.split"
"$MEMLYZE" convert --format v1 -o "$T/spool.v1" "$T/spool.split"
check "spool -> split -> v1 byte-identical" cmp "$T/spool.mlyze" "$T/spool.v1"
# The split spool's dump, with the ALLOC naming another stack, written
# back as a split spool.
"$MEMLYZE" dump "$T/spool.split" | sed 's/stack=1 /stack=2 /' > "$T/spool2.txt"
"$MEMLYZE" undump -o "$T/spool2.split" "$T/spool2.txt"
check "spool in split: an ALLOC naming a stack no STACK_RAW gave is rejected" \
    bash -c "'$MEMLYZE' validate '$T/spool2.split' 2>&1 | grep -q 'rule 4.*stack 2'"

# A file of no events: its index of no blocks is valid, and a file without
# memlyze's kind is named by its metadata, not as plain v1 when it is split.
printf '%s\n' 'mlyze-dump 1' 'header version=1 start_us=1000 flags=0x1 stream_len=0 event_count=0 raw_len=0' \
    'meta {"stack_traces":{},"files":{},"functions":{}}' 'end events=0' > "$T/zero.txt"
"$MEMLYZE" undump -o "$T/zero.mlyze" "$T/zero.txt"
"$MEMLYZE" convert --format split -o "$T/zero.split" "$T/zero.mlyze"
check "no events: split file valid, its index current, no plain-v1 label" \
    bash -c "'$MEMLYZE' validate '$T/zero.split' | grep -q '^.*: ok (0 events, 0 stacks, split, metadata of a plain v1 file)\$'"

# Allowed one CPU the writer encodes alone; with two, on a second thread
# too (400k events: several blocks). The same file and index either way.
if [ "$(nproc)" -ge 2 ]; then
    taskset -c 0 "$MEMLYZE" convert --format split -o "$T/one.split" "$T/d.v1"
    check "convert: one CPU or two, the same split file" cmp "$T/one.split" "$T/d2.split"
    check "convert: one CPU or two, the same index" cmp "$T/one.split.idx" "$T/d2.split.idx"
else
    echo "SKIP: convert on one CPU or two (one CPU here)"
fi
# A split file of address model 1 (written before model 2: no flag SPLIT2)
# reads as before, and converts to model 2 with the same events.
M1="$ROOT/tests/data/split_model1.mlyze"
check "model 1 file: valid" "$MEMLYZE" validate "$M1"
"$MEMLYZE" convert --format v1 -o "$T/m1.v1" "$M1"
"$MEMLYZE" convert --format split -o "$T/m2.split" "$M1"
check "model 1 file: converted, model 2" test "$(flags "$T/m2.split")" = 0x1d
"$MEMLYZE" convert --format v1 -o "$T/m2.v1" "$T/m2.split"
check "model 1 -> model 2: the same events" cmp "$T/m1.v1" "$T/m2.v1"
# --level trades time for size; every level reads back to the same events.
"$MEMLYZE" convert --format split --level 1 -o "$T/l1.split" "$T/d.v1"
"$MEMLYZE" convert --format split --level 19 -o "$T/l19.split" "$T/d.v1"
s1=$(stat -c %s "$T/l1.split"); s9=$(stat -c %s "$T/d2.split"); s19=$(stat -c %s "$T/l19.split")
check "convert --level: 19 < default (9) < 1 in size ($s19 < $s9 < $s1)" test "$s19" -lt "$s9" -a "$s9" -lt "$s1"
"$MEMLYZE" convert --format v1 -o "$T/l19.v1" "$T/l19.split"
check "convert --level 19: back to v1 byte-identical" cmp "$T/d.v1" "$T/l19.v1"
check "convert --level: out of 1..19 is a usage error" bash -c "'$MEMLYZE' convert --format split --level 20 -o '$T/x' '$T/d.v1' 2>/dev/null; test \$? = 2"
check "convert --level: only for split" bash -c "'$MEMLYZE' convert --format lz4 --level 3 -o '$T/x' '$T/d.v1' 2>/dev/null; test \$? = 2 && ! test -e '$T/x'"
v1=$(stat -c %s "$T/d.v1"); sp=$(stat -c %s "$T/d.mlyze")
check "split at least 5x smaller than v1 on the churn ($sp vs $v1 bytes)" test $((sp * 5)) -lt "$v1"
check "convert: same dump as v1 apart from the header" bash -c \
    "diff <('$MEMLYZE' dump '$T/d.mlyze' | grep -v '^block' | sed 1,2d) <('$MEMLYZE' dump '$T/d.v1' | sed 1,2d)"
check "convert: refuses to replace without -f" bash -c "! '$MEMLYZE' convert --format v1 -o '$T/d.v1' '$T/d.mlyze' 2>/dev/null"
check "convert: unknown format is a usage error" bash -c "'$MEMLYZE' convert --format zip -o '$T/x' '$T/d.mlyze' 2>/dev/null; test \$? = 2"
check "convert --help" "$MEMLYZE" convert --help

# Seek by time: top --at gives the same answer on split (indexed) and v1.
"$MEMLYZE" top --json --at 0.05 "$T/d.mlyze" 2>&1 | grep -v '"file"' > "$T/at.split"
"$MEMLYZE" top --json --at 0.05 "$T/d.v1" 2>&1 | grep -v '"file"' > "$T/at.v1"
check "top --at: split and v1 agree" cmp "$T/at.split" "$T/at.v1"
# timeline reads split files a block at a time, v1 event by event: the same chart.
"$MEMLYZE" timeline "$T/d.mlyze" -o "$T/tl.split.svg" --title t >/dev/null
"$MEMLYZE" timeline "$T/d.v1" -o "$T/tl.v1.svg" --title t >/dev/null
check "timeline: split (by blocks) and v1 agree" cmp "$T/tl.split.svg" "$T/tl.v1.svg"
# A whole exact trace: split blocks take the replay that weighs objects by
# their sizes and counts each block at once (report/profile.c), v1 the
# event loop. The same reports, byte counts per kind included.
for c in "top --json" "top --json --by peak" "leaks --age 0 --json" "temporary --json"; do
    "$MEMLYZE" $c "$T/d.mlyze" 2>&1 | grep -v '"file"' > "$T/r.split"
    "$MEMLYZE" $c "$T/d.v1" 2>&1 | grep -v '"file"' > "$T/r.v1"
    check "$c: split and v1 agree" cmp "$T/r.split" "$T/r.v1"
done
"$MEMLYZE" stats "$T/d.mlyze" | grep -E '^  (alloc|free) ' > "$T/s.split"
"$MEMLYZE" stats "$T/d.v1" | grep -E '^  (alloc|free) ' > "$T/s.v1"
check "stats: split and v1 agree on events and bytes per kind ($(tr -s ' ' < "$T/s.split" | tr '\n' ';'))" \
    bash -c "test -s '$T/s.split' && cmp '$T/s.split' '$T/s.v1'"

# Damage: a truncated file and a flipped byte in a block.
size=$(stat -c %s "$T/d.mlyze")
head -c $((size - 7)) "$T/d.mlyze" > "$T/cut.mlyze"
out=$("$MEMLYZE" validate "$T/cut.mlyze" 2>&1)
check "truncated split file rejected with rule and offset" bash -c "echo '$out' | grep -q 'rule 7 (size) at byte [0-9]'"
check "convert of a damaged file fails and leaves no output" bash -c \
    "! '$MEMLYZE' convert --format v1 -o '$T/cut.v1' '$T/cut.mlyze' 2>/dev/null && ! ls '$T'/cut.v1* 2>/dev/null"
cp "$T/d.mlyze" "$T/flip.mlyze"
printf '\x55' | dd of="$T/flip.mlyze" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
out=$("$MEMLYZE" validate "$T/flip.mlyze" 2>&1)
check "damaged split block rejected with rule and offset" bash -c "echo '$out' | grep -q 'at byte [0-9].*checksum'"

# The metadata: compressed on disk, the same JSON once read; damage to it is
# rule 3 at byte 256; a split file with plain JSON metadata (flag ZMETA
# clear, as written before metadata was compressed) still reads.
meta_len() { python3 -c "import struct,sys; print(struct.unpack_from('<I', open(sys.argv[1],'rb').read(), 16)[0])" "$1"; }
check "split metadata smaller than v1's JSON ($(meta_len "$T/d.mlyze") vs $(meta_len "$T/d.v1") bytes)" \
    test "$(meta_len "$T/d.mlyze")" -lt "$(meta_len "$T/d.v1")"
cp "$T/d.mlyze" "$T/meta.mlyze"
printf '\x01' | dd of="$T/meta.mlyze" bs=1 seek=$((256 + 20)) conv=notrunc 2>/dev/null
out=$("$MEMLYZE" validate "$T/meta.mlyze" 2>&1)
check "damaged split metadata rejected: rule 3 at byte 256" bash -c "echo '$out' | grep -q 'rule 3 (metadata) at byte 256.*checksum'"
python3 - "$T/d.mlyze" "$T/d.v1" "$T/plain-meta.mlyze" <<'PY'
import struct, sys
sp, v1 = open(sys.argv[1], 'rb').read(), open(sys.argv[2], 'rb').read()
zl, jl = struct.unpack_from('<I', sp, 16)[0], struct.unpack_from('<I', v1, 16)[0]
head = bytearray(sp[:256])
struct.pack_into('<II', head, 16, jl, 0x15)   # SEALED | SPLIT | SPLIT2, no ZMETA
open(sys.argv[3], 'wb').write(bytes(head) + v1[256:256 + jl] + sp[256 + zl:])
PY
"$MEMLYZE" top --json "$T/plain-meta.mlyze" 2>&1 | grep -v '"file"' > "$T/top.plain-meta"
"$MEMLYZE" top --json "$T/d.mlyze" 2>&1 | grep -v '"file"' > "$T/top.zmeta"
check "split file with plain JSON metadata still reads, same report" cmp "$T/top.plain-meta" "$T/top.zmeta"
finish
