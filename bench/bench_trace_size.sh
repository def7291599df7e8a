#!/usr/bin/env bash
# Trace size and reading speed of the .mlyze encodings, in one run:
#   - bytes/event of v1 raw, v1 LZ4 and split-stream (the same events,
#     converted), next to heaptrack's own file of the same workload and the
#     HATF paper's Table 4 (averages over its four programs);
#   - events/s of the reader library decoding each encoding (bench_decode),
#     and of `memlyze validate` (decode and check every event), `stats` and
#     `top`, medians of RUNS alternating runs.
# Workloads: churn (1 thread, 2M malloc/free pairs of 16 B..4 KiB, every
# allocation recorded: `memlyze run -r 1`) and redis-server under
# redis-benchmark on 127.0.0.1 (a random port).
# Goals: split smaller than heaptrack's file on both, <= 1.54 bytes/event
# on the churn.
set -eu
cd "$(dirname "$0")/.."
B=${MLZ_BUILD:-build}
RUNS=${RUNS:-3}
OPS=${OPS:-2000000}
M=$(pwd)/$B/bin/memlyze
T=$(mktemp -d /tmp/mlz-bench-size.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
cc -O2 -pthread -o "$T/churn" bench/workloads/churn.c

events() { "$M" validate "$1" | sed 's/.*(\([0-9]*\) events.*/\1/'; }
size() { stat -c %s "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }

# convert NAME: NAME.v1 -> NAME.lz4, NAME.split
convert() {
    "$M" convert --format lz4 -o "$T/$1.lz4" "$T/$1.v1"
    "$M" convert --format split -o "$T/$1.split" "$T/$1.v1"
    "$M" convert --format split --level 19 -o "$T/$1.split19" "$T/$1.v1"
}

# heaptrack's output file for a command (it appends .zst or .gz)
heaptrack_file() { ls "$T/$1".* 2>/dev/null | grep -v '\.v1$\|\.lz4$\|\.split$\|\.split19$\|\.idx$' | head -1; }

redis_port() { echo $((20000 + RANDOM % 20000)); }
# run_redis PREFIX... : redis-server under PREFIX, benchmark, clean shutdown
run_redis() {
    local port; port=$(redis_port)
    "$@" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no > "$T/redis.log" 2>&1 &
    local pid=$!
    pids+=("$pid")
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-benchmark -p "$port" -n 100000 -c 10 -r 10000 -d 64 -t set,get,lpush,lpop -q > /dev/null 2>&1
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" 2>/dev/null || true
}

have_ht=1; command -v heaptrack >/dev/null || have_ht=0
have_redis=1; command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || have_redis=0

"$M" run -r 1 --format v1 -o "$T/churn.v1" -- "$T/churn" mixed "$OPS" >/dev/null 2>&1
convert churn
[ $have_ht = 1 ] && heaptrack -o "$T/churn.ht" "$T/churn" mixed "$OPS" >/dev/null 2>&1
if [ $have_redis = 1 ]; then
    run_redis "$M" run -r 1 --format v1 -o "$T/redis.v1" --
    convert redis
    [ $have_ht = 1 ] && run_redis heaptrack -o "$T/redis.ht"
fi

row() {   # row LABEL FILE EVENTS
    printf '  %-34s %12d bytes  %6.2f bytes/event\n' "$1" "$(size "$2")" "$(echo "$(size "$2") / $3" | bc -l)"
}
for w in churn redis; do
    [ -f "$T/$w.v1" ] || { echo "$w: SKIP (redis-server/redis-benchmark not installed)"; continue; }
    n=$(events "$T/$w.v1")
    echo "$w: $n events"
    row ".mlyze v1 raw" "$T/$w.v1" "$n"
    row ".mlyze v1 LZ4 blocks (-z)" "$T/$w.lz4" "$n"
    row ".mlyze split-stream (default)" "$T/$w.split" "$n"
    row ".mlyze split-stream --level 19" "$T/$w.split19" "$n"
    meta=$("$M" dump "$T/$w.split" 2>/dev/null | head -2 | tail -1 | sed 's/.*stream_len=\([0-9]*\).*/\1/')
    printf '    (its event stream alone: %.2f bytes/event; the rest is the symbolized metadata)\n' \
        "$(echo "$meta / $n" | bc -l)"
    ht=$(heaptrack_file "$w.ht")
    if [ -n "$ht" ]; then
        row "heaptrack's file ($(basename "$ht" | sed 's/.*\.//'))" "$ht" "$n"
        sp=$(size "$T/$w.split"); sp19=$(size "$T/$w.split19"); hs=$(size "$ht")
        printf '  split / heaptrack: %.2f, at --level 19 %.2f (goal < 1)\n' \
            "$(echo "$sp / $hs" | bc -l)" "$(echo "$sp19 / $hs" | bc -l)"
    else
        echo "  heaptrack: SKIP (not installed)"
    fi
done
echo "HATF Table 4 (average bytes/record): simple binary 16 / 2.62 gzip; HATF best 5.65 / 1.92;"
echo "  split stream 13 / 1.59; HATF SplitAddr 5.65 / 1.54 (the best compressed)"

# Decoding alone (the reader library), then the commands.
echo "churn:"
"$B/bench/bench_decode" "$T/churn.v1" "$T/churn.split" 5
if [ -f "$T/redis.v1" ]; then
    echo "redis (each read opens the file: its 2 MB of symbolized JSON metadata included):"
    "$B/bench/bench_decode" "$T/redis.v1" "$T/redis.split" 5
fi

# Reading speed of the commands on the churn trace, alternating encodings.
n=$(events "$T/churn.v1")
for cmd in validate stats top; do
    for e in v1 lz4 split; do : > "$T/t.$cmd.$e"; done
    for i in $(seq "$RUNS"); do
        for e in v1 lz4 split; do secs "$M" "$cmd" "$T/churn.$e" >> "$T/t.$cmd.$e"; done
    done
    for e in v1 lz4 split; do
        s=$(median < "$T/t.$cmd.$e")
        printf '%-8s %-5s %8.3f s  %6.1f M events/s\n' "$cmd" "$e" "$s" "$(echo "$n / $s / 1000000" | bc -l)"
    done
    printf '%-8s split/v1 time ratio: %.2f\n' "$cmd" "$(echo "$(median < "$T/t.$cmd.split") / $(median < "$T/t.$cmd.v1")" | bc -l)"
done
