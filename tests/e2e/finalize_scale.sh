#!/usr/bin/env bash
# Symbolizing scales with distinct program counters, not with frames: a
# recursive program's tens of thousands of stacks share ~50 pcs
# (tests/targets/many_stacks.c), and each pc is resolved once
# (symbolize.c's cache): finalize took a minute here before, seconds now,
# the trace byte for byte the same. And finalize refuses an existing -o
# before the work, not after it.
. "$(dirname "$0")/lib.sh"
cc -O1 -g -o "$T/many" "$ROOT/tests/targets/many_stacks.c" || { fail "build many_stacks"; finish; }
mkdir -p "$T/sp"
MEMLYZE_RATE=1 MEMLYZE_SPOOL="$T/sp/spool" LD_PRELOAD="$B/lib/libmemlyze-preload.so" "$T/many" 40000 ||
    fail "run many_stacks"
s=$(date +%s%N)
timeout 120 "$MEMLYZE" finalize -o "$T/t.mlyze" "$T/sp/spool"
rc=$?
ms=$(( ($(date +%s%N) - s) / 1000000 ))
check "finalize of a recursive program's trace succeeds" test "$rc" = 0
stacks=$("$MEMLYZE" stats "$T/t.mlyze" | sed -n 's/^stacks: *\([0-9]*\) distinct.*/\1/p')
check "  it has over 10000 distinct stacks ($stacks)" test "${stacks:-0}" -gt 10000
check "  in under 15 s ($ms ms; each of its ~50 pcs resolved once)" test "$ms" -lt 15000
check "  and validates" "$MEMLYZE" validate "$T/t.mlyze"
cp "$T/t.mlyze" "$T/keep.mlyze"
"$MEMLYZE" finalize -o "$T/t.mlyze" "$T/sp/spool" 2>"$T/err"
rc=$?
check "finalize -o an existing file: exit 1 at once, naming it" bash -c "[ $rc = 1 ] && grep -q 'File exists (-f replaces it)' '$T/err'"
check "  the file untouched" cmp "$T/t.mlyze" "$T/keep.mlyze"
finish
