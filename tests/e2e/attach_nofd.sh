#!/usr/bin/env bash
# A detach while the target has no free file descriptor: the payload cannot
# read /proc/self/maps to restore its GOT slots. It still stops sampling and
# seals its spool; memlyze-detach writes the trace, names that cause, exits
# 1, and leaves nothing in /tmp. (It said "GOT slots could not be written",
# wrote no trace and left the spool.) A later attach and detach finish the
# job.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_nofd" "no libmemlyze.so in the build"; finish; }

cat > "$T/fds.c" <<'EOF2'
/* Lines on stdin: "fill" opens /dev/null until no descriptor is left,
 * "unfill" closes them; "work" keeps 100 blocks of 1000 B from work_site.
 * Each command answers with one line. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static int fds[256], nfds;
static void *volatile keep[1000];
static int nkeep;
__attribute__((noinline)) static void work_site(void) { keep[nkeep++] = malloc(1000); }
int main(void)
{
    struct rlimit r = { 128, 128 };
    setrlimit(RLIMIT_NOFILE, &r);
    char line[32];
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "fill", 4)) { int fd; while (nfds < 256 && (fd = open("/dev/null", O_RDONLY)) >= 0) fds[nfds++] = fd; }
        if (!strncmp(line, "unfill", 6)) while (nfds) close(fds[--nfds]);
        if (!strncmp(line, "work", 4)) for (int i = 0; i < 100 && nkeep < 1000; i++) work_site();
        printf("done\n");
    }
    return 0;
}
EOF2
cc -O1 -g -o "$T/fds" "$T/fds.c" || fail "build fds"

coproc TGT { exec "$T/fds"; }
pid=$TGT_PID
say() { echo "$1" >&"${TGT[1]}"; read -r -t 20 _ <&"${TGT[0]}"; }
read -r -t 10 _ <&"${TGT[0]}"
check "attach" "$B/bin/memlyze-attach" -q -r 1 -o "$T/t1.mlyze" "$pid"
say work
say fill
out=$("$B/bin/memlyze-detach" -q "$pid" 2>&1); rc=$?
check "detach with no free descriptor: exit 1, naming the cause" \
    bash -c "[ $rc -eq 1 ] && grep -q 'no file descriptor was free to read /proc/self/maps' <<<\"\$0\"" "$out"
check "... and the trace is written all the same, with the blocks" \
    bash -c "'$MEMLYZE' top --json '$T/t1.mlyze' | grep -q '\"live_bytes\": *100000'"
check "... and nothing is left in /tmp" test ! -e "/tmp/memlyze-$pid"
say unfill
check "a later attach works" "$B/bin/memlyze-attach" -q -r 1 -o "$T/t2.mlyze" "$pid"
say work
check "and its detach succeeds" "$B/bin/memlyze-detach" -q "$pid"
check "the second trace has the second round" \
    bash -c "'$MEMLYZE' top --json '$T/t2.mlyze' | grep -q '\"live_bytes\": *100000'"
exec {TGT[1]}>&-
wait "$pid" 2>/dev/null
cleanup_state "$pid"
finish
