#!/usr/bin/env bash
# --hook where an inline hook would harm or miscount: a function with
# another symbol in its first bytes (code elsewhere jumps there) is refused,
# by memlyze run and by memlyze-attach, before anything is written; a
# function re-hooked as another KIND is refused by name; a program's own
# malloc built on a --hook allocator counts each block once; long (C++)
# names work; a --hook symbol the process lacks is named.
. "$(dirname "$0")/lib.sh"
. "$ROOT/tests/targets/attach_helpers.sh"
[ -n "$REAL_PAYLOAD" ] || { skip "hook_limits" "no libmemlyze.so in the build"; finish; }

cat > "$T/entry.c" <<'EOF'
/* c_alloc has a label 4 bytes in, which d_helper jumps to: moving its
 * first bytes into a trampoline would send d_helper into our jump. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
__asm__(".text\n"
        ".globl c_alloc\n.type c_alloc,@function\nc_alloc:\n"
        "  add $32, %rdi\n"
        "c_body:\n"
        "  sub $8, %rsp\n  call malloc@PLT\n  add $8, %rsp\n  ret\n"
        ".size c_alloc, .-c_alloc\n"
        ".globl d_helper\n.type d_helper,@function\nd_helper:\n  jmp c_body\n"
        ".size d_helper, .-d_helper\n");
void *c_alloc(size_t), *d_helper(size_t);
__attribute__((noinline)) void *xcalloc(size_t n, size_t m) { return calloc(n, m); }
__attribute__((noinline)) void *an_allocator_with_a_rather_long_name_as_cpp_mangling_makes_them_2(size_t n)
{
    return malloc(n + 1);   /* hooked: counted at n; else malloc's n + 1 */
}
static void *volatile keep[100];
int main(int argc, char **argv)
{
    char buf[8];
    if (argc > 1 && !strcmp(argv[1], "long")) {
        for (int i = 0; i < 10; i++) keep[i] = an_allocator_with_a_rather_long_name_as_cpp_mangling_makes_them_2(100);
        return 0;
    }
    printf("ready\n");
    fflush(stdout);
    for (;;) {   /* until stdin closes: c_alloc, d_helper and xcalloc keep being called */
        free(c_alloc(8));
        free(d_helper(8));
        free(xcalloc(4, 100));
        if (read(0, buf, sizeof buf) <= 0) break;
    }
    printf("alive\n");
    return 0;
}
EOF
cc -O1 -g -o "$T/entry" "$T/entry.c" || { fail "build entry"; finish; }

out=$("$MEMLYZE" run -r 1 -o "$T/r1.mlyze" --hook c_alloc=malloc -- "$T/entry" long 2>&1); rc=$?
check "run: a function with a symbol in its first bytes is refused, naming it" bash -c \
    "[ $rc -ne 0 ] && grep -q 'symbol c_body lies 4 bytes into c_alloc' <<<\"\$0\" && [ ! -e '$T/r1.mlyze' ]" "$out"

rm -f "$T/e.in"; mkfifo "$T/e.in"
"$T/entry" < "$T/e.in" > "$T/e.out" 2>&1 &
EP=$!
exec {EW}>"$T/e.in"
for _ in $(seq 200); do grep -q ready "$T/e.out" && break; sleep 0.02; done
out=$("$ATTACH" -o "$T/a1.mlyze" --hook c_alloc=malloc "$EP" 2>&1); rc=$?
check "attach: the same function is refused, nothing injected" bash -c \
    "[ $rc -ne 0 ] && grep -q 'symbol c_body lies 4 bytes into c_alloc' <<<\"\$0\" && ! grep -q memlyze /proc/$EP/maps" "$out"
echo x >&$EW
check "attach: the program runs on (d_helper still works)" bash -c "sleep 0.2; kill -0 $EP"

# The first attach hooks xcalloc as calloc; a later one may not make it a malloc.
"$ATTACH" -q -r 1 -o "$T/k1.mlyze" --hook xcalloc=calloc "$EP" || fail "kind: attach 1"
echo x >&$EW; sleep 0.2
"$DETACH" -q "$EP" || fail "kind: detach 1"
out=$("$ATTACH" -o "$T/k2.mlyze" --hook xcalloc=malloc "$EP" 2>&1); rc=$?
check "kind: re-hooking a function as another KIND is refused, saying why" bash -c \
    "[ $rc -ne 0 ] && grep -q 'hooked as another KIND' <<<\"\$0\"" "$out"
check "kind: and nothing stays attached" bash -c "'$DETACH' $EP 2>&1 | grep -q 'not attached'"
"$ATTACH" -q -r 1 -o "$T/k3.mlyze" --hook xcalloc=calloc "$EP" || fail "kind: attach 3"
echo x >&$EW; sleep 0.3
"$DETACH" -q "$EP" || fail "kind: detach 3"
check "kind: the same KIND again records calloc's bytes (n x m: 400 B a call)" bash -c \
    "'$MEMLYZE' top --by allocated --json -n 50 '$T/k3.mlyze' | python3 -c \"
import json, sys
d = json.load(sys.stdin)
s = [x for x in d['sites'] if x['alloc_count'] and x['alloc_bytes'] == 400 * x['alloc_count']]
assert s, d['sites']\""
exec {EW}>&-
wait "$EP"
check "the program ended normally" grep -q '^alive$' "$T/e.out"

# The program's own malloc on a pool: --hook pool_get=malloc counts once.
cat > "$T/own.c" <<'EOF'
#include <stddef.h>
#include <sys/mman.h>
#include <unistd.h>
static char *heap, *top;
__attribute__((noinline)) void *pool_get(size_t n)
{
    if (!heap) heap = top = mmap(0, 16 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    n = (n + 15) & ~(size_t)15;
    void *p = top;
    top += n;
    return p;
}
__attribute__((noinline)) void *malloc(size_t n) { char *p = pool_get(n + 16); *(size_t *)p = n; return p + 16; }
__attribute__((noinline)) void free(void *p) { (void)p; __asm__ volatile(""); }
void *volatile sink;
int main(void)
{
    for (int i = 0; i < 10; i++) sink = malloc(100);
    for (int i = 0; i < 10; i++) sink = pool_get(200);
    return 0;
}
EOF
cc -O2 -g -fno-builtin -o "$T/own" "$T/own.c" || fail "build own"
"$MEMLYZE" run -r 1 -o "$T/own.mlyze" --hook pool_get=malloc -- "$T/own" 2>/dev/null
check "own malloc on a --hook pool: 1000 B from malloc, 2000 B from pool_get, nothing twice" bash -c \
    "'$MEMLYZE' top --json -n 50 '$T/own.mlyze' | python3 -c \"
import json, sys
d = json.load(sys.stdin)
tot = sum(x['live_bytes'] for x in d['sites'] if any('own.c' in f for f in x['frames']))
assert tot == 3000, [(x['frames'][:2], x['live_bytes']) for x in d['sites']]\""

# Long names; a missing one named.
"$MEMLYZE" run -r 1 -o "$T/long.mlyze" --hook an_allocator_with_a_rather_long_name_as_cpp_mangling_makes_them_2=malloc \
    -- "$T/entry" long 2>/dev/null
check "a --hook symbol of 66 characters works (its 10 blocks counted at 100 B)" bash -c \
    "'$MEMLYZE' stats '$T/long.mlyze' | grep -q '^live at end: *1000 B in 10 objects'"
out=$("$MEMLYZE" run -o "$T/miss.mlyze" --hook no_such_function=malloc -- "$T/entry" long 2>&1)
check "a --hook symbol the process lacks is named" grep -q -- '--hook no_such_function: no function of that name' <<<"$out"
finish
