#!/usr/bin/env bash
# The leak-hunting view: two snapshots a few seconds apart of the demo
# server (one site leaks, others churn or stay bounded); memlyze diff must
# rank the leaking site first, with a positive growth beyond its interval;
# leaks/temporary on the trace point the same way.
. "$(dirname "$0")/lib.sh"
cc -O2 -g -pthread -o "$T/server" "$ROOT/demo/server.c" || fail "build server"
MEMLYZE_MODE=got MEMLYZE_RATE=65536 MEMLYZE_SPOOL="$T/spool" LD_PRELOAD="$B/lib/libmemlyze.so" \
    "$T/server" 4 > "$T/out" &
SPID=$!
sleep 1
"$MEMLYZE" snapshot -q -o "$T/a.mlyze" "$SPID"
sleep 3
"$MEMLYZE" snapshot -q -o "$T/b.mlyze" "$SPID"
kill -TERM "$SPID"; wait "$SPID" 2>/dev/null
"$MEMLYZE" diff --json -n 5 "$T/a.mlyze" "$T/b.mlyze" > "$T/diff.json"
check "diff ranks the leaking site first" python3 -c "
import json, sys; d=json.load(open('$T/diff.json'))
s=d['sites'][0]
sys.exit(0 if s['frames'][0].startswith('remember_request') and s['growth_bytes_low'] > 0 else 1)"
check "bounded cache does not look like a leak" python3 -c "
import json, sys; d=json.load(open('$T/diff.json'))
c=[s for s in d['sites'] if s['frames'][0].startswith('refresh_cache')]
sys.exit(0 if not c or abs(c[0]['growth_bytes']) <= 3 * max(c[0]['growth_bytes_ci95'], 1) else 1)"
"$MEMLYZE" diff "$T/a.mlyze" "$T/b.mlyze" > "$T/diff.txt"
check "text diff shows the leak on top" bash -c "awk '/^ +1 /' '$T/diff.txt' | grep -q remember_request"
check "diff with one file and no times is a usage error" bash -c "'$MEMLYZE' diff '$T/a.mlyze' 2>/dev/null; [ \$? -eq 2 ]"
finish
