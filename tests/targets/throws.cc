// throws.cc - allocations on both sides of C++ exceptions, for the e2e
// tests (run_lifecycle.sh): a thrown exception pops the thrower's frames,
// and the next allocation's stack is built over the same memory. The
// unwinder's saved last walk must give each block its own frames: leaf()
// allocates at the same pc and, through via_a() or via_b() (the same frame
// size), at the same sp, so only the return address further out tells
// the two apart.
#include <cstdio>
#include <cstdlib>

static void *volatile keep[4000];
static int nk;
static volatile int sink;

__attribute__((noinline)) void deep_throw(int d)
{
    if (d == 0) {
        keep[nk++] = std::malloc(101);
        throw 42;
    }
    deep_throw(d - 1);
    asm volatile("");   // not a tail call: one frame per level
}

__attribute__((noinline)) void after_catch()
{
    keep[nk++] = std::malloc(202);
    asm volatile("");
}

__attribute__((noinline)) void leaf()
{
    keep[nk++] = std::malloc(303);
    asm volatile("");
}

__attribute__((noinline)) void via_a() { leaf(); sink = 1; }
__attribute__((noinline)) void via_b() { leaf(); sink = 2; }

int main()
{
    for (int i = 0; i < 500; i++) {
        try {
            deep_throw(i % 6);
        } catch (int) {
        }
        after_catch();
        via_a();
        via_b();
    }
    std::printf("throws: %d\n", nk);
    return 0;
}
