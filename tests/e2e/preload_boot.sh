#!/usr/bin/env bash
# The preload library's boot arena: when dlsym allocates while memlyze looks
# up the real malloc (tests/targets/dlsym_alloc.c, preloaded first, does),
# those blocks come from a static arena, and freeing them later must never
# reach the real free ("free(): invalid pointer"). Sampled, exact and GOT
# mode, through memlyze run and through LD_PRELOAD directly.
. "$(dirname "$0")/lib.sh"
cc -O2 -g -shared -fPIC -o "$T/shim.so" "$ROOT/tests/targets/dlsym_alloc.c" -ldl || fail "build shim"
cc -O2 -g -pthread -o "$T/churn" "$ROOT/bench/workloads/churn.c" || fail "build churn"
LIB="$B/lib/libmemlyze-preload.so"

for mode in "-r 512k" "-r 1" "--got"; do
    LD_PRELOAD="$T/shim.so" "$MEMLYZE" run $mode -o "$T/r.mlyze" "$T/churn" threads 2 20000 > "$T/out" 2>&1
    rc=$?
    check "run $mode with a dlsym that allocates: exit 0" bash -c "[ $rc -eq 0 ] || { cat '$T/out'; false; }"
    check "run $mode: trace valid" "$MEMLYZE" validate "$T/r.mlyze"
    check "run $mode: the churn's allocations recorded" \
        bash -c "'$MEMLYZE' stats '$T/r.mlyze' | awk '\$1 == \"alloc\" { n = \$2 } END { exit !(n > 10) }'"
    rm -f "$T"/r.mlyze*
done
for rate in 524288 1; do
    LD_PRELOAD="$T/shim.so $LIB" MEMLYZE_RATE=$rate MEMLYZE_SPOOL="$T/sp.$rate" "$T/churn" threads 2 20000 > "$T/out" 2>&1
    rc=$?
    check "LD_PRELOAD=shim,memlyze at rate $rate: exit 0" bash -c "[ $rc -eq 0 ] || { cat '$T/out'; false; }"
done
finish
