/*
 * chain_lib.c - frames without frame pointers, for tests/unit/test_unwind.c.
 *
 * test_unwind compiles this at run time with
 *     cc -O2 -fomit-frame-pointer -fPIC -shared
 * (the way distro libraries are built) and dlopens it. Each function keeps a
 * real stack frame and then *overwrites rbp with garbage* before calling on,
 * so a frame-pointer walk through these frames must stop (cleanly), while
 * the DWARF unwinder must restore rbp from CFI and carry on to main.
 */
#include <stdint.h>

typedef void (*chain_cb)(void *arg);

volatile int chain_sink;

#define NOI __attribute__((noinline, noipa, visibility("default")))

/* rbp is callee-saved: clobbering it makes GCC save it in the prologue and
 * describe the save in CFI; the asm then leaves a bogus value in it. */
#define TRASH_RBP(v) __asm__ volatile("movq %0, %%rbp" : : "r"((uint64_t)(v)) : "rbp")

NOI void chain_g3(chain_cb cb, void *arg)
{
    volatile char big[3000];            /* a frame much larger than a record */
    big[0] = 1;
    TRASH_RBP(0x1234567);
    cb(arg);
    chain_sink += big[0];
}

NOI void chain_g2(chain_cb cb, void *arg)
{
    volatile uint64_t loop[2];
    loop[0] = (uint64_t)(uintptr_t)&loop[0];   /* a self-referencing "frame record" */
    loop[1] = 0x1000;
    TRASH_RBP(&loop[0]);
    chain_g3(cb, arg);
    chain_sink += (int)loop[1];
}

NOI void chain_g1(chain_cb cb, void *arg)
{
    volatile int x = 1;
    chain_g2(cb, arg);
    chain_sink += x;
}

/* Spins until *stop, for a signal to interrupt it; garbage in rbp and a
 * frame the CFA is computed from rsp for. */
NOI void chain_spin(volatile int *stop)
{
    volatile char pad[512];
    pad[0] = 0;
    TRASH_RBP(~0ull);
    while (!*stop)
        pad[0]++;
    chain_sink += pad[0];
}
