#!/usr/bin/env bash
# The spool cannot grow (here: the target lowered its own file-size limit
# to 1 MiB after the attach, as a full disk would stop it too). The payload
# keeps what it wrote, unsealed; memlyze-detach writes the trace from it,
# says why it is short, exits 1 and leaves nothing in /tmp. (It deleted the
# spool, said "the payload wrote no spool" and exited 0.) The same for a
# target that drops root after the attach.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_spool_full" "no libmemlyze.so in the build"; finish; }

cat > "$T/fsz.c" <<'EOF2'
#define _GNU_SOURCE
/* Lines on stdin: "limit" sets RLIMIT_FSIZE to 1 MiB, "work" makes and
 * frees 200000 blocks (about 2.4 MB of exact-mode spool) and keeps 10 from
 * kept_site. Each command answers with one line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static void *volatile sink;
static void *volatile keep[100];   /* or the compiler drops the calls */
static int nkeep;
__attribute__((noinline)) static void kept_site(void) { keep[nkeep++] = malloc(1000); }
int main(void)
{
    char line[32];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "limit", 5)) { struct rlimit r = { 1 << 20, 1 << 20 }; setrlimit(RLIMIT_FSIZE, &r); }
        if (!strncmp(line, "drop", 4) && setresuid(65534, 65534, 65534)) return 2;
        if (!strncmp(line, "work", 4)) {
            for (int i = 0; i < 10 && nkeep < 100; i++) kept_site();
            for (int i = 0; i < 200000; i++) { sink = malloc(32); free(sink); }
        }
        printf("done\n");
    }
    return 0;
}
EOF2
cc -O1 -g -o "$T/fsz" "$T/fsz.c" || fail "build fsz"

coproc TGT { exec "$T/fsz"; }
pid=$TGT_PID
say() { echo "$1" >&"${TGT[1]}"; read -r -t 30 _ <&"${TGT[0]}"; }
read -r -t 10 _ <&"${TGT[0]}"
check "attach" "$B/bin/memlyze-attach" -q -r 1 -o "$T/t.mlyze" "$pid"
say limit
say work
say work
out=$("$B/bin/memlyze-detach" -q "$pid" 2>&1); rc=$?
check "detach: exit 1, naming the file-size limit" \
    bash -c "[ $rc -eq 1 ] && grep -q \"could not finish writing its spool (the process's file-size limit is 1048576 bytes)\" <<<\"\$0\"" "$out"
check "the trace is written from what the spool holds" "$MEMLYZE" validate "$T/t.mlyze"
check "... with the first round's kept blocks" \
    bash -c "'$MEMLYZE' top --json '$T/t.mlyze' | python3 -c \"
import json, sys
s = [x for x in json.load(sys.stdin)['sites'] if x['frames'][0].startswith('kept_site ')]
sys.exit(not s or sum(x['live_bytes'] for x in s) < 10000)\""
check "nothing is left in /tmp" test ! -e "/tmp/memlyze-$pid"
say work
exec {TGT[1]}>&-
wait "$pid"; rc=$?
check "the target ran on and exited normally" test "$rc" -eq 0
cleanup_state "$pid"

# A daemon dropping root after the attach may no longer write in the
# root-owned spool directory: the seal fails the same way, and the cause
# is named.
if [ "$(id -u)" = 0 ]; then
    coproc TGT { exec "$T/fsz"; }
    pid=$TGT_PID
    read -r -t 10 _ <&"${TGT[0]}"
    "$B/bin/memlyze-attach" -q -r 1 -o "$T/u.mlyze" "$pid" || fail "attach (uid drop)"
    say work
    say drop
    out=$("$B/bin/memlyze-detach" -q "$pid" 2>&1); rc=$?
    check "uid dropped: exit 1, naming the new uid" \
        bash -c "[ $rc -eq 1 ] && grep -q 'the process now runs as uid 65534' <<<\"\$0\"" "$out"
    check "uid dropped: the trace holds the kept blocks" \
        bash -c "'$MEMLYZE' top --json '$T/u.mlyze' | grep -q '\"live_bytes\": *10000'"
    check "uid dropped: nothing is left in /tmp" test ! -e "/tmp/memlyze-$pid"
    exec {TGT[1]}>&-
    wait "$pid"
    cleanup_state "$pid"
else
    skip "uid dropped after attach" "needs root"
fi
finish
