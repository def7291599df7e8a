#!/usr/bin/env bash
# Every allocation entry point glibc has, at -r 1, through LD_PRELOAD and
# through GOT patching: each site's live bytes in the trace are what it
# asked for (pvalloc: whole pages, what it allocates).
. "$(dirname "$0")/lib.sh"

cat > "$T/api.c" <<'EOF'
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define NI __attribute__((noinline))
static void *volatile keep[16];
NI void at_malloc(void) { keep[0] = malloc(100); }
NI void at_calloc(void) { keep[1] = calloc(10, 30); }
NI void at_realloc(void) { keep[2] = realloc(malloc(50), 500); }
NI void at_aligned_alloc(void) { keep[3] = aligned_alloc(64, 640); }
NI void at_posix_memalign(void) { void *p = NULL; if (!posix_memalign(&p, 128, 1280)) keep[4] = p; }
NI void at_memalign(void) { keep[5] = memalign(256, 2560); }
NI void at_valloc(void) { keep[6] = valloc(5000); }
NI void at_pvalloc(void) { keep[7] = pvalloc(123); }
NI void at_reallocarray(void) { keep[8] = reallocarray(NULL, 7, 100); }
NI void at_strdup(void) { keep[9] = strdup("hello"); }
int main(void)
{
    at_malloc(); at_calloc(); at_realloc(); at_aligned_alloc(); at_posix_memalign();
    at_memalign(); at_valloc(); at_pvalloc(); at_reallocarray(); at_strdup();
    for (int i = 0; i < 10; i++) if (!keep[i]) { printf("failed %d\n", i); return 1; }
    printf("ok\n");
    return 0;
}
EOF
cc -O1 -g -w -o "$T/api" "$T/api.c" || { fail "build api"; finish; }
page=$(getconf PAGESIZE)
want="at_malloc 100 at_calloc 300 at_realloc 500 at_aligned_alloc 640 at_posix_memalign 1280 at_memalign 2560 at_valloc 5000 at_pvalloc $page at_reallocarray 700 at_strdup 6"
for mode in preload got; do
    args=""; [ "$mode" = got ] && args="--got"
    # shellcheck disable=SC2086
    "$MEMLYZE" run -r 1 $args -o "$T/api-$mode.mlyze" -- "$T/api" > "$T/api-$mode.out" 2>&1
    "$MEMLYZE" top -n 50 --json "$T/api-$mode.mlyze" > "$T/api-$mode.json" 2>/dev/null
    got=$(python3 - "$T/api-$mode.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
sites = ["at_malloc", "at_calloc", "at_realloc", "at_aligned_alloc", "at_posix_memalign", "at_memalign",
         "at_valloc", "at_pvalloc", "at_reallocarray", "at_strdup"]
out = []
for name in sites:
    b = sum(s["live_bytes"] for s in d["sites"] if any(f.split(" ")[0] == name for f in s["frames"]))
    out += [name, str(int(round(b)))]
print(" ".join(out))
PY
)
    grep -qx ok "$T/api-$mode.out" && [ "$got" = "$want" ] \
        && pass "$mode: every entry point's live bytes, exact" \
        || fail "$mode: every entry point's live bytes, exact" "got: $got; want: $want; $(head -c 200 "$T/api-$mode.out")"
done
finish
