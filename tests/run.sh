#!/usr/bin/env bash
# Runs every test and prints one closing line: "N passed, N failed, N skipped".
#
#   tests/run.sh                  plain, ASan+UBSan and TSan unit tests, then tests/e2e/*.sh
#   tests/run.sh --only DIR       only the unit tests built under DIR (e.g. build/san-address-undefined)
#
# Each test program prints "PASS: name" / "FAIL: name" lines. A program that
# dies without printing a FAIL line (a crash, a sanitizer report) counts as
# one failure under its own name, so nothing can fail silently. A check that
# cannot run here (a missing tool) prints "SKIP: name (reason)"; under CI
# (CI=true), which installs every tool the tests use, a skip fails the run.
set -u
cd "$(dirname "$0")/.."
export MLZ_BUILD=${MLZ_BUILD:-build}
pass=0; fail=0; skipped=0; failed_names=(); skipped_names=()

run_one() {   # run_one LABEL CMD...
    local label=$1; shift
    local out rc p f s
    out=$("$@" 2>&1); rc=$?
    p=$(grep -c '^PASS: ' <<<"$out"); f=$(grep -c '^FAIL: ' <<<"$out"); s=$(grep -c '^SKIP: ' <<<"$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; out+=$'\n'"FAIL: $label (exit $rc)"; fi
    pass=$((pass + p)); fail=$((fail + f)); skipped=$((skipped + s))
    while IFS= read -r line; do skipped_names+=("$label: ${line#SKIP: }"); done < <(grep '^SKIP: ' <<<"$out")
    if [ "$f" -ne 0 ]; then
        failed_names+=("$label")
        printf '%s\n' "--- $label" "$out" | tail -n 60
    else
        printf 'ok   %-40s %3d passed%s\n' "$label" "$p" "$([ "$s" -eq 0 ] || echo ", $s skipped")"
    fi
}

dirs=(build build/san-address-undefined build/san-thread)
if [ "${1:-}" = "--only" ]; then dirs=("$2"); fi

for d in "${dirs[@]}"; do
    [ -d "$d/tests" ] || continue
    for t in "$d"/tests/test_*; do
        [ -x "$t" ] || continue
        # TSan builds exist only for the lock-free tests; halt on the first race.
        case "$d" in *thread*) export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1";; esac
        label=$(basename "$t"); [ "$d" = build ] || label="${d#build/}/$label"
        run_one "$label" "$t"
        unset TSAN_OPTIONS
    done
done

if [ "${1:-}" != "--only" ]; then
    for s in tests/e2e/*.sh; do
        [ "$(basename "$s")" = lib.sh ] && continue
        [ -f "$s" ] || continue
        run_one "e2e/$(basename "$s")" bash "$s"
    done
fi

[ ${#failed_names[@]} -eq 0 ] || echo "failed: ${failed_names[*]}"
[ "$skipped" -eq 0 ] || printf 'skipped: %s\n' "${skipped_names[@]}"
echo "$pass passed, $fail failed, $skipped skipped"
if [ "${CI:-}" = true ] && [ "$skipped" -ne 0 ]; then
    echo "CI installs every tool the tests use: $skipped skipped checks fail this run"
    exit 1
fi
[ "$fail" -eq 0 ]
