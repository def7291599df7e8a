#!/usr/bin/env bash
# memlyze run in exact mode (rate 1) on a program with known allocation
# sites: every site's live bytes must match exactly, with frame pointers and
# without them (the DWARF unwinder must still reach main), and through
# libc's strdup and realloc.
. "$(dirname "$0")/lib.sh"

site_bytes() {   # site_bytes FILE.json FUNCTION -> live bytes of the site whose leaf frame is FUNCTION
    python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
total = 0
for s in d["sites"]:
    if any(f.startswith(sys.argv[2] + " ") for f in s["frames"][:2]):
        total += s["live_bytes"]
print(int(round(total)))
PY
}

# Variants: built with and without frame pointers (the default DWARF
# unwinder must reach main either way), the frame-pointer unwinder on the
# frame-pointer build, and GOT patching (--got, the path memlyze-attach
# uses) instead of LD_PRELOAD interposition: all must give the same numbers.
cc -O2 -g -fno-omit-frame-pointer -pthread -o "$T/known-fp" "$ROOT/tests/targets/known.c" || fail "build known-fp"
cc -O2 -g -fomit-frame-pointer -pthread -o "$T/known-nofp" "$ROOT/tests/targets/known.c" || fail "build known-nofp"
for name in fp nofp fpwalk got; do
    case $name in
        fp) args=; bin=known-fp ;;
        nofp) args=; bin=known-nofp ;;
        fpwalk) args="--unwind fp"; bin=known-fp ;;
        got) args=--got; bin=known-nofp ;;
    esac
    out=$("$MEMLYZE" run $args -r 1 -o "$T/$name.mlyze" -- "$T/$bin" 2>"$T/$name.err")
    check "run $name: program output unchanged" test "$out" = "known: 580 blocks held"
    check "run $name: valid trace" "$MEMLYZE" validate "$T/$name.mlyze"
    "$MEMLYZE" top --json -n 100 --frames 8 "$T/$name.mlyze" > "$T/$name.json"
    for want in site_malloc:100000 site_calloc:50000 site_thread:200000 site_realloc:60000; do
        fn=${want%%:*}; bytes=${want#*:}
        got=$(site_bytes "$T/$name.json" "$fn")
        check "run $name: $fn live bytes exact ($bytes)" test "$got" = "$bytes"
    done
    # strdup is inside libc: its allocations are seen, strdup as the leaf,
    # and (except for the frame-pointer walker: libc has no frame pointers)
    # our site as its caller.
    got=$(python3 -c "
import json; d=json.load(open('$T/$name.json'))
print(int(sum(s['live_bytes'] for s in d['sites'] if 'strdup' in s['frames'][0])))")
    check "run $name: strdup seen through libc (90 bytes)" test "$got" = "90"
    if [ $name != fpwalk ]; then
        check "run $name: strdup's caller is site_strdup" python3 -c "
import json, sys; d=json.load(open('$T/$name.json'))
sys.exit(0 if any('strdup' in s['frames'][0] and s['frames'][1].startswith('site_strdup') for s in d['sites']) else 1)"
    fi
    # The full chain reaches main even without frame pointers.
    check "run $name: chain site_malloc -> main" python3 -c "
import json, sys; d=json.load(open('$T/$name.json'))
ok = any(s['frames'][0].startswith('site_malloc') and any(f.startswith('main ') for f in s['frames']) for s in d['sites'])
sys.exit(0 if ok else 1)"
    # 100k churned blocks were freed: live is the 580 held blocks plus the
    # few libc keeps (stdio buffer, thread bookkeeping), every free matched.
    check "run $name: every free matched, nothing churned left live" python3 -c "
import json, sys; d=json.load(open('$T/$name.json'))
sys.exit(0 if 578 <= d['live_samples'] <= 600 else 1)"
    check "run $name: no unmatched frees" bash -c "! '$MEMLYZE' stats '$T/$name.mlyze' | grep -q unmatched"
done

# No churned block may look live in any variant.
for name in fp nofp got; do
    check "run $name: no churn site left live" python3 -c "
import json, sys; d=json.load(open('$T/$name.json'))
sys.exit(1 if any(s['frames'][0].startswith('churn') for s in d['sites']) else 0)"
done

# Exact mode's rings are small (2048 records): the push that fills one to
# half wakes the drain thread, so a thread allocating as fast as it can
# seldom waits for room (without the wake: one wait every ~2200 events on
# an idle machine). How often it still waits depends on the machine's load
# (the drain thread needs a CPU), so the test checks the mechanism: under
# strace, the allocating thread issues futex wakes (472 in 600k events
# measured; 0 without the wake), and the trace stays whole.
cc -O2 -o "$T/churn" "$ROOT/bench/workloads/churn.c" -lpthread || fail "build churn"
strace -f -qq -e trace=futex -o "$T/churn.futex" \
    "$MEMLYZE" run -r 1 -o "$T/churn.mlyze" -- "$T/churn" threads 1 300000 >/dev/null 2>&1
"$MEMLYZE" stats "$T/churn.mlyze" > "$T/churn.stats"
ev=$(awk '$1 == "events_written" { print $2 }' "$T/churn.stats")
waits=$(awk '$1 == "ring_waits" { print $2 }' "$T/churn.stats")
wakes=$(grep -c 'FUTEX_WAKE' "$T/churn.futex")
echo "exact churn: ${ev:-?} events, ${waits:-?} waits for room, $wakes futex wakes"
check "exact churn: the allocating thread wakes the drain thread ($wakes wakes)" test "$wakes" -ge 50
check "exact churn: every event written" test "${ev:-0}" = 600006
# Blocks allocated by two threads and freed by two others: each FREE is in
# another ring than its ALLOC, so only a time-ordered merge of the rings
# (the drain thread's runs, events.c) keeps every FREE after its ALLOC.
# Emitting each ring whole instead left 230492 of 400000 frees unmatched.
cc -O2 -pthread -o "$T/handoff" "$ROOT/tests/targets/handoff.c" || fail "build handoff"
out=$("$MEMLYZE" run -r 1 -o "$T/handoff.mlyze" -- "$T/handoff" 200000 2>/dev/null)
check "handoff: program ran" test "$out" = "handoff: 200000 blocks"
"$MEMLYZE" stats "$T/handoff.mlyze" > "$T/handoff.stats"
check "handoff: no unmatched frees" bash -c "! grep -q '^unmatched frees' '$T/handoff.stats'"
hev=$(awk '$1 == "events_written" { print $2 }' "$T/handoff.stats")
check "handoff: every event written (${hev:-?})" test "${hev:-0}" -ge 400000
live=$("$MEMLYZE" top --json -n 100 "$T/handoff.mlyze" | python3 -c "
import json, sys; d = json.load(sys.stdin)
print(sum(1 for s in d['sites'] if any(f.startswith('produce (') for f in s['frames'][:3])))")
check "handoff: no handed-off block left live ($live sites)" test "$live" = 0
# Sampled mode on the same program: still a valid, symbolized trace.
"$MEMLYZE" run -o "$T/sampled.mlyze" -- "$T/known-fp" >/dev/null 2>&1
check "run sampled: valid trace" "$MEMLYZE" validate "$T/sampled.mlyze"
check "run: exit status of the program is kept" bash -c "'$MEMLYZE' run -o '$T/f.mlyze' -- false 2>/dev/null; [ \$? -eq 1 ]"
check "run: missing program is a clean error" bash -c "'$MEMLYZE' run -o '$T/g.mlyze' -- /nonexistent 2>&1 | grep -q 'cannot run'"
finish
