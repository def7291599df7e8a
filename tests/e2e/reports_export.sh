#!/usr/bin/env bash
# memlyze export, checked by real consumers: pprof by protoc with the published
# profile.proto and by the pprof tool itself, speedscope against its published
# JSON schema, our JSON against tests/e2e/reports/export-schema.json; values
# against known truths (exact mode), --at against a reference replay of the
# dump text.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/e2e/reports/lib_reports.sh"

known_trace "$T/k.mlyze"
fixture "$T/f.mlyze"
check "help" bash -c "'$MEMLYZE' export --help | grep -q '^usage: memlyze export'"

# ---- pprof
check "pprof: export" "$MEMLYZE" export --format pprof -o "$T/k.pb.gz" "$T/k.mlyze"
check "pprof: format implied by .pb.gz" "$MEMLYZE" export -o "$T/f.pb.gz" "$T/f.mlyze"
check "pprof: gzip'd" gzip -t "$T/k.pb.gz"
if command -v protoc >/dev/null; then
    decode() { zcat "$1" | protoc --decode perftools.profiles.Profile -I "$R" profile.proto; }
    check "pprof: protoc decodes it with the published profile.proto" bash -c "$(declare -f decode); R='$R'; decode '$T/k.pb.gz' > '$T/k.txt'"
    check "pprof: known.c exact: site_malloc inuse_space is exactly 100000, Go heap convention, ids and addresses consistent" \
        "$PY" "$R/pprof_check.py" "$T/k.txt" --rate 1 --expect site_malloc inuse_space 100000 \
        --expect site_malloc inuse_objects 100 --expect site_malloc alloc_space 100000 \
        --expect site_thread inuse_space 200000 --expect site_calloc inuse_space 50000 \
        --expect site_realloc inuse_space 60000 --expect churn inuse_space 0
    check "pprof: churn allocated 4 x 20000 + 20000 times, none live" \
        bash -c "'$PY' '$R/pprof_check.py' '$T/k.txt' | grep -q '^churn alloc_objects=100000 .* inuse_objects=0 inuse_space=0$'"
    decode "$T/f.pb.gz" > "$T/f.txt"
    check "pprof: fixture: inlined frame is a second line of one location; two stacks of grow_site are one sample" \
        "$PY" "$R/pprof_check.py" "$T/f.txt" --rate 1 --inline-location --expect grow_site inuse_space 5000 \
        --expect grow_site inuse_objects 3 --expect inner alloc_objects 2 --expect inner inuse_space 200
    check "pprof: location address = load bias + module-relative address (PIE and non-PIE)" \
        bash -c "grep -q 'address: 139637976732212' '$T/f.txt' && grep -q 'address: 4198964' '$T/f.txt'"
    check "pprof: mappings carry build ids; time_nanos is the header's start" \
        bash -c "grep -q 'string_table: \"00aa11bb22cc33dd44ee55ff6677889900112233\"' '$T/f.txt' && grep -q 'time_nanos: 1700000000000000000' '$T/f.txt'"
    # A sampled trace: the values are the same unbiased estimates the JSON export gives.
    known_trace "$T/ks.mlyze" 65536
    "$MEMLYZE" export --format pprof -o "$T/ks.pb.gz" "$T/ks.mlyze"
    "$MEMLYZE" export --format json -o "$T/ks.json" "$T/ks.mlyze"
    decode "$T/ks.pb.gz" > "$T/ks.txt"
    check "pprof: sampled: period = rate, inuse_space = the rounded estimates" bash -c "'$PY' - <<'EOF'
import json, subprocess
d = json.load(open('$T/ks.json'))
want = {}
for s in d['sites']:
    leaf = s['frames'][0]['function'] if s['frames'] else '?'
    want[leaf] = want.get(leaf, 0) + round(s['live_bytes'])
out = subprocess.run(['$PY', '$R/pprof_check.py', '$T/ks.txt', '--rate', '65536'], capture_output=True, text=True)
assert out.returncode == 0, out.stdout
got = {l.split()[0]: int(l.split('inuse_space=')[1]) for l in out.stdout.splitlines()}
for leaf, v in want.items():
    assert abs(got.get(leaf, 0) - v) <= 1, (leaf, got.get(leaf), v)
EOF"
else
    skip "pprof decoded by protoc" "protoc not installed; Debian package protobuf-compiler"
fi

# The pprof tool itself, built from Debian's golang-github-google-pprof-dev.
PPROF="$B/tools/pprof"
if [ ! -x "$PPROF" ] && command -v go >/dev/null && [ -d /usr/share/gocode/src/github.com/google/pprof ]; then
    mkdir -p "$B/tools"
    GOPATH=/usr/share/gocode GO111MODULE=off GOCACHE="$B/tools/gocache" GOFLAGS= \
        go build -o "$PPROF" github.com/google/pprof >"$T/go.log" 2>&1 || rm -f "$PPROF"
fi
if [ -x "$PPROF" ]; then
    check "pprof tool: -top ranks site_thread, site_malloc by inuse_space" bash -c \
        "'$PPROF' -top -sample_index=inuse_space '$T/k.pb.gz' 2>/dev/null | grep -A2 'flat%' | tail -2 | awk '{print \$NF}' | tr '\n' ' ' | grep -q '^site_thread site_malloc '"
    check "pprof tool: total is the live heap" bash -c \
        "'$PPROF' -raw '$T/f.pb.gz' 2>/dev/null | grep -q 'inuse_space/bytes\[dflt\]' && '$PPROF' -top -sample_index=inuse_space -unit=byte '$T/f.pb.gz' 2>/dev/null | grep -q 'of 5212B total'"
    check "pprof tool: the inlined frame shows as inline" bash -c \
        "'$PPROF' -traces -sample_index=inuse_space '$T/f.pb.gz' 2>/dev/null | grep -q 'inner (inline)'"
    check "pprof tool: mappings with build ids" bash -c \
        "'$PPROF' -raw '$T/f.pb.gz' 2>/dev/null | grep -q '/lib/libx.so feedface'"
else
    skip "pprof tool reads the export" "pprof not available; Debian packages golang-go golang-github-google-pprof-dev"
fi

# ---- speedscope
check "speedscope: export" "$MEMLYZE" export --format speedscope -o "$T/k.speedscope.json" "$T/k.mlyze"
"$MEMLYZE" export --format speedscope -o "$T/f.speedscope.json" "$T/f.mlyze"
if [ "$HAVE_JSONSCHEMA" = 1 ]; then
    for n in k f; do
        check "speedscope: $n validates against the published file-format schema" "$PY" -c "
import json, jsonschema
jsonschema.validate(json.load(open('$T/$n.speedscope.json')), json.load(open('$R/speedscope-schema.json')))"
    done
else
    skip "speedscope schema" "python3 jsonschema not installed; Debian package python3-jsonschema"
fi
check "speedscope: shared frames, stacks root first, live bytes add up to 100000 for site_malloc" "$PY" -c "
import json
d = json.load(open('$T/k.speedscope.json'))
fr = d['shared']['frames']
names = [p['name'] for p in d['profiles']]
assert names == ['k.mlyze: live bytes', 'k.mlyze: allocated bytes', 'k.mlyze: live objects', 'k.mlyze: allocations'], names
live = d['profiles'][0]
assert len(live['samples']) == len(live['weights'])
assert all(0 <= i < len(fr) for s in live['samples'] for i in s)
w = [wt for s, wt in zip(live['samples'], live['weights']) if fr[s[-1]]['name'] == 'site_malloc']
assert w == [100000], w
assert all(fr[s[0]]['name'] in ('_start', '__clone3') for s in live['samples']), 'not root first'
assert live['endValue'] == sum(live['weights']) and live['unit'] == 'bytes'
"
check "speedscope: names with quotes, ';', '<', UTF-8 survive" "$PY" -c "
import json
fr = [f['name'] for f in json.load(open('$T/f.speedscope.json'))['shared']['frames']]
assert 'std::vector<int>::push;back&\"x\"' in fr and 'na\u00efve_\u00fc' in fr, fr"

# ---- folded
"$MEMLYZE" export --format folded "$T/k.mlyze" > "$T/k.folded"
check "folded: ...;site_malloc 100000 (root first)" grep -qE '^_start;([^ ]*;)?main;site_malloc 100000$' "$T/k.folded"
check "folded: every line is 'frames value'" bash -c "! grep -vqE '^[^ ].* [0-9]+$' '$T/k.folded'"
check "folded: --metric allocated" bash -c "'$MEMLYZE' export --format folded --metric allocated '$T/k.mlyze' | grep -qE ';worker;churn 10520000$'"
check "folded: --metric count" bash -c "'$MEMLYZE' export --format folded --metric count '$T/k.mlyze' | grep -qE ';main;site_malloc 100$'"
"$MEMLYZE" export -o "$T/f.folded" "$T/f.mlyze" 2>/dev/null || "$MEMLYZE" export --format folded -o "$T/f.folded" "$T/f.mlyze"
check "folded: fixture exactly (sites merged by symbol, inline suffix, ';' made harmless)" diff - "$T/f.folded" <<'EOF'
_start;main;grow_site 5000
_start;main;naïve_ü 5
_start;main;outer;inner_[i] 200
_start;main;std::vector<int>::push:back&"x" 7
EOF

# ---- json
"$MEMLYZE" export --format json -o "$T/k.json" "$T/k.mlyze"
"$MEMLYZE" export -o "$T/f.json" "$T/f.mlyze"
if [ "$HAVE_JSONSCHEMA" = 1 ]; then
    for n in k f ks; do
        [ -f "$T/$n.json" ] || continue
        check "json: $n validates against export-schema.json" "$PY" -c "
import json, jsonschema
jsonschema.validate(json.load(open('$T/$n.json')), json.load(open('$R/export-schema.json')))"
    done
fi
check "json: exact values, intervals zero, frames with addresses" "$PY" -c "
import json
d = json.load(open('$T/f.json'))
s = {x['frames'][0]['function']: x for x in d['sites']}
assert s['grow_site']['live_bytes'] == 5000 and s['grow_site']['live_count'] == 3 and s['grow_site']['live_bytes_ci95'] == 0
assert s['inner']['alloc_bytes'] == 300 and s['inner']['frames'][0]['inlined'] and s['inner']['frames'][0]['address'] == 0x7f0000001234
assert d['totals']['live_bytes'] == 5212 and d['rate'] == 1 and d['sites'][0]['frames'][0]['function'] == 'grow_site'
"

# ---- --at: the live heap at a moment, against a replay of the dump text.
"$MEMLYZE" dump "$T/k.mlyze" > "$T/k.dump"
cat > "$T/ref.py" <<'EOF'
import sys
def live_at(dump, t):
    live, total = {}, 0
    for line in open(dump):
        f = dict(kv.split('=', 1) for kv in line.split()[1:] if '=' in kv)
        if line.startswith('alloc ') and int(f['t']) <= t:
            live[f['addr']] = int(f['size'])
        elif line.startswith('free ') and int(f['t']) <= t:
            live.pop(f['addr'], None)
    return sum(live.values())
print(live_at(sys.argv[1], int(sys.argv[2])))
EOF
start=$(awk '/^header/ { sub(/.*start_us=/, ""); print $1 }' "$T/k.dump")
mid=$(grep '^alloc ' "$T/k.dump" | sed -n '30000p' | sed 's/.* t=\([0-9]*\).*/\1/')
json_live() { "$MEMLYZE" export --format json --at "$1" "$2" | "$PY" -c 'import json,sys; print(round(json.load(sys.stdin)["totals"]["live_bytes"]))'; }
check "--at absolute µs: live heap matches a reference replay" test "$(json_live "$mid" "$T/k.mlyze")" = "$("$PY" "$T/ref.py" "$T/k.dump" "$mid")"
secs=$("$PY" -c "print(($mid - $start) / 1e6)")
check "--at seconds since the start: the same moment" test "$(json_live "$secs" "$T/k.mlyze")" = "$("$PY" "$T/ref.py" "$T/k.dump" "$mid")"
check "--at on the fixture: +1 ms holds 2112 bytes, +0 none" bash -c \
    "[ \$('$MEMLYZE' export --format folded --at 0.001 '$T/f.mlyze' | awk '{s+=\$NF} END {print s}') = 2112 ] && [ -z \"\$('$MEMLYZE' export --format folded --at 0 '$T/f.mlyze')\" ]"
if command -v protoc >/dev/null; then
    check "--at: pprof describes the moment (duration, values)" bash -c "'$MEMLYZE' export -f pprof --at 0.001 -o '$T/at.pb.gz' '$T/f.mlyze' && zcat '$T/at.pb.gz' | protoc --decode perftools.profiles.Profile -I '$R' profile.proto > '$T/at.txt' && grep -q 'duration_nanos: 1000000$' '$T/at.txt' && '$PY' '$R/pprof_check.py' '$T/at.txt' --expect grow_site inuse_space 2000 --expect inner inuse_space 100 >/dev/null"
fi

# ---- errors: one line, usage errors exit 2, no partial output
out=$("$MEMLYZE" export "$T/k.mlyze" 2>&1); rc=$?
check "no --format: usage error" bash -c "[ $rc -eq 2 ] && printf '%s' \"$out\" | grep -q 'need --format'"
check "bad --format: exit 2" bash -c "'$MEMLYZE' export --format xml '$T/k.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
check "--metric with pprof: exit 2" bash -c "'$MEMLYZE' export -f pprof --metric count -o '$T/x.pb.gz' '$T/k.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
check "bad --at: exit 2" bash -c "'$MEMLYZE' export -f json --at soon '$T/k.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
out=$("$MEMLYZE" export -f json --at 1000000000000 "$T/k.mlyze" 2>&1); rc=$?
check "--at before the recording: one line, exit 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ]"
out=$("$MEMLYZE" export -f json "$T/missing.mlyze" 2>&1); rc=$?
check "missing file: one line, exit 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ]"
out=$("$MEMLYZE" export -f json -o "$T/no/such/dir/x.json" "$T/k.mlyze" 2>&1); rc=$?
check "unwritable output: one line, exit 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ]"
check "no temporary files left" bash -c "! ls '$T' | grep -q '\.tmp$'"
finish
