# lib.sh - helpers for the end-to-end tests: each check prints "PASS: name"
# or "FAIL: name" (tests/run.sh counts them); the script's exit status is 1
# if any check failed.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${MLZ_BUILD:-build}
case "$B" in /*) ;; *) B="$ROOT/$B" ;; esac
MEMLYZE="$B/bin/memlyze"
T=$(mktemp -d /tmp/mlz-e2e.XXXXXX)
trap 'rm -rf "$T"' EXIT
failures=0

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1${2:+: $2}"; failures=$((failures + 1)); }
# check NAME CMD... : passes when CMD succeeds
check() { local n=$1; shift; if "$@" >"$T/.out" 2>&1; then pass "$n"; else fail "$n" "$(head -c 600 "$T/.out")"; fi; }
finish() { [ "$failures" -eq 0 ]; exit $?; }
