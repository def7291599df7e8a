#!/usr/bin/env bash
# memlyze watch PID, driven inside tmux (an 80x24 terminal) against the
# leaking demo server attached with memlyze-attach: the leaking site climbs
# to the top, the s key writes a valid snapshot under memlyze-snapshot's
# naming, r resets the growth, q quits; plain and JSON lines when stdout is
# not a terminal; a clean exit when the target is detached or exits.
. "$(dirname "$0")/lib.sh"
if ! command -v tmux >/dev/null; then echo "SKIP: watch (tmux not installed)"; exit 0; fi
cc -O2 -g -pthread -o "$T/server" "$ROOT/demo/server.c" || fail "build server"
SOCK="mlz-watch-$$"
TM() { tmux -L "$SOCK" -f /dev/null "$@"; }
SPID=
ATTACHED=()
cleanup() {
    TM kill-server 2>/dev/null
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null && wait "$SPID" 2>/dev/null
    # servers killed while attached leave their spool (memlyze-detach would
    # recover it): not needed here
    for p in "${ATTACHED[@]}"; do rm -rf "/tmp/memlyze-$p"; done
    rm -rf "$T"
}
trap cleanup EXIT

start_server() {
    "$T/server" 4 > "$T/server.out" &
    SPID=$!
    ATTACHED+=("$SPID")
    sleep 0.5
    "$B/bin/memlyze-attach" -r 64k -o "$T/trace.$SPID.mlyze" "$SPID" > "$T/attach.out" 2>&1
}
screen() { TM capture-pane -p -t w; }
# wait_screen PATTERN [SECONDS]: until the pane shows PATTERN
wait_screen() {
    for _ in $(seq $((${2:-10} * 10))); do screen | grep -q -- "$1" && return 0; sleep 0.1; done
    screen > "$T/last-screen"; return 1
}

check "help" bash -c "'$MEMLYZE' watch --help | grep -q '^usage: memlyze watch'"
check "bad pid: usage error" bash -c "'$MEMLYZE' watch abc 2>/dev/null; [ \$? -eq 2 ]"
check "bad interval: usage error" bash -c "'$MEMLYZE' watch -i 0 1 2>/dev/null; [ \$? -eq 2 ]"
sleep 30 & NPID=$!
out=$("$MEMLYZE" watch --once "$NPID" 2>&1); rc=$?
kill "$NPID"
check "not attached: one line, exit 1" bash -c "[ $rc -eq 1 ] && [ \$(printf '%s\n' \"$out\" | wc -l) -eq 1 ] && printf '%s' \"$out\" | grep -q 'not loaded'"

# Exact mode against a holder whose live sites are known to the byte: the
# per-site sums of --json are exact, as memlyze snapshot's are.
cc -O2 -g -pthread -o "$T/holder" "$ROOT/tests/targets/holder.c" || fail "build holder"
mkfifo "$T/hin"
MEMLYZE_MODE=got MEMLYZE_RATE=1 MEMLYZE_SPOOL="$T/hspool" LD_PRELOAD="$B/lib/libmemlyze.so" \
    "$T/holder" 16 < "$T/hin" > "$T/hout" &
HPID=$!
exec {HIN}>"$T/hin"
for _ in $(seq 100); do grep -q ready "$T/hout" 2>/dev/null && break; sleep 0.05; done
"$MEMLYZE" watch --once --json -n 100 "$HPID" > "$T/exact.json"
check "exact mode: every held site exact, intervals zero" python3 -c "
import json
d = json.load(open('$T/exact.json'))
got = {}
for s in d['sites']:
    name = s['frames'][0].split(' ')[0]
    got[name] = got.get(name, 0) + s['live_bytes']
    assert s['live_bytes_ci95'] == 0, s
want = {'site_16': 16000, 'site_4k': 409600, 'site_64k': 1310720, 'site_1m': 4194304}
for k, v in want.items():
    assert round(got.get(k, -1)) == v, (k, got.get(k), v)
"
exec {HIN}>&-
wait "$HPID"

start_server
check "server attached" kill -0 "$SPID"

# The terminal view, 80x24, refreshing twice a second.
TM new-session -d -s w -x 80 -y 24 -c "$T" "'$MEMLYZE' watch -i 0.5 $SPID; echo WATCH-EXITED-\$?; sleep 60"
check "screen: header and the table" wait_screen "site (sorted by live)"
check "screen: keys line fits 80 columns" wait_screen "q quit"
sleep 3
TM send-keys -t w g
check "g: sorted by growth" wait_screen "sorted by growth"
check "leaking site on top by growth" bash -c "sleep 1; tmux -L '$SOCK' capture-pane -p -t w | sed -n 5p | grep -q remember_request"
TM send-keys -t w l
check "leaking site on top by live bytes" bash -c "sleep 1; tmux -L '$SOCK' capture-pane -p -t w | sed -n 5p | grep -q remember_request"
check "growth of the leak is positive" bash -c "tmux -L '$SOCK' capture-pane -p -t w | sed -n 5p | grep -q ' +[0-9.]* [KM]iB'"
check "no line wider than 80" bash -c "[ \$(tmux -L '$SOCK' capture-pane -p -t w | awk '{ if (length > m) m = length } END { print m + 0 }') -le 80 ]"
TM send-keys -t w s
check "s: snapshot written" wait_screen "wrote memlyze.$SPID.1.mlyze"
check "s: the snapshot is a valid .mlyze" "$MEMLYZE" validate "$T/memlyze.$SPID.1.mlyze"
check "s: the snapshot names the leak" bash -c "'$MEMLYZE' top -n 1 '$T/memlyze.$SPID.1.mlyze' | grep -q remember_request"
TM send-keys -t w s
check "s again: the next free name" wait_screen "wrote memlyze.$SPID.2.mlyze"
TM send-keys -t w r
check "r: baseline reset" wait_screen "baseline reset"
check "r: growth restarts from zero seconds" wait_screen "in [01]s"
TM send-keys -t w q
check "q: exits 0" wait_screen "WATCH-EXITED-0"
TM kill-session -t w

# Plain lines when stdout is not a terminal.
"$MEMLYZE" watch --once -n 3 "$SPID" > "$T/once.txt" 2>&1
check "--once: a header and the leak" bash -c "head -1 '$T/once.txt' | grep -q 'live heap' && sed -n 2p '$T/once.txt' | grep -q remember_request"
timeout 10 "$MEMLYZE" watch --json -i 0.3 -n 3 "$SPID" 2>&1 | head -4 > "$T/lines.json"
check "--json: one object per refresh, growing leak" python3 -c "
import json
rows = [json.loads(l) for l in open('$T/lines.json')]
assert len(rows) == 4, rows
assert rows[-1]['sites'][0]['frames'][0].startswith('remember_request'), rows[-1]
assert rows[-1]['live_bytes'] > 0 and rows[-1]['live_bytes_ci95'] > 0
assert rows[-1]['growth_bytes'] > 0
# The first refresh is the baseline itself: paired, nothing born or died.
assert rows[0]['growth_bytes'] == 0 and rows[0]['growth_bytes_ci95'] == 0, rows[0]
"

# Detached: the watch ends cleanly.
"$MEMLYZE" watch -i 0.2 "$SPID" > "$T/detach.txt" 2>&1 &
WPID=$!
"$MEMLYZE" watch --json -i 0.2 "$SPID" > "$T/detach.json" 2>"$T/detach.json.err" &
JPID=$!
sleep 1
"$B/bin/memlyze-detach" "$SPID" > /dev/null 2>&1
for _ in $(seq 50); do kill -0 "$WPID" 2>/dev/null || kill -0 "$JPID" 2>/dev/null || break; sleep 0.1; done
wait "$WPID"; rc=$?
wait "$JPID"; jrc=$?
check "detached: watch exits 0 saying so" bash -c "[ $rc -eq 0 ] && grep -q 'stopped watching' '$T/detach.txt'"
check "detached: watch --json says so on stderr, its stdout JSON objects only" bash -c "[ $jrc -eq 0 ] &&
    grep -q 'stopped watching' '$T/detach.json.err' && [ -s '$T/detach.json' ] &&
    python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' '$T/detach.json'"
kill "$SPID"; wait "$SPID" 2>/dev/null; SPID=

# A tiny terminal: still drawn, no crash; lines cut at the width, so none
# wraps onto the sparkline or the table below it.
start_server
TM new-session -d -s n -x 40 -y 10 -c "$T" "'$MEMLYZE' watch -i 0.2 $SPID; sleep 60"
sleep 1.5
TM capture-pane -p -t n > "$T/narrow.txt"
TM kill-session -t n
check "40 columns: the growth line ends on its own row, the sparkline row holds no text" bash -c \
    "sed -n 2p '$T/narrow.txt' | grep -q '^live ' && ! sed -n 3p '$T/narrow.txt' | grep -q '[A-Za-z]' &&
     ! sed -n '3,\$p' '$T/narrow.txt' | grep -q ' in [0-9]*s'"

TM new-session -d -s w -x 30 -y 6 -c "$T" "'$MEMLYZE' watch -i 0.2 $SPID; echo WATCH-EXITED-\$?; sleep 60"
sleep 1
TM resize-window -t w -x 80 -y 24 2>/dev/null
check "30x6 then 80x24: redrawn at the new size" wait_screen "q quit"
TM send-keys -t w q
check "30x6: q still exits 0" wait_screen "WATCH-EXITED-0"
TM kill-session -t w
kill "$SPID"; wait "$SPID" 2>/dev/null; SPID=

# The target exits: the terminal view ends cleanly too.
start_server
TM new-session -d -s w -x 80 -y 24 -c "$T" "'$MEMLYZE' watch -i 0.2 $SPID; echo WATCH-EXITED-\$?; sleep 60"
wait_screen "sorted by live" >/dev/null
kill "$SPID"; wait "$SPID" 2>/dev/null; SPID=
check "target exits: watch says so and exits 0" bash -c "for i in \$(seq 50); do tmux -L '$SOCK' capture-pane -p -t w | grep -q WATCH-EXITED-0 && tmux -L '$SOCK' capture-pane -p -t w | grep -q 'exited' && exit 0; sleep 0.1; done; exit 1"
finish
