/* user.c - libuser.so: NEEDED libbypass.so, allocates through its GOT. When
 * dlopen'ed with RTLD_DEEPBIND its malloc slot is bound to libbypass's
 * malloc, not the global one: gotpatch must leave it alone and report it. */
#include <stdlib.h>

__attribute__((visibility("default"))) unsigned long user_work(int n)
{
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        unsigned char *p = malloc(32);
        __asm__ volatile("" : : "r"(p) : "memory");
        p[0] = 2;
        sum += p[0];
        free(p);
    }
    return sum;
}
