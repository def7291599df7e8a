# redis.sh - a redis-server of the test's own (sourced after lib.sh): on
# 127.0.0.1 at a random port, no persistence, killed when the test exits.
# start_redis sets PORT and RP (its pid); without redis it prints a SKIP
# line and returns 1.
start_redis() {
    if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
        skip "redis" "redis-server/redis-benchmark not installed (make deps installs them)"
        return 1
    fi
    PORT=$((20000 + RANDOM % 20000))
    redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no > "$T/redis.log" 2>&1 &
    RP=$!
    trap 'kill $RP 2>/dev/null; rm -rf "$T"' EXIT
    for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
}
