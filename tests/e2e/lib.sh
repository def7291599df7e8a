# lib.sh - helpers for the end-to-end tests: each check prints "PASS: name",
# "FAIL: name" or "SKIP: name (reason)" (tests/run.sh counts them); the
# script's exit status is 1 if any check failed.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${MLZ_BUILD:-build}
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
MEMLYZE="$B/bin/memlyze"
T=$(mktemp -d /tmp/mlz-e2e.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0

pass() { echo "PASS: $1"; }
# skip NAME REASON: a check that could not run here (a missing tool);
# tests/run.sh counts it, and a CI run fails on it.
skip() { echo "SKIP: $1 ($2)"; }
fail() { echo "FAIL: $1${2:+: $2}"; failures=$((failures + 1)); }
# check NAME CMD... : passes when CMD succeeds
check() { local n=$1; shift; if "$@" >"$T/.out" 2>&1; then pass "$n"; else fail "$n" "$(head -c 600 "$T/.out")"; fi; }
finish() { [ "$failures" -eq 0 ]; exit $?; }
# G ARGS...: gdb in batch mode, no init files, no debuginfod, output and
# errors together (the debugger tests).
G() { timeout 120 gdb -q -nx -batch -iex 'set debuginfod enabled off' -iex 'set pagination off' "$@" 2>&1; }
