#!/usr/bin/env bash
# memlyze export --format heaptrack and memlyze import heaptrack, checked with
# Debian's heaptrack itself: heaptrack_print reads the export of an exact
# trace and reports the same allocation counts and peaks per site as memlyze
# top; a recording made by heaptrack imports with the counts and peaks
# heaptrack_print reports for it; zstd, gzip and plain files; bad input.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/e2e/reports/lib_reports.sh"
CMP="$ROOT/tests/e2e/interop/compare_heaptrack.py"

if ! command -v heaptrack_print >/dev/null || ! command -v heaptrack >/dev/null; then
    skip "heaptrack not installed (Debian package heaptrack; make deps installs it)"
    finish
fi
known_trace "$T/k.mlyze"
check "export --help lists heaptrack" bash -c "'$MEMLYZE' export --help | grep -q '^  heaptrack$'"
check "export: heaptrack" "$MEMLYZE" export --format heaptrack -o "$T/k.heaptrack" "$T/k.mlyze"
folded() {   # FILE COST OUT: heaptrack_print's flame-graph lines of FILE
    heaptrack_print "$1" -F "$3" --flamegraph-cost-type "$2" > /dev/null 2> "$3.err"
}
folded "$T/k.heaptrack" allocations "$T/k.alloc"
folded "$T/k.heaptrack" peak "$T/k.peak"
check "heaptrack_print reads the export without complaint" bash -c \
    "[ -s '$T/k.alloc' ] && ! grep -qiE 'failed|damaged|error' '$T/k.alloc.err' '$T/k.peak.err'"
check "heaptrack_print shows the command" bash -c "heaptrack_print '$T/k.heaptrack' 2>/dev/null | grep -q '^Debuggee command was: .*known'"
"$MEMLYZE" top --json --by count -n 1000000 --frames 8 "$T/k.mlyze" > "$T/k.top.json"
check "heaptrack_print's counts and peaks per site = memlyze top --by count|peak" python3 "$CMP" "$T/k.top.json" "$T/k.alloc" "$T/k.peak"
"$MEMLYZE" top --by peak -n 3 "$T/k.mlyze" > "$T/k.toppeak"
check "  (site_thread's peak is 195 KiB in top --by peak and 200000 B in heaptrack_print)" bash -c \
    "grep -q '195 KiB .*site_thread' '$T/k.toppeak' && grep -q 'site_thread (known.c); 200000$' '$T/k.peak'"
known_trace "$T/ks.mlyze" 4096
check "export: a sampled trace is refused, one line" bash -c \
    "'$MEMLYZE' export --format heaptrack -o '$T/ks.heaptrack' '$T/ks.mlyze' 2>&1 | grep -q 'sampled (rate 4096)' && [ ! -e '$T/ks.heaptrack' ]"
"$MEMLYZE" export --format heaptrack --at 0.000001 -o "$T/k0.heaptrack" "$T/k.mlyze"
check "export --at: only the events up to that moment" bash -c \
    "[ \$(grep -c '^+' '$T/k0.heaptrack') -lt \$(grep -c '^+' '$T/k.heaptrack') ]"

# ---- round trip through heaptrack's format
sites() {   # FILE: sorted "frames count live peak" per site
    "$MEMLYZE" top -n 100000 --frames 64 --by count --json "$1" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["sites"]:
    print(";".join(s["frames"]), int(s["alloc_count"]), int(s["live_bytes"]), int(s["peak_bytes"]))' | sort
}
check "import: our export" "$MEMLYZE" import heaptrack "$T/k.heaptrack" -o "$T/kback.mlyze"
sites "$T/k.mlyze" > "$T/a.sites"
sites "$T/kback.mlyze" > "$T/b.sites"
check "round trip: every site's frames (inlined ones too), count, live bytes and peak" bash -c "[ \$(wc -l < '$T/a.sites') -ge 6 ] && diff '$T/a.sites' '$T/b.sites'"

# ---- a recording made by heaptrack
(cd "$T" && heaptrack -o "$T/hk" ./known > "$T/hk.log" 2>&1)
check "heaptrack recorded known.c" test -s "$T/hk.zst"
check "import: heaptrack's .zst" "$MEMLYZE" import heaptrack "$T/hk.zst" -o "$T/hk.mlyze"
folded "$T/hk.zst" allocations "$T/hk.alloc"
folded "$T/hk.zst" peak "$T/hk.peak"
"$MEMLYZE" top --json --by count -n 1000000 --frames 8 "$T/hk.mlyze" > "$T/hk.top.json"
check "import: memlyze top's counts and peaks per site = heaptrack_print's of the same file" \
    python3 "$CMP" "$T/hk.top.json" "$T/hk.alloc" "$T/hk.peak"
check "import: site_malloc holds 100 x 1000 B at the end, as known.c does" bash -c \
    "'$MEMLYZE' top '$T/hk.mlyze' | grep -qE '^ +[0-9]+  97.7 KiB .* 100 .*site_malloc'"
check "import: memlyze's other reports read it (flame graph, pprof, diff against our own recording)" bash -c \
    "'$MEMLYZE' flamegraph -o '$T/hk.svg' '$T/hk.mlyze' && grep -q site_malloc '$T/hk.svg' && '$MEMLYZE' export -o '$T/hk.pb.gz' '$T/hk.mlyze' && gzip -t '$T/hk.pb.gz' && '$MEMLYZE' diff '$T/hk.mlyze' '$T/k.mlyze' > /dev/null"
check "import: the metadata says where it came from" bash -c "'$MEMLYZE' dump '$T/hk.mlyze' | grep '^meta' | grep -q '\"imported_from\":\"heaptrack\"'"
zstd -dc "$T/hk.zst" > "$T/hk.plain"
gzip -c "$T/hk.plain" > "$T/hk.gz"
"$MEMLYZE" import heaptrack "$T/hk.plain" -o "$T/hkp.mlyze" && "$MEMLYZE" import heaptrack "$T/hk.gz" -o "$T/hkg.mlyze"
check "import: plain and gzip files give the same trace as .zst" bash -c \
    "sites() { '$MEMLYZE' top --by count -n 1000 --frames 8 \"\$1\" | tail -n +2; }; [ \"\$(sites '$T/hk.mlyze')\" = \"\$(sites '$T/hkp.mlyze')\" ] && [ \"\$(sites '$T/hk.mlyze')\" = \"\$(sites '$T/hkg.mlyze')\" ]"

# ---- bad input: one line, exit 1, no output
bad() {   # NAME FILE PATTERN
    "$MEMLYZE" import heaptrack "$2" -o "$T/bad.mlyze" 2> "$T/bad.err"
    local rc=$?
    check "bad: $1" bash -c "[ $rc -eq 1 ] && [ \$(wc -l < '$T/bad.err') -eq 1 ] && grep -q '$3' '$T/bad.err' && [ ! -e '$T/bad.mlyze' ]"
}
printf 'hello\n' > "$T/x.txt"
bad "not a heaptrack file" "$T/x.txt" "not a heaptrack data file"
head -c 3000 "$T/hk.zst" > "$T/cut.zst"
bad "cut-off .zst" "$T/cut.zst" "zstd: the compressed data is cut off"
printf 'v 10400 3\nx ./prog\nm 1 x 0 0 1000\n' > "$T/raw.txt"
bad "raw (uninterpreted) file" "$T/raw.txt" "line 2: a raw heaptrack file: run .heaptrack -i FILE."
printf 'v 10400 9\n' > "$T/v9.txt"
bad "a newer file format" "$T/v9.txt" "version 9 is newer"
printf 'v 10400 3\ns 3 abc\ni 1000 1 1 0 0\nt 1 5\nt 9 0\na 10 1\na 10 2\n+ 0\n+ 1\n+ 7\n- 0\n- 0\nQ what\n' > "$T/odd.txt"
check "odd references and lines: imported, counted" bash -c \
    "'$MEMLYZE' import heaptrack '$T/odd.txt' -o '$T/odd.mlyze' 2> '$T/odd.err' && grep -q 'warning: 1 lines not understood' '$T/odd.err' && grep -q 'warning: 1 frees with no live allocation' '$T/odd.err' && grep -q 'references to undefined' '$T/odd.err' && '$MEMLYZE' top --by count '$T/odd.mlyze' | grep -q 'abc'"
finish
