#!/usr/bin/env bash
# What the target owns stays its own. (1) A program that dup2()s its own
# file onto every descriptor it did not open (a shell's `exec 4>file`, a
# daemon reusing numbers) must not get spool bytes in that file, and the
# recording must go on. (2) An attach that fails half-way (here: the
# descriptors run out while the GOT is patched) is undone whole: no drain
# thread, no spool, no descriptor kept, and a later attach works. (3) The
# drain thread runs at the nice of the thread it was created from, not at
# the -20 that thread had while the injector borrowed it.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_fds" "no libmemlyze.so in the build"; finish; }
command -v prlimit >/dev/null || { skip "attach_fds" "prlimit (util-linux) not installed"; finish; }

cat > "$T/fdtarget.c" <<'EOF'
/* fdtarget clobber OUT: after a line on stdin, dup2()s OUT onto every open
 *   descriptor above 2, writes 100 lines into OUT and keeps 100 blocks of
 *   1000 B from after_clobber; prints "done", exits when stdin closes.
 * fdtarget scarce: RLIMIT_NOFILE 64 (hard limit 1024), every descriptor
 *   but the 2 highest taken; opens and closes a file every 10 ms until
 *   stdin closes, then prints how many opens failed. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
static void *volatile keep[100];
__attribute__((noinline)) void after_clobber(int i) { keep[i] = malloc(1000); }
int main(int argc, char **argv)
{
    char buf[64];
    if (argc == 3 && !strcmp(argv[1], "clobber")) {
        printf("ready\n");
        fflush(stdout);
        if (read(0, buf, sizeof buf) <= 0) return 1;
        int own = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (own < 0) return 1;
        for (int fd = 3; fd < 1024; fd++)
            if (fd != own && fcntl(fd, F_GETFD) >= 0) dup2(own, fd);
        for (int i = 0; i < 100; i++) {
            after_clobber(i);
            char line[16];
            int n = snprintf(line, sizeof line, "line %03d\n", i);
            if (write(own, line, (size_t)n) != n) return 1;
        }
        printf("done\n");
        fflush(stdout);
        while (read(0, buf, sizeof buf) > 0) {}
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "scarce")) {
        struct rlimit rl = { 64, 1024 };
        setrlimit(RLIMIT_NOFILE, &rl);
        free(malloc(10));
        int fds[64], n = 0, fd;
        while (n < 64 && (fd = open("/dev/null", O_RDONLY)) >= 0) fds[n++] = fd;
        close(fds[--n]);
        close(fds[--n]);
        printf("ready\n");
        fflush(stdout);
        int fails = 0;
        fcntl(0, F_SETFL, O_NONBLOCK);
        for (;;) {
            ssize_t r = read(0, buf, sizeof buf);
            if (r == 0) break;
            int f = open("/dev/null", O_RDONLY);
            if (f < 0) fails++;
            else close(f);
            usleep(10000);
        }
        printf("open failures: %d\n", fails);
        return 0;
    }
    return 2;
}
EOF
cc -O1 -g -fno-omit-frame-pointer -o "$T/fdtarget" "$T/fdtarget.c" || { fail "build fdtarget"; finish; }
wait_for() { for _ in $(seq 500); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done; return 1; }
drains() { cat /proc/"$1"/task/*/comm 2>/dev/null | grep -c '^memlyze-drain$'; }

# 1. Every descriptor clobbered while attached (exact mode).
rm -f "$T/c.in"; mkfifo "$T/c.in"
"$T/fdtarget" clobber "$T/own.txt" < "$T/c.in" > "$T/c.out" 2>&1 &
CP=$!
exec {CW}>"$T/c.in"
wait_for "$T/c.out" '^ready'
"$ATTACH" -q -r 1 -o "$T/c.mlyze" "$CP" || fail "clobber: attach"
ours=$(for f in /proc/"$CP"/fd/*; do case $(readlink "$f") in *memlyze*) basename "$f";; esac; done | tr '\n' ' ')
lim=$(awk '/^Max open files/ { print ($4 > 1024 ? 1024 : $4) }' "/proc/$CP/limits")
check "clobber: the payload's descriptors (memfd, spool) sit at 3/4 of the limit and above" bash -c \
    "[ \$(wc -w <<<'$ours') -ge 2 ] && for n in $ours; do [ \$n -ge $((lim / 4 * 3)) ] || exit 1; done"
echo go >&$CW
wait_for "$T/c.out" '^done'
sleep 1.2          # the drain writes its buffer out about once a second
"$DETACH" -q "$CP" || fail "clobber: detach"
exec {CW}>&-; wait "$CP"
for i in $(seq 0 99); do printf 'line %03d\n' "$i"; done > "$T/own.want"
check "clobber: the program's file holds only its own 100 lines" cmp "$T/own.txt" "$T/own.want"
check "clobber: the trace is valid" "$MEMLYZE" validate "$T/c.mlyze"
check "clobber: the blocks made after the clobber are recorded (100000 B live)" bash -c \
    "'$MEMLYZE' top --json -n 50 '$T/c.mlyze' | python3 -c \"
import json, sys
d = json.load(sys.stdin)
v = sum(s['live_bytes'] for s in d['sites'] if s['frames'] and s['frames'][0].startswith('after_clobber '))
assert v == 100000, v\""

# 2. Two descriptors free: the payload starts, then cannot patch the GOT.
rm -f "$T/s.in"; mkfifo "$T/s.in"
"$T/fdtarget" scarce < "$T/s.in" > "$T/s.out" 2>&1 &
SP=$!
exec {SW}>"$T/s.in"
wait_for "$T/s.out" '^ready'
out=$("$ATTACH" -o "$T/s.mlyze" "$SP" 2>&1); rc=$?
check "scarce: the attach fails and says why" bash -c "[ $rc -ne 0 ] && grep -q 'could not start' <<<\"\$0\"" "$out"
check "scarce: no drain thread is left running" test "$(drains "$SP")" -eq 0
check "scarce: no spool directory is left" test ! -e "/tmp/memlyze-$SP"
check "scarce: the spool's descriptor was given back" bash -c \
    "! ls -l /proc/$SP/fd | grep -q 'memlyze-$SP'"
out=$("$DETACH" "$SP" 2>&1); rc=$?
check "scarce: detach finds nothing attached" bash -c "[ $rc -ne 0 ] && grep -q 'not attached' <<<\"\$0\"" "$out"
prlimit --pid "$SP" --nofile=1024:1024 || fail "scarce: prlimit"
check "scarce: with descriptors to spare, a new attach works" "$ATTACH" -q -o "$T/s.mlyze" "$SP"
check "scarce: ... and its detach" "$DETACH" -q "$SP"
exec {SW}>&-; wait "$SP"
check "scarce: the program's own opens never failed" grep -q '^open failures: 0$' "$T/s.out"
check "scarce: the trace of the second attach is valid" "$MEMLYZE" validate "$T/s.mlyze"

# 3. A target at nice 5.
rm -f "$T/n.in"; mkfifo "$T/n.in"
nice -n 5 "$T/fdtarget" scarce < "$T/n.in" > "$T/n.out" 2>&1 &
NP=$!
exec {NW}>"$T/n.in"
wait_for "$T/n.out" '^ready'
prlimit --pid "$NP" --nofile=1024:1024 || fail "nice: prlimit"
"$ATTACH" -q -o "$T/n.mlyze" "$NP" || fail "nice: attach"
nices=$(for t in /proc/"$NP"/task/*; do echo "$(cat "$t/comm") $(awk '{ print $19 }' "$t/stat")"; done)
check "nice: the drain thread runs at the target's nice 5" bash -c "grep -qx 'memlyze-drain 5' <<<\"\$0\"" "$nices"
check "nice: the target's thread has its nice back" bash -c "grep -qx 'fdtarget 5' <<<\"\$0\"" "$nices"
"$DETACH" -q "$NP" || fail "nice: detach"
exec {NW}>&-; wait "$NP"
finish
