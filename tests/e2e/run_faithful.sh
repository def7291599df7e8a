#!/usr/bin/env bash
# memlyze run leaves the program as it is: its exit status or its death by
# a signal, its signals (SIGTERM passed on), its signal mask; it checks -o
# and its options before the program runs; and what the program does is
# recorded once and whole (reallocarray, _exit, a dlopen'd library).
. "$(dirname "$0")/lib.sh"

cat > "$T/prog.c" <<'EOF'
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static void *volatile keep[1000];
__attribute__((noinline)) void *ra_site(void) { return reallocarray(NULL, 10, 100); }
__attribute__((noinline)) void exit_site(int i) { keep[i] = malloc(1000); }
static void free_half(void) { for (int i = 0; i < 500; i++) free(keep[i]); }
int main(int argc, char **argv)
{
    const char *m = argc > 1 ? argv[1] : "";
    if (!strcmp(m, "segv")) raise(SIGSEGV);
    if (!strcmp(m, "status")) return 7;
    if (!strcmp(m, "errno")) { int e = errno; printf("errno at main %d\n", e); return 0; }
    if (!strcmp(m, "sleep")) { sleep(30); return 0; }
    if (!strcmp(m, "reallocarray")) { for (int i = 0; i < 100; i++) keep[i] = ra_site(); return 0; }
    if (!strcmp(m, "_exit")) { for (int i = 0; i < 1000; i++) exit_site(i); _exit(3); }
    if (!strcmp(m, "quick_exit")) {
        for (int i = 0; i < 1000; i++) exit_site(i);
        at_quick_exit(free_half);
        quick_exit(4);
    }
    if (!strcmp(m, "blocked")) {
        /* A signal blocked and pending from the start, as for sigwait. */
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGUSR2);
        sigprocmask(SIG_BLOCK, &s, NULL);
        kill(getpid(), SIGUSR2);
        free(malloc(10));
        usleep(20000);
        printf("alive\n");
        return 0;
    }
    if (!strcmp(m, "dlopen")) {
        void *h = dlopen(argv[2], RTLD_NOW);
        void *(*f)(int) = h ? (void *(*)(int))dlsym(h, "lib_alloc") : NULL;
        for (int i = 0; f && i < 5; i++) keep[i] = f(777);
        return f ? 0 : 1;
    }
    return 2;
}
EOF
cat > "$T/lib.c" <<'EOF'
#include <stdlib.h>
void *lib_alloc(int n) { return malloc((size_t)n); }
EOF
cc -O1 -g -fno-omit-frame-pointer -o "$T/prog" "$T/prog.c" -ldl || { fail "build prog"; finish; }
cc -O1 -g -shared -fPIC -o "$T/lib.so" "$T/lib.c" || { fail "build lib"; finish; }
status() { python3 -c 'import subprocess, sys; print(subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode)' "$@"; }
top_json() { "$MEMLYZE" top --json -n 50 "$1" | python3 -c "
import json, sys
d = json.load(sys.stdin)
s = [x for x in d['sites'] if x['frames'] and x['frames'][0].startswith(sys.argv[1] + ' ')]
print(int(sum(x['live_bytes'] for x in s)), int(sum(x['samples'] for x in s)))" "$2"; }

# Status: an exit code, and a death by a signal (a supervisor sees both).
check "a program's exit code is memlyze run's" test "$(status "$MEMLYZE" run -o "$T/st.mlyze" -- "$T/prog" status)" = 7
check "a program killed by SIGSEGV: memlyze run dies by SIGSEGV too" \
    test "$(status "$MEMLYZE" run -o "$T/sg.mlyze" -- "$T/prog" segv)" = -11
check "... and its trace is written" "$MEMLYZE" validate "$T/sg.mlyze"

# SIGTERM (timeout, a service manager) goes to the program; the trace is written.
"$MEMLYZE" run -o "$T/tm.mlyze" -- "$T/prog" sleep 2>/dev/null & RP=$!
for _ in $(seq 100); do pgrep -f "^$T/prog sleep" >/dev/null && break; sleep 0.02; done
sleep 0.2
kill -TERM "$RP"
wait "$RP"; rc=$?
check "SIGTERM: passed on, memlyze run dies by it after writing the trace" bash -c \
    "[ $rc -eq 143 ] && '$MEMLYZE' validate '$T/tm.mlyze'"
check "SIGTERM: the program did not outlive it" bash -c "! pgrep -f '^$T/prog sleep'"

# -o and options are checked before the program runs.
touch "$T/exists.mlyze"
out=$("$MEMLYZE" run -o "$T/exists.mlyze" -- touch "$T/ran1" 2>&1); rc=$?
check "-o naming an existing file: refused before the program runs" bash -c \
    "[ $rc -eq 1 ] && [ ! -e '$T/ran1' ] && grep -q 'exists' <<<\"\$0\"" "$out"
out=$("$MEMLYZE" run -o "$T/no/dir/x.mlyze" -- touch "$T/ran2" 2>&1); rc=$?
check "-o in a missing directory: refused before the program runs" bash -c \
    "[ $rc -eq 1 ] && [ ! -e '$T/ran2' ] && grep -q 'cannot write the trace into' <<<\"\$0\"" "$out"
check "--seed 0 is a usage error (0 would mean: no seed)" bash -c \
    "'$MEMLYZE' run --seed 0 -- true 2>/dev/null; [ \$? -eq 2 ]"
"$MEMLYZE" run -r 1G -o "$T/g.mlyze" -- "$T/prog" status 2>/dev/null
check "-r 1G reaches the payload as 1 GiB" bash -c "'$MEMLYZE' stats '$T/g.mlyze' | grep -q '^sampling rate: *1.00 GiB'"

# What the program does is recorded once and whole (exact mode).
"$MEMLYZE" run -r 1 -o "$T/ra.mlyze" -- "$T/prog" reallocarray 2>/dev/null
check "reallocarray: 100 blocks of 1000 B, one sample each (not two)" test "$(top_json "$T/ra.mlyze" ra_site)" = "100000 100"
check "_exit: memlyze run gives its status" test "$(status "$MEMLYZE" run -r 1 -o "$T/ex.mlyze" -- "$T/prog" _exit)" = 3
check "_exit: the profile is sealed, its 1000 blocks in it" test "$(top_json "$T/ex.mlyze" exit_site)" = "1000000 1000"
# The spool cut short by the file-size limit the program inherits: the
# trace holds what was written, and the line says why (it blamed the
# program's death). 200000 blocks need ~2.4 MB of spool in exact mode.
cat > "$T/many.c" <<'EOF'
#include <stdlib.h>
#include <stdio.h>
static void *volatile sink;
int main(int argc, char **argv)
{
    for (int i = 0; i < 200000; i++) { sink = malloc(32); free(sink); }
    /* argv[1]: a directory to remove before the end (the trace's). */
    if (argc > 1) { char cmd[4200]; snprintf(cmd, sizeof cmd, "rm -rf '%s'", argv[1]); if (system(cmd)) return 3; }
    return 0;
}
EOF
cc -O1 -o "$T/many" "$T/many.c" || fail "build many"
out=$(ulimit -f 1024; "$MEMLYZE" run -r 1 -o "$T/fs.mlyze" -- "$T/many" 2>&1)
check "ulimit -f: the profile stops early, saying why" \
    bash -c "grep -q 'the profile stops early: it reached its file-size limit of 1048576 bytes' <<<\"\$0\"" "$out"
check "ulimit -f: the trace holds what was written" "$MEMLYZE" validate "$T/fs.mlyze"
# The trace cannot be written (its directory went away): the spool is kept
# and named, never deleted with the failure.
mkdir "$T/gone"
out=$("$MEMLYZE" run -r 1 -o "$T/gone/g.mlyze" -- "$T/many" "$T/gone" 2>&1); rc=$?
kept=$(sed -n 's/^memlyze run: its spool is kept: memlyze finalize -o [^ ]* //p' <<<"$out")
check "trace not writable: exit 1, the spool kept and named" bash -c "[ $rc -eq 1 ] && [ -n '$kept' ] && [ -s '$kept' ]" "$out"
mkdir "$T/gone"
check "and memlyze finalize turns it into the trace" "$MEMLYZE" finalize -o "$T/gone/g.mlyze" $kept
case "$kept" in /tmp/memlyze-run.*/*) rm -rf "${kept%/*}";; esac
# quick_exit reaches _exit without the PLT; the program's handlers run first.
check "quick_exit: memlyze run gives its status" test "$(status "$MEMLYZE" run -r 1 -o "$T/qx.mlyze" -- "$T/prog" quick_exit)" = 4
check "quick_exit: the profile is sealed after the program's handlers (500 of 1000 blocks live)" \
    test "$(top_json "$T/qx.mlyze" exit_site)" = "500000 1000"
out=$("$MEMLYZE" run -o "$T/bl.mlyze" -- "$T/prog" blocked 2>/dev/null); rc=$?
check "a signal the program blocks, pending at start, stays pending (no death by it)" bash -c \
    "[ $rc -eq 0 ] && [ '$out' = alive ]"
"$MEMLYZE" run -r 1 -o "$T/dl.mlyze" -- "$T/prog" dlopen "$T/lib.so" 2>/dev/null
check "a library dlopen'd just before the exit: its code is named" test "$(top_json "$T/dl.mlyze" lib_alloc)" = "3885 5"

# No profile at all (a static program): still the program's own status.
if cc -static -O1 -o "$T/static" "$T/prog.c" 2>/dev/null; then
    check "a static program: its status, though it wrote no profile" \
        test "$(status "$MEMLYZE" run -o "$T/sx.mlyze" -- "$T/static" status)" = 7
else
    skip "a static program: its status" "cc -static fails: no static libc (Debian package libc6-dev)"
fi
# C says main starts with errno 0: the payload's constructor probes files
# that are not there (ENOENT) and must not leave that behind.
for mode in "" "-r 1" "--got"; do
    # shellcheck disable=SC2086
    out=$("$MEMLYZE" run $mode -o "$T/errno.mlyze" -- "$T/prog" errno 2>/dev/null); rm -f "$T/errno.mlyze"
    check "run ${mode:-sampled}: main starts with errno 0" test "$out" = "errno at main 0"
done
check "nothing left in /tmp" bash -c "! ls -d /tmp/memlyze-run.* 2>/dev/null | xargs -r -n1 sh -c 'ls \"\$0\"' | grep -q spool"
finish
