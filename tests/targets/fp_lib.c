/*
 * fp_lib.c - frames with frame pointers, for tests/unit/test_unwind.c.
 *
 * test_unwind compiles this at run time with
 *     cc -O2 -fno-omit-frame-pointer -fPIC -shared
 * and dlopens it next to chain_lib.c (built without frame pointers, and
 * trashing rbp), so one walk crosses both kinds of module:
 *
 *   fp_f1 -> fp_trap -> fp_f2 -> chain_g1 -> chain_g2 -> chain_g3
 *         -> fp_f3 -> fp_f4 -> the test's callback
 *
 * fp_trap is hand-written: it saves rbp and then loads it with the frame
 * record of its caller's caller, a plausible and wrong frame pointer. Its
 * CFI is right, so the module classifier must leave it to the CFI: a walk
 * that stepped it by rbp would skip fp_f1. fp_spin and fp_leaf_spin are
 * for a signal to interrupt.
 */
#include <stdint.h>

typedef void (*fp_cb)(void *);

struct fp_args {
    fp_cb cb;                               /* the test's callback, at the bottom */
    void *arg;
    void (*chain)(fp_cb, void *);           /* chain_g1 of chain_lib.c */
};

volatile int fp_sink;

#define NOI __attribute__((noinline, noipa, visibility("default")))

void fp_trap(fp_cb cb, void *arg);
__asm__(".text\n"
        ".globl fp_trap\n"
        ".type fp_trap,@function\n"
        "fp_trap:\n"
        "\t.cfi_startproc\n"
        "\tpushq %rbp\n"
        "\t.cfi_def_cfa_offset 16\n"
        "\t.cfi_offset %rbp, -16\n"
        "\tmovq (%rbp), %rbp\n"
        "\tmovq %rdi, %rax\n"
        "\tmovq %rsi, %rdi\n"
        "\tcall *%rax\n"
        "\tpopq %rbp\n"
        "\t.cfi_def_cfa_offset 8\n"
        "\tret\n"
        "\t.cfi_endproc\n"
        ".size fp_trap, .-fp_trap\n");

/* Spins without a frame until *stop, for a signal to interrupt: the
 * interrupted pc is exact, and rbp still holds fp_spin's frame, so only the
 * CFI (CFA = rsp + 8) finds fp_spin as its caller. */
void fp_leaf_spin(volatile int *stop);
__asm__(".text\n"
        ".globl fp_leaf_spin\n"
        ".type fp_leaf_spin,@function\n"
        "fp_leaf_spin:\n"
        "\t.cfi_startproc\n"
        "1:\tmovl (%rdi), %eax\n"
        "\ttestl %eax, %eax\n"
        "\tje 1b\n"
        "\tret\n"
        "\t.cfi_endproc\n"
        ".size fp_leaf_spin, .-fp_leaf_spin\n");

NOI void fp_spin(volatile int *stop)
{
    volatile int x = 1;
    fp_leaf_spin(stop);
    fp_sink += x;
}

NOI void fp_f4(struct fp_args *a)
{
    volatile int x = 1;
    a->cb(a->arg);
    fp_sink += x;
}

/* Called back by chain_g3, with garbage in rbp. */
NOI void fp_f3(void *p)
{
    volatile char pad[64];
    pad[0] = 1;
    fp_f4(p);
    fp_sink += pad[0];
}

NOI void fp_f2(void *p)
{
    struct fp_args *a = p;
    volatile int x = 1;
    a->chain(fp_f3, p);
    fp_sink += x;
}

NOI void fp_f1(struct fp_args *a)
{
    volatile int x = 1;
    fp_trap(fp_f2, a);
    fp_sink += x;
}
