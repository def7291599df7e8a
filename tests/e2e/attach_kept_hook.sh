#!/usr/bin/env bash
# A program that took malloc's address while attached (a function pointer
# loaded from its patched GOT) keeps calling our hook after the detach.
# The hook only forwards then: it maps nothing (it once claimed a ring and
# mapped a 4 MiB chunk that no detach released), and the blocks are fine.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "attach_kept_hook" "no libmemlyze.so in the build"; finish; }

cat > "$T/kept.c" <<'EOF'
/* Lines on stdin: "take" keeps &malloc and &free (the GOT's values now);
 * "call" makes 20000 blocks of 64 KiB through them in a new thread (whose
 * first sample claims a ring) and prints "called". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static void *(*volatile kept_malloc)(size_t);
static void (*volatile kept_free)(void *);
static void *calls(void *a)
{
    (void)a;
    for (int i = 0; i < 20000; i++) {
        char *p = kept_malloc(65536);
        if (!p) return NULL;
        p[0] = 1;
        kept_free(p);
    }
    return NULL;
}
int main(void)
{
    char line[64];
    printf("ready\n");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "take", 4)) { kept_malloc = malloc; kept_free = free; printf("taken\n"); }
        if (!strncmp(line, "call", 4)) {
            pthread_t t;
            pthread_create(&t, NULL, calls, NULL);
            pthread_join(t, NULL);
            printf("called\n");
        }
        fflush(stdout);
    }
    return 0;
}
EOF
cc -O2 -g -pthread -fPIE -pie -o "$T/kept" "$T/kept.c" || fail "build kept"

coproc TGT { exec "$T/kept"; }
pid=$TGT_PID
read -r -t 10 line <&"${TGT[0]}"
check "attach" "$B/bin/memlyze-attach" -o "$T/kept.mlyze" "$pid"
echo take >&"${TGT[1]}"
read -r -t 10 line <&"${TGT[0]}"
check "detach" "$B/bin/memlyze-detach" "$pid"
cp "/proc/$pid/maps" "$T/maps.before"
echo call >&"${TGT[1]}"
read -r -t 30 line <&"${TGT[0]}"
[ "$line" = called ] && pass "calls through kept hook pointers work after the detach" \
                     || fail "calls through kept hook pointers work after the detach" "$line"
# The thread's stack may stay mapped (glibc caches it); nothing else may.
added=$(diff "$T/maps.before" "/proc/$pid/maps" | python3 -c '
import sys
n = 0
for l in sys.stdin:
    if l.startswith("> "):
        a, b = (int(x, 16) for x in l.split()[1].split("-"))
        n += b - a == 4 << 20
print(n)')
[ "$added" = 0 ] && pass "no 4 MiB ring chunk mapped by a hook after the detach" \
                 || fail "no 4 MiB ring chunk mapped by a hook after the detach" "$(diff "$T/maps.before" "/proc/$pid/maps" | grep '^>')"
exec {TGT[1]}>&-
wait "$pid" 2>/dev/null
cleanup_state "$pid"
finish
