#!/usr/bin/env bash
# A real server from Debian's packages: redis-server (which allocates
# through libjemalloc) under redis-benchmark load. memlyze-attach, a
# snapshot that names redis' own allocation sites, memlyze-detach; redis
# keeps answering correctly all along and its data is intact afterwards.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/redis.sh"
start_redis || finish
redis-cli -p "$PORT" set canary alive >/dev/null
# Load: a growing key space (so the live heap grows) from 20 clients.
redis-benchmark -p "$PORT" -n 300000 -c 20 -r 100000 -d 256 -t set,lpush -q > "$T/bench.txt" 2>&1 &
BP=$!
sleep 1
check "attach to redis under load" "$B/bin/memlyze-attach" -q -r 64k -o "$T/redis.mlyze" "$RP"
sleep 2
check "snapshot of redis" "$MEMLYZE" snapshot -q -o "$T/snap.mlyze" "$RP"
"$MEMLYZE" top --json -n 20 --frames 8 "$T/snap.mlyze" > "$T/top.json"
check "snapshot names redis' allocation (zmalloc family)" python3 -c "
import json, sys; d=json.load(open('$T/top.json'))
sys.exit(0 if d['live_samples'] > 0 and any(any(f.startswith(('zmalloc', 'ztrymalloc', 'zcalloc', 'zrealloc', 'sdsnewlen', '_sdsnewlen', 'createObject')) for f in s['frames']) for s in d['sites']) else 1)"
check "detach from redis under load" "$B/bin/memlyze-detach" -q "$RP"
check "redis still answers" test "$(redis-cli -p "$PORT" get canary)" = alive
wait "$BP"
check "benchmark completed without errors" bash -c "! grep -qi error '$T/bench.txt'"
check "trace of the whole attachment is valid" "$MEMLYZE" validate "$T/redis.mlyze"
check "redis keeps working after detach" bash -c "redis-benchmark -p $PORT -n 20000 -q -t get > /dev/null && redis-cli -p $PORT dbsize | grep -qE '^[0-9]+$'"
finish
