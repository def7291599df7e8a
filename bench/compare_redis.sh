#!/usr/bin/env bash
# compare_redis.sh - a real server under memlyze-attach against a fresh twin,
# in the same run: two redis-server processes started alike, one attached,
# one not, each driven by redis-benchmark in alternating order (RUNS pairs,
# medians), at the default 512 KiB and in exact mode (-r 1). The servers
# share one core and the client has the other, so the pair sees the same
# machine; the table prints throughput, the ratio to the twin, and RSS.
#   bench/compare_redis.sh [RUNS] [REQUESTS]
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${MLZ_BUILD:-$ROOT/build}
RUNS=${1:-9}
REQ=${2:-100000}
for t in redis-server redis-benchmark redis-cli; do
    command -v $t >/dev/null || { echo "compare_redis: $t not installed (make deps)" >&2; exit 1; }
done
T=$(mktemp -d /tmp/mlz-bench-redis.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
NCPU=$(nproc)
SERVER_CPU=0 CLIENT_CPU=$(( NCPU > 1 ? 1 : 0 ))

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

start_server() {   # start_server NAME -> sets PORT, SPID
    PORT=$(free_port)
    taskset -c $SERVER_CPU redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$T" --dbfilename "$1.rdb" >"$T/$1.log" 2>&1 &
    SPID=$!
    PIDS+=("$SPID")
    for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
    echo "compare_redis: redis-server did not start (see $T/$1.log)" >&2
    exit 1
}

# ops PORT: requests per second of one redis-benchmark pass (the mean of its
# tests' figures), the client pinned to its own core.
ops() {
    taskset -c $CLIENT_CPU redis-benchmark -p "$1" -q -n "$REQ" -c 20 -P 4 -d 64 -r 10000 \
        -t set,get,lpush,lpop,sadd,hset --csv 2>/dev/null |
        awk -F'","' 'NR > 1 { gsub(/"/, "", $2); s += $2; n++ } END { if (n) printf "%.0f\n", s / n }'
}

printf '%-22s %12s %12s %8s %10s %10s\n' "redis-benchmark" "twin req/s" "memlyze" "ratio" "twin RSS" "RSS (KiB)"
for RATE in 524288 1; do
    start_server twin;  TWIN_PORT=$PORT TWIN=$SPID
    start_server prof;  PROF_PORT=$PORT PROF=$SPID
    ops "$TWIN_PORT" >/dev/null; ops "$PROF_PORT" >/dev/null     # warm both alike
    if ! "$B/bin/memlyze-attach" -q -r "$RATE" -o "$T/redis.$RATE.mlyze" "$PROF" 2>"$T/attach.err"; then
        echo "compare_redis: attach failed: $(cat "$T/attach.err")" >&2
        exit 1
    fi
    : > "$T/twin.ops"; : > "$T/prof.ops"
    for i in $(seq "$RUNS"); do
        if [ $((i % 2)) -eq 1 ]; then
            ops "$TWIN_PORT" >> "$T/twin.ops"; ops "$PROF_PORT" >> "$T/prof.ops"
        else
            ops "$PROF_PORT" >> "$T/prof.ops"; ops "$TWIN_PORT" >> "$T/twin.ops"
        fi
    done
    RT=$(rss_kib "$TWIN") RP=$(rss_kib "$PROF")
    "$B/bin/memlyze-detach" -q "$PROF" >"$T/detach.out" 2>&1 || { echo "compare_redis: detach failed: $(cat "$T/detach.out")" >&2; exit 1; }
    MT=$(median < "$T/twin.ops") MP=$(median < "$T/prof.ops")
    label=$([ "$RATE" = 1 ] && echo "attached, -r 1 (exact)" || echo "attached, 512 KiB")
    awk -v l="$label" -v t="$MT" -v p="$MP" -v rt="$RT" -v rp="$RP" \
        'BEGIN { printf "%-22s %12.0f %12.0f %7.3fx %10d %10d\n", l, t, p, t / p, rt, rp }'
    kill "$TWIN" "$PROF"; wait "$TWIN" "$PROF" 2>/dev/null
    PIDS=()
done
echo "(medians of $RUNS alternating passes of $REQ requests per test; ratio = twin / attached, 1.000 = no cost)"
