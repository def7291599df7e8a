#!/usr/bin/env bash
# A second attach at another rate starts every thread's sampler afresh.
# The payload stays mapped after a detach, and each thread kept the
# countdown drawn in the first session: after one at 512 KiB, an exact
# session (-r 1) missed each worker's first half-megabyte; after one at
# 4 KiB, a session at 64 MiB weighed a sample per thread as 64 MiB.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_reattach_rate" "no libmemlyze.so in the build"; finish; }

cat > "$T/phases.c" <<'EOF2'
/* Four workers. At each "go" line on stdin every worker runs the next
 * phase, then main prints "doneN": phase 1 makes and frees 64 blocks of
 * 100 B (the workers' samplers draw their countdowns), phase 2 keeps 1000
 * blocks of 100 B each from site_kept, phase 3 ends. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define WORKERS 4
static pthread_barrier_t start, done;
static int phase;
static void *volatile sink;   /* or the compiler drops free(malloc(n)) */
__attribute__((noinline)) static void *site_kept(void) { return malloc(100); }
static void *worker(void *a)
{
    (void)a;
    for (;;) {
        pthread_barrier_wait(&start);
        if (phase == 1) for (int i = 0; i < 64; i++) { sink = malloc(100); free(sink); }
        if (phase == 2) for (int i = 0; i < 1000; i++) { char *p = site_kept(); if (p) p[0] = 1; }
        pthread_barrier_wait(&done);
        if (phase == 3) return NULL;
    }
}
int main(void)
{
    pthread_t t[WORKERS];
    char line[16];
    pthread_barrier_init(&start, NULL, WORKERS + 1);
    pthread_barrier_init(&done, NULL, WORKERS + 1);
    for (int i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, worker, NULL);
    printf("ready\n");
    fflush(stdout);
    while (phase < 3 && fgets(line, sizeof line, stdin)) {
        phase++;
        pthread_barrier_wait(&start);
        pthread_barrier_wait(&done);
        printf("done%d\n", phase);
        fflush(stdout);
    }
    for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
    return 0;
}
EOF2
cc -O1 -g -fno-omit-frame-pointer -pthread -o "$T/phases" "$T/phases.c" || fail "build phases"

# kept TRACE -> "live_bytes samples" of site_kept
kept() { "$MEMLYZE" top --json -n 100 "$1" | python3 -c "
import json, sys
s = [x for x in json.load(sys.stdin)['sites'] if x['frames'] and x['frames'][0].startswith('site_kept ')]
print(int(sum(x['live_bytes'] for x in s)), int(sum(x['live_samples'] for x in s)))"; }

# one FIRST SECOND: attach at FIRST, phase 1, detach, attach at SECOND,
# phase 2, snapshot and detach; the snapshot and the trace in $T/r.*
one() {
    rm -f "$T"/r.*
    coproc TGT { exec "$T/phases"; }
    local pid=$TGT_PID line
    read -r -t 10 line <&"${TGT[0]}"
    "$B/bin/memlyze-attach" -q -r "$1" -o "$T/r.first.mlyze" "$pid" || fail "attach at $1"
    echo go >&"${TGT[1]}"; read -r -t 20 line <&"${TGT[0]}"
    "$B/bin/memlyze-detach" -q "$pid" || fail "detach after $1"
    "$B/bin/memlyze-attach" -q -r "$2" -o "$T/r.second.mlyze" "$pid" || fail "attach at $2"
    echo go >&"${TGT[1]}"; read -r -t 20 line <&"${TGT[0]}"
    "$MEMLYZE" snapshot -q -o "$T/r.snap.mlyze" "$pid" || fail "snapshot at $2"
    "$B/bin/memlyze-detach" -q "$pid" || fail "detach after $2"
    echo go >&"${TGT[1]}"
    exec {TGT[1]}>&-
    wait "$pid" 2>/dev/null
    cleanup_state "$pid"
}

one 512k 1
check "512 KiB then exact: the snapshot has every block of every worker" test "$(kept "$T/r.snap.mlyze")" = "400000 4000"
check "512 KiB then exact: so has the trace" test "$(kept "$T/r.second.mlyze")" = "400000 4000"
# 4000 blocks of 100 B at 64 MiB: 0.006 samples expected. A stale 4 KiB
# countdown gave each worker one, weighed as 64 MiB.
one 4k 64m
n=$(kept "$T/r.second.mlyze" | cut -d' ' -f2)
check "4 KiB then 64 MiB: no sample forced per thread ($n)" test "${n:-9}" -le 1
finish
