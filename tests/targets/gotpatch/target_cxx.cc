// target_cxx.cc - C++ new/delete: operator new calls malloc inside
// libstdc++, which the hooks see through libstdc++'s own GOT.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tp_payload.h"

static int fails;
#define EXPECT_EQ(a, b) do { unsigned long a_ = (unsigned long)(a), b_ = (unsigned long)(b); if (a_ != b_) { fails++; \
    std::fprintf(stderr, "ERR: %s:%d: %s == %s (%lu != %lu)\n", __FILE__, __LINE__, #a, #b, a_, b_); } } while (0)

struct Node { long v[4]; Node *next; };

static unsigned long work(int n)
{
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        Node *x = new Node();
        x->v[0] = i;
        __asm__ volatile("" : : "r"(x) : "memory");
        sum += (unsigned long)x->v[0];
        delete x;
        int *arr = new int[i + 1];
        __asm__ volatile("" : : "r"(arr) : "memory");
        arr[0] = 1;
        sum += (unsigned long)arr[0];
        delete[] arr;
    }
    return sum;
}

int main(int argc, char **argv)
{
    bool attach = argc > 1 && std::strcmp(argv[1], "attach") == 0;
    std::printf("OUT: start\n");
    std::fflush(stdout);
    if (attach && tp_attach() <= 0) { std::fprintf(stderr, "ERR: attach\n"); return 1; }
    const int N = 300;
    unsigned long m0 = tp_count(TP_MALLOC), f0 = tp_count(TP_FREE);
    unsigned long s = work(N);
    if (attach) {
        EXPECT_EQ(tp_count(TP_MALLOC) - m0, 2 * N);
        EXPECT_EQ(tp_count(TP_FREE) - f0, 2 * N);
        tp_detach_result r;
        EXPECT_EQ(tp_detach(&r), 0);
        m0 = tp_count(TP_MALLOC);
        work(N);
        EXPECT_EQ(tp_count(TP_MALLOC) - m0, 0);
    }
    std::printf("OUT: sum %lu\n", s);
    return fails;
}
