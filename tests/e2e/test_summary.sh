#!/usr/bin/env bash
# tests/run.sh's closing line counts passes, failures and skips; a skip
# fails the run under CI (CI=true), naming what was skipped. Runs run.sh on
# a stand-in build folder holding one test program.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/b/tests"
fake() {   # fake LINES...: the stand-in test prints these lines
    printf '#!/bin/sh\n' > "$T/b/tests/test_fake"
    for l in "$@"; do printf 'echo "%s"\n' "$l" >> "$T/b/tests/test_fake"; done
    chmod +x "$T/b/tests/test_fake"
}
fake "PASS: a" "PASS: b" "SKIP: c (no tool)"
out=$(CI= "$ROOT/tests/run.sh" --only "$T/b" 2>&1); rc=$?
check "skips counted in the closing line" test "$(tail -1 <<<"$out")" = "2 passed, 0 failed, 1 skipped"
check "skipped checks named" grep -q '^skipped: .*test_fake: c (no tool)$' <<<"$out"
check "outside CI a skip does not fail the run" test "$rc" -eq 0
out=$(CI=true "$ROOT/tests/run.sh" --only "$T/b" 2>&1); rc=$?
check "under CI a skip fails the run" test "$rc" -ne 0
check "under CI the skipped check is named" grep -q '^skipped: .*test_fake: c (no tool)$' <<<"$out"
fake "PASS: a" "FAIL: b"
out=$(CI= "$ROOT/tests/run.sh" --only "$T/b" 2>&1); rc=$?
check "failures counted" bash -c "[ '$(tail -1 <<<"$out")' = '1 passed, 1 failed, 0 skipped' ] && [ $rc -ne 0 ]"
fake "PASS: a"
out=$(CI=true "$ROOT/tests/run.sh" --only "$T/b" 2>&1); rc=$?
check "under CI, nothing skipped: the run passes" bash -c "[ '$(tail -1 <<<"$out")' = '1 passed, 0 failed, 0 skipped' ] && [ $rc -eq 0 ]"
finish
