#!/usr/bin/env bash
# gdb script (scripts/gdb/memlyze.py) on live processes: its reading of the
# payload's self-describing descriptor and its check word against the C ones; `memlyze
# snapshot` inside gdb writes the same sample set and the same symbolized
# stacks as `memlyze snapshot PID` at the same stop, exact and sampled;
# status, top, help and completion; one-line errors (no payload, another
# payload version, not attached, no process).
. "$(dirname "$0")/lib.sh"
export PYTHONDONTWRITEBYTECODE=1      # no __pycache__ next to the scripts
GDBPY="$ROOT/scripts/gdb/memlyze.py"
CANON="$ROOT/tests/e2e/dbg_canon.py"
LIB="$B/lib/libmemlyze.so"
if ! command -v gdb >/dev/null || ! gdb -nx -batch -ex 'python print(1)' >/dev/null 2>&1; then
    skip "gdb scripts" "gdb with Python not installed; make deps"
    finish
fi
one_error() {   # one_error OUTPUT WORDS: exactly one "memlyze:" line, containing WORDS, and no traceback
    [ "$(grep -c '^memlyze: ' <<<"$1")" -eq 1 ] && grep -q "^memlyze: .*$2" <<<"$1" && ! grep -q Traceback <<<"$1"
}
site() {        # site JSON FUNC: live bytes of the sites whose leaf frame is FUNC
    python3 -c "
import json, sys; d=json.load(open('$1'))
print(int(round(sum(s['live_bytes'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('$2 ')))))"
}
PYMOD="import importlib.util as u; s=u.spec_from_file_location('m', '$GDBPY'); m=u.module_from_spec(s); s.loader.exec_module(m)"

# 1. The Python check word and descriptor layout equal the C ones.
cat > "$T/chk.c" <<'EOF'
#include "info.h"
#include <stdio.h>
int main(void)
{
    unsigned long long k, s, t, q;
    unsigned a, b;
    while (scanf("%llu %llu %u %u %llu %llu", &k, &s, &a, &b, &t, &q) == 6)
        printf("%llu\n", (unsigned long long)memlyze_check_word(k, s, a, b, t, q));
    return 0;
}
EOF
cat > "$T/lay.c" <<'EOF'
/* The real payload's descriptor: does its field table tile the struct
 * exactly (every field listed once)? Then its bytes, its table's bytes,
 * and each field's value as C reads it, for the Python reader to match. */
#include "info.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
static void hex(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) printf("%02x", ((const unsigned char *)p)[i]);
    printf("\n");
}
int main(int argc, char **argv)
{
    void *h = argc > 1 ? dlopen(argv[1], RTLD_NOW) : NULL;
    const struct memlyze_info *in = h ? dlsym(h, MEMLYZE_INFO_SYMBOL) : NULL;
    if (!in) return fprintf(stderr, "no memlyze_info: %s\n", dlerror()), 1;
    const struct memlyze_field *f = (const void *)(uintptr_t)in->fields_addr;
    unsigned char seen[4096] = { 0 };
    for (uint32_t i = 0; i < in->nfields; i++)
        for (uint32_t b = f[i].offset; b < f[i].offset + f[i].width && b < sizeof seen; b++) seen[b]++;
    for (size_t b = 0; b < sizeof seen; b++)
        if (seen[b] != (b >= 32 && b < in->size))
            return fprintf(stderr, "byte %zu of memlyze_info is in %d fields of the table\n", b, seen[b]), 1;
    hex(in, in->size);
    hex(f, (size_t)in->nfields * in->field_size);
#define F(x) printf("%s %llu\n", #x, (unsigned long long)in->x);
    F(version) F(size) F(ready_addr) F(attached_addr) F(rate_addr) F(pid_addr) F(mono_to_real_addr)
    F(session_addr) F(map_slots_addr) F(map_mask_addr) F(stack_recs_addr) F(stack_frames_addr)
    F(stack_next_id_addr) F(counters_addr) F(counter_names_addr) F(entry_size) F(entry_key)
    F(entry_size_field) F(entry_stack_id) F(entry_tid_shift) F(entry_time_ns) F(entry_seq) F(entry_check)
    F(check_algorithm) F(rec_size) F(rec_ready) F(rec_depth) F(rec_frames_offset) F(max_frames)
    F(ncounters) F(map_log2_min) F(map_log2_max) F(entry_size_min) F(record_size_max) F(counters_max)
    F(sampler_tpoff_addr) F(sampler_countdown) F(sampler_initialized) F(sampler_rate_shift) F(sampler_pad)
    F(map_full_drops_addr)
    return 0;
}
EOF
cc -std=c11 -I"$ROOT/payload" -o "$T/chk" "$T/chk.c" || fail "build chk"
cc -std=c11 -I"$ROOT/payload" -o "$T/lay" "$T/lay.c" -ldl || fail "build lay"
python3 -c "
import random; r = random.Random(7); M = (1 << 64) - 1
rows = [(0x5555deadbeef, 16, 1, 1234, 1000, 1), (M - 5, M, 0xffffffff, 0xffffffff, M, M), (2, 0, 0, 0, 0, 0)]
rows += [(r.getrandbits(64), r.getrandbits(r.choice((8, 40, 64))), r.getrandbits(32), r.getrandbits(32),
          r.getrandbits(64), r.getrandbits(64)) for _ in range(500)]
print('\n'.join(' '.join(map(str, x)) for x in rows))" > "$T/chk.in"
"$T/chk" < "$T/chk.in" > "$T/chk.c.out"
python3 -c "$PYMOD
for l in open('$T/chk.in'):
    k, s, a, b, t, q = map(int, l.split()); print(m.heap_entry_check(k, s, a, b, t, q))" > "$T/chk.py.out"
check "check word: Python equals payload/info.h's memlyze_check_word on 503 inputs" \
    bash -c "[ \$(wc -l < '$T/chk.c.out') -eq 503 ] && cmp '$T/chk.c.out' '$T/chk.py.out'"
check "descriptor: its field table lists every field once" bash -c "MEMLYZE_MODE= '$T/lay' '$LIB' > '$T/lay.out'"
sed -n '3,$p' "$T/lay.out" | sort > "$T/lay.c.out"
python3 -c "$PYMOD
l = open('$T/lay.out').read().split('\n')
d = m.parse_info(bytes.fromhex(l[0]), bytes.fromhex(l[1]))
for n in sorted(d): print(n, d[n])" | sort > "$T/lay.py.out"
check "descriptor: Python reads every field by name as C does" \
    bash -c "[ \$(wc -l < '$T/lay.c.out') -ge 30 ] && diff '$T/lay.c.out' '$T/lay.py.out'"
check "descriptors of another magic, version, size or layout are refused; a later one is read by name" python3 -c "$PYMOD
import struct
l = open('$T/lay.out').read().split('\n')
good, table = bytes.fromhex(l[0]), bytes.fromhex(l[1])
ver, size, fa, nf, fs = m.parse_info_head(good)
names = [table[k * fs:k * fs + 24].split(b'\0')[0].decode() for k in range(nf)]
off = dict((n, struct.unpack_from('<II', table, k * fs + 24)) for k, n in enumerate(names))
def put(raw, name, v):
    o, w = off[name]
    return raw[:o] + v.to_bytes(w, 'little') + raw[o + w:]
def entry(k, name=None, o=None):
    e = table[k * fs:(k + 1) * fs]
    if name is not None: e = name.encode().ljust(24, b'\0') + e[24:]
    if o is not None: e = e[:24] + struct.pack('<I', o) + e[28:]
    return e
def bad(raw, tab, words):
    try:
        m.parse_info(raw, tab)
    except m.MlzError as e:
        assert str(e).startswith('payload version differs from the scripts') and words in str(e), str(e)
        return
    raise SystemExit('accepted: ' + words)
m.parse_info(good, table)
bad(b'MLZINFX' + good[7:], table, 'magic')
bad(good[:8] + struct.pack('<I', 3) + good[12:], table, 'version 3 predates')
bad(good[:24] + struct.pack('<I', 0) + good[28:], table, 'no field table')
k = names.index('entry_check')
bad(good, table[:k * fs] + entry(k, 'entry_chekk') + table[(k + 1) * fs:], 'lacks the field entry_check')
bad(good, table[:k * fs] + entry(k, o=size) + table[(k + 1) * fs:], 'field entry_check lies outside')
bad(put(good, 'check_algorithm', 1), table, 'check algorithm 1')
bad(put(good, 'entry_check', 60), table, 'layout')
bad(put(good, 'rec_size', 8192), table, 'layout')
# A later descriptor: one more field, and map_mask_addr moved to the end. Read by name, same values.
k = names.index('map_mask_addr')
later = good[:8] + struct.pack('<II', ver + 1, size + 16) + good[16:24] + struct.pack('<I', nf + 1) + good[28:]
later = later + good[off['map_mask_addr'][0]:off['map_mask_addr'][0] + 8] + (7).to_bytes(8, 'little')
ltab = table[:k * fs] + entry(k, o=size) + table[(k + 1) * fs:] + entry(0, 'a_later_field', size + 8)
a, b = m.parse_info(good, table), m.parse_info(later, ltab)
assert b.pop('a_later_field') == 7 and b.pop('version') == ver + 1 and b.pop('size') == size + 16
a.pop('version'); a.pop('size'); assert a == b, (a, b)
"

cc -O2 -g -pthread -o "$T/holder" "$ROOT/tests/targets/holder.c" || fail "build holder"
start_holder() {   # start_holder NAME RATE [ENV...]: sets HPID, HIN
    local name=$1 rate=$2; shift 2
    mkfifo "$T/in.$name"
    env "$@" MEMLYZE_RATE="$rate" MEMLYZE_SPOOL="$T/spool.$name" LD_PRELOAD="$LIB" \
        "$T/holder" 8 < "$T/in.$name" > "$T/out.$name" 2>&1 &
    HPID=$!
    exec {HIN}>"$T/in.$name"
    for _ in $(seq 100); do grep -q ready "$T/out.$name" 2>/dev/null && break; sleep 0.05; done
}
stop_holder() { exec {HIN}>&-; wait "$HPID"; }

# 2. Exact mode, 8 threads churning until gdb stops them: both writers read
# the same stopped process.
start_holder exact 1 MEMLYZE_MODE=got
cd "$T"
out=$(G -p "$HPID" -ex "source $GDBPY" -ex 'memlyze status' -ex "memlyze snapshot $T/gdb.mlyze" \
      -ex "shell '$MEMLYZE' snapshot -q -o '$T/cli.mlyze' $HPID" -ex 'memlyze top 5' \
      -ex 'memlyze snapshot' -ex 'memlyze snapshot' -ex "memlyze snapshot $T/gdb.mlyze" -ex 'memlyze top x' \
      -ex 'help memlyze' -ex 'help memlyze snapshot' -ex 'complete memlyze ' -ex 'complete memlyze attach --r' \
      -ex 'memlyze frob')
cd - >/dev/null
printf '%s\n' "$out" > "$T/gdb.exact.log"
check "gdb snapshot written" test -s "$T/gdb.mlyze"
check "gdb snapshot valid" "$MEMLYZE" validate "$T/gdb.mlyze"
check "gdb snapshot is of kind snapshot, rate 1" bash -c "python3 '$CANON' '$T/gdb.mlyze' --meta | grep -q 'kind=snapshot rate=1 pid=$HPID'"
python3 "$CANON" "$T/gdb.mlyze" --funcs '^(site_|churn$|main$)' > "$T/gdb.canon"
python3 "$CANON" "$T/cli.mlyze" --funcs '^(site_|churn$|main$)' > "$T/cli.canon"
check "same stop: gdb and memlyze snapshot PID have the same samples and stacks" \
    bash -c "[ \$(wc -l < '$T/gdb.canon') -ge 1124 ] && diff '$T/gdb.canon' '$T/cli.canon'"
# gdb names some frames otherwise (relative file names, inlines): memlyze
# diff still pairs the two files' samples, one session, the same heap.
check "same stop: memlyze diff of the two pairs every sample (growth 0, none born or died)" \
    bash -c "'$MEMLYZE' diff '$T/cli.mlyze' '$T/gdb.mlyze' | head -1 | grep -q 'growth 0 B ± 0 B (paired: 0 samples born, 0 died)'"
"$MEMLYZE" top --json -n 50 "$T/gdb.mlyze" > "$T/gdb.json"
for want in site_16:16000 site_4k:409600 site_64k:1310720 site_1m:4194304; do
    check "gdb snapshot: ${want%%:*} exact (${want#*:} B)" test "$(site "$T/gdb.json" "${want%%:*}")" = "${want#*:}"
done
check "status: attached, exact rate, tables" bash -c "grep -q '^state: attached (GOT mode)' <<<\"\$0\" &&
    grep -q 'rate 1 (exact' <<<\"\$0\" && grep -q '^counters: samples [1-9]' <<<\"\$0\" &&
    grep -q '^heap map: [0-9]* live entries in 1048576 slots' <<<\"\$0\" && grep -q '^stack table: [1-9]' <<<\"\$0\" &&
    grep -q '^Bloom filter: ' <<<\"\$0\"" "$out"
check "top in gdb: site_1m first, 4.00 MiB in 4 objects" bash -c "grep -A1 '^rank  live bytes' <<<\"\$0\" |
    grep -q '^   1  4.00 MiB .* 4        4  site_1m (holder.c:'" "$out"
check "top in gdb: caller frames follow the site" bash -c "grep -A1 'site_1m (holder.c' <<<\"\$0\" | grep -q '<- main (holder.c:'" "$out"
check "default names count up: memlyze.PID.1 and .2" test -s "$T/memlyze.$HPID.1.mlyze" -a -s "$T/memlyze.$HPID.2.mlyze"
check "an existing file is not replaced: one-line error" one_error "$(grep 'exists' <<<"$out")" "gdb.mlyze exists: not replaced"
check "bad top argument: usage line" bash -c "grep -q '^memlyze: usage: memlyze top \[N\]' <<<\"\$0\"" "$out"
check "unknown subcommand: one line" bash -c "grep -q \"^memlyze: unknown command 'frob'\" <<<\"\$0\"" "$out"
check "help memlyze lists every subcommand" bash -c "for c in status snapshot top attach detach; do
    grep -q \"^memlyze \$c\" <<<\"\$0\" || exit 1; done" "$out"
check "help memlyze snapshot: usage" bash -c "grep -q '^Usage: memlyze snapshot \[FILE\]' <<<\"\$0\"" "$out"
check "completion: subcommands" bash -c "for c in status snapshot top attach detach; do
    grep -qx \"memlyze \$c\" <<<\"\$0\" || exit 1; done" "$out"
check "completion: attach options" bash -c "grep -qx 'memlyze attach --rate' <<<\"\$0\"" "$out"
check "no Python traceback anywhere" bash -c "! grep -q Traceback <<<\"\$0\"" "$out"
stop_holder
check "target output unchanged under gdb" test "$(tail -1 "$T/out.exact")" = "held 1124"

# 3. Sampled mode: the same samples, and intervals in top.
start_holder sampled 65536 MEMLYZE_MODE=got
out=$(G -p "$HPID" -ex "source $GDBPY" -ex "memlyze snapshot $T/gs.mlyze" \
      -ex "shell '$MEMLYZE' snapshot -q -o '$T/cs.mlyze' $HPID" -ex 'memlyze top 3')
python3 "$CANON" "$T/gs.mlyze" --funcs '^(site_|churn$|main$)' > "$T/gs.canon"
python3 "$CANON" "$T/cs.mlyze" --funcs '^(site_|churn$|main$)' > "$T/cs.canon"
check "sampled: same samples and stacks as memlyze snapshot PID" bash -c "[ -s '$T/gs.canon' ] && diff '$T/gs.canon' '$T/cs.canon'"
check "sampled: top shows 95% intervals" bash -c "grep -q '^   1  .* ± ' <<<\"\$0\"" "$out"
stop_holder

# 3a. A heap map too small for the samples: gdb's snapshot carries the
# map's drops too, so its reports say the estimates are low.
start_holder small 2 MEMLYZE_MODE=got MEMLYZE_MAP_LOG2=8
G -p "$HPID" -ex "source $GDBPY" -ex "memlyze snapshot $T/gsmall.mlyze" > /dev/null
check "map full: gdb's snapshot says samples were given up" \
    bash -c "'$MEMLYZE' top '$T/gsmall.mlyze' | grep -q 'samples given up (estimates are low)'"
stop_holder

# 3b. A rate the churn overloads (16 B, 8 threads): the payload raises it.
# Both writers give each sample the rate it was taken at (a rate MARKER
# before it), the same for every sample.
start_holder raised 16 MEMLYZE_MODE=got
for _ in $(seq 20); do
    G -p "$HPID" -ex "source $GDBPY" -ex 'memlyze status' | grep -q ' rate_shift [1-9]' && break
    sleep 0.5
done
out=$(G -p "$HPID" -ex "source $GDBPY" -ex "memlyze snapshot $T/gr.mlyze" \
      -ex "shell '$MEMLYZE' snapshot -q -o '$T/cr.mlyze' $HPID" -ex 'memlyze status')
python3 "$CANON" "$T/gr.mlyze" --funcs '^(site_|churn$|main$)' > "$T/gr.canon"
python3 "$CANON" "$T/cr.mlyze" --funcs '^(site_|churn$|main$)' > "$T/cr.canon"
check "raised rate: the payload raised it" bash -c "grep -q ' rate_shift [1-9]' <<<\"\$0\"" "$out"
check "raised rate: samples taken after it carry it" grep -qv ' rate 16 |' "$T/gr.canon"
check "raised rate: gdb and memlyze snapshot PID agree, rates included" \
    bash -c "[ -s '$T/gr.canon' ] && diff '$T/gr.canon' '$T/cr.canon'"
check "raised rate: the gdb snapshot validates" "$MEMLYZE" validate "$T/gr.mlyze"
shift=$(grep -o ' rate_shift [0-9]*' <<<"$out" | awk '{ print $2 }')
check "raised rate: top of the gdb snapshot says to which rate ($((16 << ${shift:-0})) bytes)" \
    bash -c "'$MEMLYZE' top '$T/gr.mlyze' | grep -q 'sampling rate raised $((1 << ${shift:-0}))x, to $((16 << ${shift:-0})) bytes'"
stop_holder

# 4. One-line errors.
sleep 60 & SPID=$!
out=$(G -p "$SPID" -ex "source $GDBPY" -ex 'memlyze snapshot x.mlyze')
check "no payload: one line" one_error "$out" "no memlyze payload in this process"
kill "$SPID"; wait "$SPID" 2>/dev/null
cc -O1 -g -I"$ROOT/payload" -o "$T/badinfo" "$ROOT/tests/targets/dbg_badinfo.c" || fail "build badinfo"
NEXT_VERSION=$(( $(awk '$1 == "version" { print $2; exit }' "$T/lay.c.out") + 1 ))   # the first: its value
mkfifo "$T/in.bad"
"$T/badinfo" < "$T/in.bad" > "$T/out.bad" & BPID=$!
exec {BIN}>"$T/in.bad"
for _ in $(seq 100); do grep -q ready "$T/out.bad" 2>/dev/null && break; sleep 0.05; done
out=$(G -p "$BPID" -ex "source $GDBPY" -ex 'memlyze status' -ex "memlyze snapshot $T/bad.mlyze")
check "another descriptor version: refused, one line each" bash -c "[ \$(grep -c '^memlyze: payload version differs from the scripts: memlyze_info version $NEXT_VERSION' <<<\"\$0\") -eq 2 ]" "$out"
check "another descriptor version: no file written" test ! -e "$T/bad.mlyze"
exec {BIN}>&-; wait "$BPID"
start_holder loaded 1 MEMLYZE_MODE=
out=$(G -p "$HPID" -ex "source $GDBPY" -ex "memlyze snapshot $T/na.mlyze" -ex 'memlyze status')
check "loaded, not attached: one-line error" one_error "$(grep -v '^memlyze payload:' <<<"$out")" "loaded in process $HPID but not attached"
check "loaded, not attached: status says so" bash -c "grep -q '^state: loaded, not attached' <<<\"\$0\"" "$out"
stop_holder
out=$(G "$T/holder" -ex "source $GDBPY" -ex 'memlyze top')
check "no process: one line" one_error "$out" "no process"
finish
