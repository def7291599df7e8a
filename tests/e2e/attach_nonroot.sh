#!/usr/bin/env bash
# An ordinary user profiles their own process: memlyze-attach, memlyze
# snapshot and memlyze-detach, run as `nobody`, on a process of `nobody`.
# Such a user cannot open /proc/PID/map_files, so every tool must find the
# memfd-loaded payload the same way (proc/: the memfd the process holds,
# else the image in memory). A second target closed its memfd: the payload
# is then readable from memory only.
. "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null || ! id nobody >/dev/null 2>&1; then
    skip "attach, snapshot and detach as an ordinary user" "needs root to switch to nobody, and setpriv"
    finish
fi
AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
NR="$T/nr"; mkdir -p "$NR/bin" "$NR/lib" "$NR/run"; chmod 711 "$T"; chmod 755 "$NR" "$NR/bin" "$NR/lib"; chmod 777 "$NR/run"
cp "$B/bin/memlyze" "$B/bin/memlyze-attach" "$B/bin/memlyze-detach" "$NR/bin/"
cp "$B/lib/libmemlyze.so" "$NR/lib/"
cc -O2 -g -pthread -o "$NR/bin/holder" "$ROOT/tests/targets/holder.c" || fail "build holder"
cc -O1 -g -D_GNU_SOURCE -I"$ROOT/payload" -o "$NR/bin/memfd_loader" "$ROOT/tests/targets/memfd_loader.c" -ldl || fail "build memfd_loader"
chmod 755 "$NR"/bin/* "$NR/lib/libmemlyze.so"
site() {        # site JSON FUNC: live bytes of the sites whose leaf frame is FUNC
    python3 -c "
import json; d=json.load(open('$1'))
print(int(round(sum(s['live_bytes'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('$2 ')))))" 2>/dev/null
}

# ---- memlyze-attach, snapshot, detach on an exact-mode holder
mkfifo "$NR/run/in"; chmod 666 "$NR/run/in"
$AS_NOBODY "$NR/bin/holder" 4 < "$NR/run/in" > "$NR/run/out" 2>&1 &
HPID=$!
exec {HIN}>"$NR/run/in"
for _ in $(seq 100); do grep -q ready "$NR/run/out" 2>/dev/null && break; sleep 0.05; done
check "nonroot: attach" $AS_NOBODY timeout 30 "$NR/bin/memlyze-attach" -q -r 1 --payload "$NR/lib/libmemlyze.so" \
    -o "$NR/run/trace.mlyze" "$HPID"
check "nonroot: the payload came from a memfd" grep -q '/memfd:memlyze-payload' "/proc/$HPID/maps"
check "nonroot: map_files is closed to this user" bash -c "! $AS_NOBODY cat /proc/$HPID/map_files/\$(grep -m1 'memfd:memlyze-payload' /proc/$HPID/maps | cut -d' ' -f1) >/dev/null 2>&1"
# Held before the attach: invisible to it. Sampled after it: the churn's
# short-lived blocks; the snapshot is a valid file of kind snapshot.
check "nonroot: snapshot" $AS_NOBODY timeout 30 "$NR/bin/memlyze" snapshot -q -o "$NR/run/snap.mlyze" "$HPID"
check "nonroot: snapshot is valid" "$B/bin/memlyze" validate "$NR/run/snap.mlyze"
check "nonroot: snapshot is of kind snapshot" bash -c "'$B/bin/memlyze' stats '$NR/run/snap.mlyze' | grep -q 'kind: *snapshot'"
check "nonroot: snapshot names the sampling session" bash -c "'$B/bin/memlyze' dump '$NR/run/snap.mlyze' | grep -q '\"session\": *\"$HPID\\.'"
check "nonroot: detach" $AS_NOBODY timeout 30 "$NR/bin/memlyze-detach" -q "$HPID"
check "nonroot: trace is valid" "$B/bin/memlyze" validate "$NR/run/trace.mlyze"
out=$($AS_NOBODY "$NR/bin/memlyze" snapshot -o "$NR/run/after.mlyze" "$HPID" 2>&1); rc=$?
check "nonroot: snapshot after detach: one line, not attached" \
    bash -c "[ $rc -eq 1 ] && [ \$(wc -l <<<\"\$0\") -eq 1 ] && grep -q 'not attached' <<<\"\$0\"" "$out"
exec {HIN}>&-
wait "$HPID"
check "nonroot: target ran on correctly" grep -q '^held 1124' "$NR/run/out"

# ---- a payload whose memfd is closed: symbols from memory
mkfifo "$NR/run/in2"; chmod 666 "$NR/run/in2"
MEMLYZE_MODE=got MEMLYZE_RATE=1 MEMLYZE_SPOOL="$NR/run/spool2" \
    $AS_NOBODY "$NR/bin/memfd_loader" "$NR/lib/libmemlyze.so" < "$NR/run/in2" > "$NR/run/out2" 2>&1 &
LPID=$!
exec {LIN}>"$NR/run/in2"
for _ in $(seq 100); do grep -q ready "$NR/run/out2" 2>/dev/null && break; sleep 0.05; done
check "closed memfd: no descriptor left on the payload" bash -c "! ls -l /proc/$LPID/fd | grep -q memfd"
check "closed memfd: snapshot as the same user" $AS_NOBODY timeout 30 "$NR/bin/memlyze" snapshot -q -o "$NR/run/mem.mlyze" "$LPID"
"$B/bin/memlyze" top --json -n 20 "$NR/run/mem.mlyze" > "$NR/run/mem.json" 2>/dev/null
check "closed memfd: the held site, exact" test "$(site "$NR/run/mem.json" site_4k)" = 409600
check "closed memfd: snapshot as root (map_files) is the same" bash -c "'$B/bin/memlyze' snapshot -q -o '$NR/run/mem-root.mlyze' $LPID &&
    '$B/bin/memlyze' top --json -n 20 '$NR/run/mem-root.mlyze' > '$NR/run/mem-root.json' &&
    [ \"\$(python3 -c \"import json; print(sorted((s['frames'][0], s['live_bytes']) for s in json.load(open('$NR/run/mem-root.json'))['sites'] if s['frames'][0].startswith('site_')))\")\" = \
      \"\$(python3 -c \"import json; print(sorted((s['frames'][0], s['live_bytes']) for s in json.load(open('$NR/run/mem.json'))['sites'] if s['frames'][0].startswith('site_')))\")\" ]"
exec {LIN}>&-
wait "$LPID"
finish
