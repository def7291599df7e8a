#!/usr/bin/env bash
# memlyze serve: the pages of a real trace and two snapshots of the leaking
# demo server, plus a fixture with hostile names (a <script> and a 100000
# character symbol). Pages answer, errors get error pages, escaping holds,
# malformed and random requests never stop the server, headless Chromium
# clicks table -> flame graph -> diff -> timeline, and --pid takes
# snapshots on request showing the growth since the previous one.
# Every server listens on 127.0.0.1 only and is stopped by its saved PID.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/e2e/reports/lib_reports.sh"
S="$ROOT/tests/e2e/serve"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    # servers killed while attached leave their spool (memlyze-detach would
    # recover it): not needed here
    for p in "${PIDS[@]}"; do rm -rf "/tmp/memlyze-$p"; done
    rm -rf "$T"
}
trap cleanup EXIT

cc -O2 -g -pthread -o "$T/server" "$ROOT/demo/server.c" || fail "build server"
start_target() {   # sets TPID: the demo server with memlyze attached
    "$T/server" 4 > "$T/server.out" &
    TPID=$!
    PIDS+=("$TPID")
    sleep 0.5
    "$B/bin/memlyze-attach" -r 64k -o "$T/trace.$TPID.mlyze" "$TPID" > "$T/attach.out" 2>&1
}
# serve ARGS...: starts memlyze serve; sets SPID, URL, PORT
serve() {
    "$MEMLYZE" serve "$@" > "$T/serve.out" 2> "$T/serve.err" &
    SPID=$!
    PIDS+=("$SPID")
    URL=
    for _ in $(seq 100); do URL=$(grep -o 'http://[^ ]*' "$T/serve.out" 2>/dev/null) && break; sleep 0.05; done
    PORT=${URL##*:}; PORT=${PORT%/}
}
status() { curl -s -o "$T/page" -w '%{http_code}' "$URL$1"; }

check "help" bash -c "'$MEMLYZE' serve --help | grep -q '^usage: memlyze serve'"
check "no arguments: usage error" bash -c "'$MEMLYZE' serve 2>/dev/null; [ \$? -eq 2 ]"
check "bad --bind: usage error" bash -c "'$MEMLYZE' serve --bind nowhere x.mlyze 2>/dev/null; [ \$? -eq 2 ]"
out=$("$MEMLYZE" serve "$T/missing.mlyze" 2>&1); rc=$?
sleep 30 & NPID=$!
PIDS+=("$NPID")
out=$("$MEMLYZE" serve --pid "$NPID" 2>&1); rc=$?
kill "$NPID"
check "--pid of a process without memlyze: one line, exit 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ] && printf '%s' \"$out\" | grep -q 'not loaded'"
check "missing file: one line, exit 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ]"

# The profiles: trace (0), snapshots A (1) and B (2), hostile names (3).
start_target
"$MEMLYZE" snapshot -q -o "$T/a.mlyze" "$TPID"
sleep 2
"$MEMLYZE" snapshot -q -o "$T/b.mlyze" "$TPID"
"$B/bin/memlyze-detach" "$TPID" > /dev/null 2>&1
kill "$TPID"; wait "$TPID" 2>/dev/null
mv "$T/trace.$TPID.mlyze" "$T/trace.mlyze"
python3 - "$R/fixture.dump" "$T/odd.dump" <<'EOF'
import sys
s = open(sys.argv[1]).read()
old8 = '"8":"std::vector<int>::push;back&\\\\"x\\\\""'
old9 = '"9":"na\\\\u00efve_\\\\u00fc"'
assert old8 in s and old9 in s
s = s.replace(old8, '"8":"<script>window.pwned=1</script>&\\\\"\'\\\\u0001x"')
s = s.replace(old9, '"9":"' + 'L' * 100000 + '"')
open(sys.argv[2], 'w').write(s)
EOF
"$MEMLYZE" undump -f -o "$T/odd.mlyze" "$T/odd.dump" > /dev/null || fail "odd fixture"

serve "$T/trace.mlyze" "$T/a.mlyze" "$T/b.mlyze" "$T/odd.mlyze"
check "prints its address: 127.0.0.1 and a port" bash -c "[[ '$URL' =~ ^http://127\.0\.0\.1:[0-9]+/$ ]]"
check "listens on 127.0.0.1 only" bash -c "ss -ltnp 2>/dev/null | grep ':$PORT ' | grep -q '127.0.0.1:$PORT' || ! command -v ss >/dev/null"
check "index lists the four profiles" bash -c "[ \$(curl -s '$URL' | grep -c '<a href=\"/top?f=') -eq 4 ]"
for p in "top?f=2" "tree?f=2" "flame?f=2" "flame?f=2&base=1" "diff?a=1&b=2" "diff?a=0&ta=0.5&b=0&tb=2" \
         "timeline?f=0" "json?f=2" "top?f=0&t=1"; do
    check "page /$p: 200" test "$(status "$p")" = 200
done
check "pages need nothing from the network" bash -c "! curl -s '${URL}timeline?f=0' '${URL}flame?f=2' '${URL}top?f=2' | grep -Eiq '(src|href)=\"(https?:)?//'"
check "a policy forbids fetching anything" bash -c "curl -sI '${URL}top?f=2' | grep -qi \"content-security-policy: default-src 'none'\""
check "diff page: the leak first" bash -c "curl -s '${URL}diff?a=1&b=2' | grep -m1 'class=\"sitelink\"' | grep -q remember_request"
# Pairing, as memlyze diff pairs: two snapshots of one session, two moments
# of one trace, a snapshot with itself (growth exactly 0).
check "diff page: snapshots of one session are paired, as memlyze diff says" bash -c \
    "curl -s '${URL}diff?a=1&b=2' | grep -q 'id=\"difftotal\">.*(95%; paired: [0-9]* samples born, [0-9]* died)' &&
     '$MEMLYZE' diff '$T/a.mlyze' '$T/b.mlyze' | head -1 | grep -q 'paired'"
check "diff page: a snapshot with itself grows 0 ± 0" bash -c \
    "curl -s '${URL}diff?a=2&b=2' | grep -q 'growth +0 B ± 0 B (95%; paired: 0 samples born, 0 died)'"
check "diff page: two moments of the trace are paired" bash -c \
    "curl -s '${URL}diff?a=0&ta=0.5&b=0&tb=2' | grep -q '(95%; paired: '"
check "top: a site links to the flame graph zoomed to it, by its label and by its own path" bash -c \
    "curl -s '${URL}top?f=2' | grep -q 'href=\"/flame?f=2#zoom=%5Eremember_request%20%5C%28server%5C.c%3A27%5C%29%24&amp;path=[^\"]*/worker%20%28server.c%3A68%29/remember_request%20%28server.c%3A27%29\"'"
for p in "top?f=9:400" "top?f=x:400" "top:400" "nope:404" "top?f=0&t=abc:400" "timeline?f=1:400" \
         "flame?f=1&base=7:400" "diff?a=1:400" "top?f=0&t=-5:400"; do
    check "error page /${p%:*}: ${p##*:}" bash -c "[ \$(curl -s -o '$T/e' -w '%{http_code}' '$URL${p%:*}') = ${p##*:} ] && grep -q 'id=\"error\"' '$T/e'"
done
check "POST /snapshot without --pid: 404 page" bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' -X POST '${URL}snapshot') = 404 ]"

# Hostile names: escaped in HTML, exact in JSON; the long one does not hurt.
curl -s "${URL}top?f=3" > "$T/odd.html"
check "escaping: no raw <script> from the trace in the top page" bash -c "! grep -q '<script>window.pwned' '$T/odd.html'"
check "escaping: shown escaped" grep -q '&lt;script&gt;window.pwned=1&lt;/script&gt;&amp;&quot;&#39;?x' "$T/odd.html"
for p in "tree?f=3" "flame?f=3" "diff?a=3&b=3"; do
    check "escaping: /$p has no raw <script> from the trace" bash -c "[ \$(curl -s -o '$T/o' -w '%{http_code}' '$URL$p') = 200 ] && ! grep -q '<script>window.pwned' '$T/o'"
done
check "escaping: JSON keeps the exact name" python3 -c "
import json, urllib.request
d = json.load(urllib.request.urlopen('${URL}json?f=3'))
names = [f['function'] for s in d['sites'] for f in s['frames']]
assert '<script>window.pwned=1</script>&\"\'\x01x' in names, names[:8]
assert 'L' * 100000 in names
"
check "a 100000-character symbol: the pages still answer" bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' '${URL}tree?f=3') = 200 ]"

# Malformed, oversized and random requests (raw sockets).
python3 "$S/bad_requests.py" "$PORT" || failures=$((failures + 1))

# Headless Chromium: click table -> flame graph -> diff -> timeline.
if [ -n "$CHROMIUM" ]; then
    mkdir -p "$T/shots"
    timeout 180 python3 "$S/cdp_walk.py" "$CHROMIUM" "$URL" "$T/shots" 0 1 2 3 || failures=$((failures + 1))
    for png in top flame diff timeline; do
        "$PY" "$R/png_stats.py" "$T/shots/$png.png" > "$T/shots/$png.stats" 2>&1
        check "chromium: $png screenshot is not blank" grep -qE 'nonwhite=0\.0*[1-9]|nonwhite=[1-9]' "$T/shots/$png.stats"
    done
    check "chromium: the diff screenshot shows a red growth" grep -qE 'reddish=[1-9]' "$T/shots/diff.stats"
else
    skip "chromium not installed (Debian package chromium): pages not clicked through"
fi
check "the server survived all of it" bash -c "[ \$(curl -s -o /dev/null -w '%{http_code}' '$URL') = 200 ]"
kill "$SPID"; wait "$SPID" 2>/dev/null

# --port: the port asked for.
FREE=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1]); s.close()")
serve --port "$FREE" "$T/a.mlyze"
check "--port: listens where asked" test "$PORT" = "$FREE"
kill "$SPID"; wait "$SPID" 2>/dev/null

# --pid: a snapshot at the start and on request, growth since the previous one.
start_target
serve --pid "$TPID"
check "--pid: the first snapshot is listed" bash -c "curl -s '$URL' | grep -q 'snapshot 1 of pid $TPID'"
sleep 2
loc=$(curl -s -o /dev/null -w '%{http_code} %{redirect_url}' -X POST "${URL}snapshot")
check "--pid: POST /snapshot redirects to the growth since the previous one" test "$loc" = "303 ${URL}diff?a=0&b=1"
check "--pid: the growth page ranks the leak first" bash -c "curl -s '${URL}diff?a=0&b=1' | grep -m1 'class=\"sitelink\"' | grep -q remember_request"
DIR=$(ls -d /tmp/memlyze-serve.* 2>/dev/null | while read -r d; do [ -e "$d/snapshot-2.mlyze" ] && "$MEMLYZE" stats "$d/snapshot-2.mlyze" 2>/dev/null | grep -q "pid.*$TPID" && echo "$d"; done | head -1)
# Snapshot after snapshot: only the last few shown stay loaded (each whole
# in memory, its file open); an older one loads again when shown.
for _ in 1 2 3 4 5; do curl -s -o /dev/null -X POST "${URL}snapshot"; done
open_snaps() { ls -l "/proc/$SPID/fd" 2>/dev/null | grep -c 'snapshot-[0-9]*\.mlyze'; }
check "--pid: 7 snapshots listed, at most 4 of them open ($(open_snaps))" bash -c \
    "curl -s '$URL' | grep -q 'snapshot 7 of pid $TPID' && [ \$(ls -l /proc/$SPID/fd | grep -c 'snapshot-[0-9]*\.mlyze') -le 4 ]"
check "--pid: the first snapshot, long unloaded, is shown again" bash -c \
    "[ \$(curl -s -o '$T/first' -w '%{http_code}' '${URL}top?f=0') = 200 ] && grep -q remember_request '$T/first'"
check "--pid: a diff of an unloaded and a loaded snapshot" test "$(status "diff?a=0&b=6")" = 200
check "--pid: snapshots are valid .mlyze files" bash -c "[ -n '$DIR' ] && '$MEMLYZE' validate '$DIR/snapshot-2.mlyze'"
kill "$TPID"; wait "$TPID" 2>/dev/null
check "--pid: target gone -> an error page, not a crash" bash -c "[ \$(curl -s -o '$T/g' -w '%{http_code}' -X POST '${URL}snapshot') = 410 ] && grep -q 'id=\"error\"' '$T/g'"
check "--pid: still serving the snapshots taken" test "$(status "top?f=1")" = 200
kill "$SPID"; wait "$SPID"; rc=$?
check "SIGTERM: exits 0" test "$rc" = 0
check "SIGTERM: its snapshot directory is removed" bash -c "[ -n '$DIR' ] && ! [ -e '$DIR' ]"

# make demo's last line is the command that opens its trace in memlyze serve.
(cd "$ROOT" && MLZ_BUILD="$B" DEMO_DIR="$T/demo" demo/demo.sh > "$T/demo.out" 2>&1)
last=$(tail -1 "$T/demo.out" | sed 's/^ *//')
check "demo: ends with a memlyze serve command of its trace" bash -c "[[ '$last' == *'/memlyze serve '*'$T/demo/trace.mlyze'* ]]"
(cd "$ROOT" && exec $last > "$T/serve.out" 2>&1) &
SPID=$!
PIDS+=("$SPID")
URL=
for _ in $(seq 100); do URL=$(grep -o 'http://[^ ]*' "$T/serve.out" 2>/dev/null) && break; sleep 0.05; done
check "demo: that command serves the trace and its timeline" test "$(status "timeline?f=0")" = 200
kill "$SPID"; wait "$SPID" 2>/dev/null
finish
