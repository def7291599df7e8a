#!/usr/bin/env bash
# Exact mode (-r 1) stays true where the hooks are entered in odd ways:
#  - a signal handler frees blocks while its thread is inside a sample path
#    (which must not push to the thread's ring): the FREEs still reach the
#    trace, so no freed block looks live, and handler allocations that could
#    not be recorded are said in the loss line;
#  - realloc called from code without frame pointers: its stack is the
#    caller's (realloc's hook once realigned its stack, and the walk took a
#    copy of the return address for the caller's frame);
#  - a failed request of 2^63 bytes or more (malloc(-1 GiB), realloc to it,
#    a calloc whose product is that large) moved the sampler's countdown up
#    and hid the thread's next ~2^64 - size bytes, even at -r 1.
# Both through LD_PRELOAD and through GOT patching (--got, attach's path).
. "$(dirname "$0")/lib.sh"

cat > "$T/sig.c" <<'EOF'
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#define NI __attribute__((noinline))
#define NPOOL 4000
static void *pool[NPOOL];
static volatile int nfreed, ncalls;
static void *volatile hb;
NI void pool_alloc(void) { for (int i = 0; i < NPOOL; i++) pool[i] = malloc(5000); }
NI void handler_alloc(void) { void *o = hb; hb = malloc(24); free(o); }
static void on_alrm(int s) { (void)s; ncalls++; if (nfreed < NPOOL) free(pool[nfreed++]); handler_alloc(); }
NI void churn(int d) { if (d) { churn(d - 1); return; } for (int i = 0; i < 2000; i++) { void *volatile p = malloc(32); free(p); } }
int main(void)
{
    pool_alloc();
    signal(SIGALRM, on_alrm);
    struct itimerval it = { { 0, 50 }, { 0, 50 } }, z = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &it, 0);
    while (nfreed < NPOOL) churn(30);
    setitimer(ITIMER_REAL, &z, 0);
    printf("freed %d\n%d\n", nfreed, ncalls);
    return 0;
}
EOF
cat > "$T/rs.c" <<'EOF'
#include <stdlib.h>
#include <string.h>
#define NI __attribute__((noinline))
void *keep[100];
int nk;
NI void *grow(void *p, size_t n) { volatile char buf[64]; memset((char *)buf, 0, 64); return realloc(p, n + buf[1]); }
NI void caller_A(void) { for (int i = 0; i < 10; i++) keep[nk++] = grow(malloc(8), 1000); }
NI void caller_B(void) { for (int i = 0; i < 20; i++) keep[nk++] = grow(malloc(8), 3000); }
int main(void) { caller_A(); caller_B(); return 0; }
EOF
# A function with a VLA (its CFA hangs on rbp) entered once through A and
# once straight from the same call site, at a depth that puts its callee X
# at the same sp: the second walk meets the first at X, above A's return
# address still in Y's unused space. Its stack must not have A (it had: the
# saved walk's frames were taken without proving Y's rbp).
cat > "$T/vla.c" <<'EOF'
#include <alloca.h>
#include <stdio.h>
#include <stdlib.h>
#define NI __attribute__((noinline))
void *volatile keep[2];
static long x_sp;
NI void X(size_t size) { x_sp = (long)__builtin_frame_address(0); if (size) keep[size > 2000] = malloc(size); }
NI void Y(size_t n, size_t size) { char *buf = alloca(n); __asm__ volatile("" : : "r"(buf) : "memory"); X(size); }
NI void A(size_t n, size_t size) { volatile char pad[200]; pad[0] = 1; Y(n, size); __asm__ volatile("" : : "r"(pad)); }
typedef void (*fn)(size_t, size_t);
int main(void)
{
    /* One call site for all: rounds without allocating find the depth of
     * Y that puts X at the same sp, then one round allocates. */
    fn fns[2] = { A, Y };
    size_t n[2] = { 256, 256 }, size[2] = { 0, 0 };
    long sp[2];
    for (;;) {
        for (int i = 0; i < 2; i++) {
            fn volatile f = fns[i];
            f(n[i], size[i]);
            sp[i] = x_sp;
        }
        if (size[0]) break;
        if (sp[0] == sp[1]) { size[0] = 1111; size[1] = 2222; }
        else if ((n[1] += 16) > 4096) { printf("no depth puts X at the same sp\n"); return 2; }
    }
    printf("ok\n");
    return 0;
}
EOF
cat > "$T/huge.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
static void *volatile keep[3][100];
__attribute__((noinline)) static void kept_after(int k) { for (int i = 0; i < 100; i++) keep[k][i] = malloc(1000); }
int main(void)
{
    void *volatile x = malloc((size_t)0 - ((size_t)1 << 30));
    kept_after(0);
    x = calloc((size_t)1 << 32, ((size_t)1 << 32) - 4);
    kept_after(1);
    void *p = malloc(16);
    x = realloc(p, (size_t)0 - ((size_t)1 << 30));
    free(p);
    kept_after(2);
    printf("%s\n", x ? "allocated?" : "ok");
    return 0;
}
EOF
cc -O0 -g -o "$T/vla" "$T/vla.c" || fail "build vla"
cc -O1 -g -fno-omit-frame-pointer -o "$T/sig" "$T/sig.c" || fail "build sig"
# -O2 without -fno-omit-frame-pointer: grow() keeps no frame pointer.
cc -O2 -g -o "$T/rs" "$T/rs.c" || fail "build rs"
cc -O1 -g -w -o "$T/huge" "$T/huge.c" || fail "build huge"

# live bytes per site whose frames contain FUNCTION (top --json)
site_bytes() {
    python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(int(round(sum(s["live_bytes"] for s in d["sites"]
                    if any(f.startswith(sys.argv[2] + " ") for f in s["frames"])))))
PY
}

for mode in preload got; do
    args=; [ $mode = got ] && args=--got
    # shellcheck disable=SC2086
    "$MEMLYZE" run -r 1 $args -o "$T/sig-$mode.mlyze" -- "$T/sig" > "$T/sig-$mode.out" 2> "$T/sig-$mode.err"
    check "$mode: handler program ran to its end" grep -qx "freed 4000" "$T/sig-$mode.out"
    "$MEMLYZE" top --by count -n 100000 --json "$T/sig-$mode.mlyze" > "$T/sig-$mode.json" 2>/dev/null
    # Per site: live objects, and allocations recorded.
    read -r pool_live h_live h_recorded < <(python3 - "$T/sig-$mode.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
def at(fn, key):
    return sum(s[key] for s in d["sites"] if any(f.startswith(fn + " ") for f in s["frames"]))
print(at("pool_alloc", "live_samples"), at("handler_alloc", "live_samples"), at("handler_alloc", "samples"))
PY
)
    given_up=$(sed -n 's/.* \([0-9]*\) samples given up.*/\1/p' "$T/sig-$mode.err" | head -1)
    frees_lost=$(sed -n 's/.* \([0-9]*\) frees not recorded.*/\1/p' "$T/sig-$mode.err" | head -1)
    # A FREE that cannot wait in the ring's stash (full, e.g. while the
    # thread waits for room in its ring) is lost: each leaves one phantom,
    # and the loss line counts it. None is silent. (The handler's last
    # block is really live.)
    phantoms=$((pool_live + h_live))
    [ "$phantoms" -ge "${frees_lost:-0}" ] && [ "$phantoms" -le $((${frees_lost:-0} + 1)) ] \
        && pass "$mode: blocks freed by a signal handler are not live, or said lost (${frees_lost:-0} lost)" \
        || fail "$mode: blocks freed by a signal handler are not live, or said lost" \
                "$pool_live + $h_live live at the handler's sites, ${frees_lost:-0} frees said lost"
    # A handler allocation is recorded, or, when it came while the thread
    # was sampling, counted in the loss line: every one, those that came
    # while the thread was inside the real malloc of a sample path too (a
    # few % were neither).
    calls=$(sed -n 2p "$T/sig-$mode.out")
    [ -n "$calls" ] && [ "$h_recorded" -le "$calls" ] && [ $((h_recorded + ${given_up:-0})) -ge "$calls" ] \
        && pass "$mode: handler allocations recorded ($h_recorded) or said lost (${given_up:-0}) of $calls" \
        || fail "$mode: handler allocations recorded or said lost" "$h_recorded recorded + ${given_up:-0} lost, of $calls calls"

    # shellcheck disable=SC2086
    "$MEMLYZE" run -r 1 $args -o "$T/vla-$mode.mlyze" -- "$T/vla" > "$T/vla-$mode.out" 2>&1
    "$MEMLYZE" top --json "$T/vla-$mode.mlyze" > "$T/vla-$mode.json" 2>/dev/null
    stacks=$(python3 - "$T/vla-$mode.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for size in (1111, 2222):
    s = [s for s in d["sites"] if round(s["live_bytes"]) == size]
    print(size, ",".join(f.split(" ")[0] for f in s[0]["frames"][:4]) if s else "none")
PY
)
    grep -q '^ok' "$T/vla-$mode.out" && grep -qx '1111 X,Y,A,main' <<<"$stacks" && grep -qx '2222 X,Y,main,__libc_start_call_main' <<<"$stacks" \
        && pass "$mode: a VLA frame met at the same sp from another caller keeps its true callers" \
        || fail "$mode: a VLA frame met at the same sp from another caller keeps its true callers" \
                "$(head -1 "$T/vla-$mode.out"); $(tr '\n' ';' <<<"$stacks")"

    # shellcheck disable=SC2086
    "$MEMLYZE" run -r 1 $args -o "$T/huge-$mode.mlyze" -- "$T/huge" > "$T/huge-$mode.out" 2>&1
    "$MEMLYZE" top --json "$T/huge-$mode.mlyze" > "$T/huge-$mode.json" 2>/dev/null
    k=$(site_bytes "$T/huge-$mode.json" kept_after)
    grep -qx ok "$T/huge-$mode.out" && [ "$k" = 300000 ] \
        && pass "$mode: failed requests of 2^63 bytes and more hide nothing after them (kept_after $k B)" \
        || fail "$mode: failed requests of 2^63 bytes and more hide nothing after them" "kept_after $k B (300000); $(head -c 200 "$T/huge-$mode.out")"

    # shellcheck disable=SC2086
    "$MEMLYZE" run -r 1 $args -o "$T/rs-$mode.mlyze" -- "$T/rs" > /dev/null 2>&1
    "$MEMLYZE" top --json "$T/rs-$mode.mlyze" > "$T/rs-$mode.json" 2>/dev/null
    a=$(site_bytes "$T/rs-$mode.json" caller_A); b=$(site_bytes "$T/rs-$mode.json" caller_B)
    [ "$a" = 10000 ] && [ "$b" = 60000 ] \
        && pass "$mode: realloc from a frameless function keeps its callers (A $a B, B $b B)" \
        || fail "$mode: realloc from a frameless function keeps its callers" "caller_A $a B (10000), caller_B $b B (60000)"
done
finish
