#!/usr/bin/env bash
# detach_dying.sh - memlyze-detach right after the attached target was
# killed, while the kernel still tears down its heap: the maps are empty
# and the main thread a zombie already, which preflight once took for "a
# static program" or "pthread_exit in main". Now it waits for the end and
# detaches what the process left: "exited while attached", and the trace.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"

cat > "$T/heap.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    long n = atol(argv[1]);
    char line[16];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    if (!fgets(line, sizeof line, stdin)) return 1;
    void **keep = malloc((size_t)n * sizeof *keep);
    for (long i = 0; i < n; i++) { keep[i] = malloc(256); memset(keep[i], 1, 256); }
    printf("allocated\n");
    for (;;) pause();
}
EOF
cc -O1 -g -o "$T/heap" "$T/heap.c" || { fail "build heap"; finish; }

runs=3 good=0 msgs=""
for i in $(seq $runs); do
    mkfifo "$T/in$i"
    "$T/heap" 1000000 <"$T/in$i" >"$T/heap$i.out" 2>&1 &
    exec {IN}>"$T/in$i"
    HP=$(pgrep -n -f "$T/heap 1000000")
    for _ in $(seq 100); do grep -q ready "$T/heap$i.out" && break; sleep 0.05; done
    "$ATTACH" -q "$HP" || { fail "attach $i"; break; }
    echo go >&"$IN"
    for _ in $(seq 400); do grep -q allocated "$T/heap$i.out" && break; sleep 0.05; done
    kill -KILL "$HP"
    out=$("$DETACH" -o "$T/d$i.mlyze" "$HP" 2>&1); rc=$?
    exec {IN}>&-
    wait "$HP" 2>/dev/null
    if [ $rc -eq 0 ] && grep -q "exited while attached" <<<"$out" && [ -s "$T/d$i.mlyze" ]; then good=$((good + 1))
    else msgs+="run $i: exit $rc: $out; "; "$DETACH" -q -o "$T/again$i.mlyze" "$HP" >/dev/null 2>&1; fi
    cleanup_state "$HP"
done
[ "$good" -eq "$runs" ] && pass "detach of a target killed a moment before: 'exited while attached' and its trace ($good/$runs)" \
    || fail "detach of a target killed a moment before" "$msgs"
finish
