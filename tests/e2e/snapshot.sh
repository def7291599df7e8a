#!/usr/bin/env bash
# memlyze snapshot PID: the live heap read from outside while 16 threads
# churn. In exact mode every held site must match the truth exactly (no torn
# or lost entries), the program's output must not change, default names
# never overwrite, and bad targets get one-line errors.
. "$(dirname "$0")/lib.sh"
cc -O2 -g -pthread -o "$T/holder" "$ROOT/tests/targets/holder.c" || fail "build holder"
LIB="$B/lib/libmemlyze.so"

start_holder() {   # start_holder RATE: starts it with the payload in GOT mode; sets HPID, HIN
    mkfifo "$T/in.$1"
    MEMLYZE_MODE=got MEMLYZE_RATE=$1 MEMLYZE_SPOOL="$T/spool.$1" LD_PRELOAD="$LIB" \
        "$T/holder" 16 < "$T/in.$1" > "$T/out.$1" &
    HPID=$!
    exec {HIN}>"$T/in.$1"
    for _ in $(seq 100); do grep -q ready "$T/out.$1" 2>/dev/null && break; sleep 0.05; done
}
site() {
    python3 -c "
import json, sys; d=json.load(open('$1'))
print(int(round(sum(s['live_bytes'] for s in d['sites'] if s['frames'][0].startswith('$2 ')))))"
}

start_holder 1
for n in 1 2 3; do
    out=$("$MEMLYZE" snapshot -o "$T/snap$n.mlyze" "$HPID")
    check "snapshot $n written while 16 threads churn" test -s "$T/snap$n.mlyze"
    check "snapshot $n valid" "$MEMLYZE" validate "$T/snap$n.mlyze"
    "$MEMLYZE" top --json -n 50 "$T/snap$n.mlyze" > "$T/snap$n.json"
    for want in site_16:16000 site_4k:409600 site_64k:1310720 site_1m:4194304; do
        check "snapshot $n: ${want%%:*} exact (${want#*:} B)" test "$(site "$T/snap$n.json" "${want%%:*}")" = "${want#*:}"
    done
done
check "snapshot is of kind snapshot" bash -c "'$MEMLYZE' stats '$T/snap1.mlyze' | grep -q 'kind: *snapshot'"
# Read while 16 threads churn: not one instant. The reports say how long,
# and how many of the objects were born meanwhile (freed ones may be there too).
check "a snapshot of a churning program says it was read while the program ran" bash -c \
    "'$MEMLYZE' stats '$T/snap1.mlyze' | grep -Eq '^warning: .*heap was read while the program ran \([0-9.]+ ms\): [1-9][0-9]* of these objects were born meanwhile'"
# With two CPUs a second thread loads the symbols while the map is read;
# on one it is not started. The frames (function, file:line, inlines) of
# every exact site must be the same either way.
frames() {
    python3 -c "
import json; d=json.load(open('$1'))
for s in sorted(d['sites'], key=lambda s: s['frames'][0]):
    if s['frames'][0].split(' ')[0] in ('site_16', 'site_4k', 'site_64k', 'site_1m'): print(s['frames'])"
}
if [ "$(nproc)" -ge 2 ]; then
    strace -f -qq -e trace=clone,clone3 -o "$T/two.strace" "$MEMLYZE" snapshot -q -o "$T/two.mlyze" "$HPID"
    check "two CPUs: symbols load on a second thread" grep -q clone "$T/two.strace"
    strace -f -qq -e trace=clone,clone3 -o "$T/one.strace" taskset -c 0 "$MEMLYZE" snapshot -q -o "$T/one.mlyze" "$HPID"
    check "one CPU: no second thread" bash -c "! grep -q clone '$T/one.strace'"
    "$MEMLYZE" top --json -n 50 "$T/two.mlyze" > "$T/two.json"
    "$MEMLYZE" top --json -n 50 "$T/one.mlyze" > "$T/one.json"
    frames "$T/one.json" > "$T/one.frames"
    frames "$T/two.json" > "$T/two.frames"
    check "symbolized alike with and without the second thread" \
        bash -c "[ \$(wc -l < '$T/one.frames') -eq 4 ] && cmp '$T/one.frames' '$T/two.frames'"
else
    skip "symbols on a second thread" "one CPU"
fi
cd "$T"
"$MEMLYZE" snapshot -q "$HPID" && "$MEMLYZE" snapshot -q "$HPID"
check "default names count up, never overwrite" test -s "memlyze.$HPID.1.mlyze" -a -s "memlyze.$HPID.2.mlyze"
cd - >/dev/null
exec {HIN}>&-
wait "$HPID"
check "target output unchanged by snapshots" test "$(tail -1 "$T/out.1")" = "held 1124"

# Sampled mode: still a valid snapshot naming the big sites.
start_holder 65536
"$MEMLYZE" snapshot -q -o "$T/sampled.mlyze" "$HPID"
"$MEMLYZE" top --json -n 50 "$T/sampled.mlyze" > "$T/sampled.json"
check "sampled snapshot names site_1m" test "$(site "$T/sampled.json" site_1m)" -gt 0
check "a complete snapshot says nothing was lost" bash -c "! '$MEMLYZE' top '$T/sampled.mlyze' | grep -q 'lost'"
exec {HIN}>&-
wait "$HPID"

# A heap map too small for the samples (256 slots for 1124 held blocks):
# the snapshot misses some, and its reports say the estimates are low. They
# said nothing. (The payload sizes the map from the rate: 64 Ki slots at
# 512 KiB, up to 1 Mi at 32 KiB and below.)
MEMLYZE_MAP_LOG2=8 start_holder 2
"$MEMLYZE" snapshot -q -o "$T/small.mlyze" "$HPID"
check "map full: top says samples were given up" bash -c "'$MEMLYZE' top '$T/small.mlyze' | grep -q 'samples given up (estimates are low)'"
check "map full: stats too" bash -c "'$MEMLYZE' stats '$T/small.mlyze' | grep -q '^warning: .*samples given up'"
exec {HIN}>&-
wait "$HPID"

# One-line errors.
sleep 30 & SPID=$!
out=$("$MEMLYZE" snapshot -o "$T/x.mlyze" "$SPID" 2>&1); rc=$?
check "no payload: one line, exit 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ] && printf '%s' \"$out\" | grep -q 'not loaded'"
kill "$SPID"
out=$("$MEMLYZE" snapshot -o "$T/x.mlyze" 999999999 2>&1); rc=$?
check "no such process: exit 1" bash -c "[ $rc -eq 1 ] && printf '%s' \"$out\" | grep -q 'no process'"
check "bad pid: usage error" bash -c "'$MEMLYZE' snapshot abc 2>/dev/null; [ \$? -eq 2 ]"
check "no partial file left behind" bash -c "! test -e '$T/x.mlyze'"
# An existing -o is refused before the process is even looked at (this
# pid has no payload: reading it first would say so instead).
sleep 30 & SPID=$!
echo keep > "$T/kept.mlyze"
out=$("$MEMLYZE" snapshot -o "$T/kept.mlyze" "$SPID" 2>&1); rc=$?
kill "$SPID"
check "existing -o: one line naming the file, exit 1, file kept" bash -c \
    "[ $rc -eq 1 ] && printf '%s' \"$out\" | grep -q 'kept.mlyze: File exists' && [ \"\$(cat '$T/kept.mlyze')\" = keep ]"
finish
