#!/usr/bin/env bash
# memlyze export --format dumpalloc and memlyze import dumpalloc: the layout
# checked by an independent parser (tests/e2e/interop/dumpalloc.py), a round
# trip of an exact trace that keeps every site's counts, bytes and peaks,
# readable oddities counted as warnings, broken files refused in one line.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/e2e/reports/lib_reports.sh"
DA="$ROOT/tests/e2e/interop/dumpalloc.py"

known_trace "$T/k.mlyze"
check "import --help" bash -c "'$MEMLYZE' import --help | grep -q 'ALOC' "
check "export --help lists dumpalloc from the format table" bash -c "'$MEMLYZE' export --help | grep -q '^  dumpalloc$'"

# ---- export: the seed's layout, byte for byte
check "export: dumpalloc" "$MEMLYZE" export --format dumpalloc -o "$T/k.da" "$T/k.mlyze"
check "export: implied by -o x.dumpalloc" "$MEMLYZE" export -o "$T/k2.dumpalloc" "$T/k.mlyze"
python3 "$DA" check "$T/k.da" > "$T/k.counts" 2>&1
check "export: strict parse: every length right, chains end in TERM, PCAL frames" \
    python3 -c "import json; n = json.load(open('$T/k.counts')); assert n['ALOC'] == n['ASIZ'] == n['FRAM TERM'] > 100000 and n['PROC'] == 1 and n['FRAM PCAL'] > 0 and 'FRAM NTVE' not in n, n"
"$MEMLYZE" export --format dumpalloc --frames native -o "$T/kn.da" "$T/k.mlyze"
check "export --frames native: NTVE addresses only" bash -c \
    "python3 '$DA' check '$T/kn.da' | python3 -c \"import json,sys; n = json.load(sys.stdin); assert n['FRAM NTVE'] > 0 and 'FRAM PCAL' not in n, n\""
check "export: --frames belongs to dumpalloc" bash -c "'$MEMLYZE' export --format json --frames native '$T/k.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
check "export: binary, refused on a terminal only" bash -c "'$MEMLYZE' export --format dumpalloc '$T/k.mlyze' | cmp -s - '$T/k.da'"

# ---- round trip: the same sites, counts, bytes and peaks (PCAL has no
# inline mark: "[inlined]" is the one thing not carried)
sites() {   # FILE: sorted "frames count live peak" per site
    "$MEMLYZE" top -n 100000 --frames 64 --by count --json "$1" | python3 -c '
import json, sys
for s in json.load(sys.stdin)["sites"]:
    print(";".join(f.replace(" [inlined]", "") for f in s["frames"]), int(s["alloc_count"]), int(s["live_bytes"]), int(s["peak_bytes"]))' | sort
}
check "import: dumpalloc" "$MEMLYZE" import dumpalloc "$T/k.da" -o "$T/back.mlyze"
sites "$T/k.mlyze" > "$T/a.sites"
sites "$T/back.mlyze" > "$T/b.sites"
check "round trip: every site's frames, allocation count, live bytes and peak" bash -c \
    "[ \$(wc -l < '$T/a.sites') -ge 6 ] && diff '$T/a.sites' '$T/b.sites'"
check "round trip: site_malloc 100 x 1000 B live" grep -q "^site_malloc (known.c:[0-9]*);main (known.c:[0-9]*);.* 100 100000 100000$" "$T/b.sites"
check "import: refuses to replace OUT without --force" bash -c "! '$MEMLYZE' import dumpalloc '$T/k.da' -o '$T/back.mlyze' 2>/dev/null"
"$MEMLYZE" import dumpalloc "$T/kn.da" -o "$T/backn.mlyze"
check "round trip --frames native: same totals, sites named by address" bash -c \
    "'$MEMLYZE' top '$T/backn.mlyze' | head -1 | grep -q 'live 406 KiB in ~585 objects' && '$MEMLYZE' top '$T/backn.mlyze' | grep -q ' 0x[0-9a-f]*$'"

# ---- oddities a reader steps over: counted, not fatal
python3 "$DA" make odd "$T/odd.da"
check "odd: imported" bash -c "'$MEMLYZE' import dumpalloc '$T/odd.da' -o '$T/odd.mlyze' 2> '$T/odd.err'"
for w in "1 of 2 allocations have no size" "1 DALC records free an address not allocated" \
         "1 frame chains end without TERM" "1 records of unknown types skipped" \
         "1 frames of unknown kinds skipped" "1 FRAM records outside an ALOC chain"; do
    check "odd: warning: $w" grep -q "^memlyze import: warning: $w" "$T/odd.err"
done
"$MEMLYZE" top --by count --json --frames 8 "$T/odd.mlyze" > "$T/odd.json"
check "odd: PCAL frame named, NTVE frame by address, unknown kind left out, ASIZ size kept, freed one gone" python3 -c "
import json; d = json.load(open('$T/odd.json'))
s = {x['frames'][0]: x for x in d['sites']}
assert s['make_thing (odd.c:42)']['frames'] == ['make_thing (odd.c:42)', '0x401234'], s
assert s['make_thing (odd.c:42)']['live_count'] == 0
assert s['big_thing (odd.c:7)']['live_bytes'] == 4096
"
python3 "$ROOT/tests/e2e/interop/dumpalloc.py" make latin1 "$T/latin1.da"
"$MEMLYZE" import dumpalloc -o "$T/latin1.mlyze" "$T/latin1.da" 2>/dev/null
check "a PROC name that is not UTF-8 is kept, '?' for its odd byte" bash -c \
    "'$MEMLYZE' dump '$T/latin1.mlyze' | grep '^meta' | grep -q '\"exe\":\"caf?-server\"'"
check "odd: PROC and OBJE kept in the metadata" bash -c \
    "'$MEMLYZE' dump '$T/odd.mlyze' | grep '^meta' | grep -q '\"pid\":77.*\"exe\":\"/usr/bin/odd\"' && '$MEMLYZE' dump '$T/odd.mlyze' | grep -q 'dumpalloc_objects\":\[\"/usr/lib/libodd.so\"\]'"

# ---- broken files: one line naming the byte, exit 1, no output
for k in past-end short-header pcal-past-record; do
    python3 "$DA" make $k "$T/$k.da"
    "$MEMLYZE" import dumpalloc "$T/$k.da" -o "$T/$k.mlyze" 2> "$T/$k.err"
    rc=$?
    check "broken ($k): exit 1, one line naming the byte, no output" bash -c \
        "[ $rc -eq 1 ] && [ \$(wc -l < '$T/$k.err') -eq 1 ] && grep -q 'byte [0-9]*:' '$T/$k.err' && [ ! -e '$T/$k.mlyze' ] && ! ls '$T/$k.mlyze'* 2>/dev/null"
done
check "broken: record past the end says so" grep -q "runs past the end of the file" "$T/past-end.err"
check "import: unknown format is a usage error" bash -c "'$MEMLYZE' import xml '$T/k.da' -o '$T/x.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
check "import: missing input: one line" bash -c "'$MEMLYZE' import dumpalloc '$T/nope' -o '$T/x.mlyze' 2>&1 | grep -q 'nope: No such file'"
finish
