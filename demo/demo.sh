#!/usr/bin/env bash
# make demo: attach to a running server that leaks, find the leak, detach.
#   1. start demo/server (4 workers; one site leaks, others churn or stay bounded)
#   2. memlyze-attach: no restart, no gdb
#   3. two snapshots a few seconds apart, and memlyze diff between them
#   4. a flame graph of the second snapshot
#   5. memlyze-detach: every GOT slot restored, the full trace written
set -eu
cd "$(dirname "$0")/.."
B=${MLZ_BUILD:-build}
OUT=${DEMO_DIR:-build/demo}
rm -rf "$OUT" && mkdir -p "$OUT"
cc -O2 -g -pthread -o "$OUT/server" demo/server.c
say() { printf '\n== %s\n' "$*"; }

"$OUT/server" 4 > "$OUT/server.log" &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
sleep 1
say "a server is running: pid $SERVER; attaching without restarting it"
"$B/bin/memlyze-attach" -r 64k -o "$OUT/trace.mlyze" "$SERVER"
sleep 2
say "snapshot A"
"$B/bin/memlyze-snapshot" -o "$OUT/a.mlyze" "$SERVER"
sleep 4
say "snapshot B, four seconds later"
"$B/bin/memlyze-snapshot" -o "$OUT/b.mlyze" "$SERVER"
say "what grew between A and B (the leak comes first)"
"$B/bin/memlyze" diff -n 3 "$OUT/a.mlyze" "$OUT/b.mlyze"
if "$B/bin/memlyze" flamegraph --help >/dev/null 2>&1; then
    say "flame graph of snapshot B"
    "$B/bin/memlyze" flamegraph -o "$OUT/flame.html" "$OUT/b.mlyze"
    "$B/bin/memlyze" flamegraph --diff "$OUT/a.mlyze" -o "$OUT/growth.html" "$OUT/b.mlyze"
fi
say "detaching: slots restored, trace written; the server keeps running"
"$B/bin/memlyze-detach" "$SERVER"
kill -0 "$SERVER" && echo "server $SERVER still running"
say "the whole recording: where the live heap is"
"$B/bin/memlyze" top -n 3 --frames 2 "$OUT/trace.mlyze"
say "files"
ls -l "$OUT"/*.mlyze "$OUT"/*.html 2>/dev/null | awk '{ print "  " $NF " (" $5 " bytes)" }'
say "browse all of it (flame graph, top, tree, diff, timeline) in a web page:"
echo "  $B/bin/memlyze serve $OUT/trace.mlyze $OUT/a.mlyze $OUT/b.mlyze"
