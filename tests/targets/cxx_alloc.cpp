// cxx_alloc.cpp - C++ allocations of every operator form, for
// tests/e2e/cxx_allocators.sh: what stays live is known per site.
//   cxx_alloc            run through, exit
//   cxx_alloc DIR        print "ready", wait for DIR/go, allocate, print
//                        "done", wait for DIR/end, exit
// CXX_ALLOC_NO_THROW=1: no failing operator new (mimalloc's aborts, built as C)
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

static void *keep[1000];
static int nkeep;

static void wait_file(const char *dir, const char *name)
{
    std::string p = std::string(dir) + "/" + name;
    struct stat st;
    while (stat(p.c_str(), &st) != 0) usleep(10000);
}

struct Foo { long a, b, c; };   // 24 bytes

__attribute__((noinline)) void site_array(void) { for (int i = 0; i < 100; i++) keep[nkeep++] = new char[40]; }
__attribute__((noinline)) void site_nothrow(void) { for (int i = 0; i < 50; i++) keep[nkeep++] = new (std::nothrow) Foo(); }
__attribute__((noinline)) void site_aligned(void)
{
    for (int i = 0; i < 20; i++) keep[nkeep++] = ::operator new(128, std::align_val_t(64));
}
__attribute__((noinline)) void site_after_throw(void) { for (int i = 0; i < 10; i++) keep[nkeep++] = new char[100]; }

// Freed again, every form of delete: nothing of these stays.
__attribute__((noinline)) void churn(void)
{
    void *p[1000];
    for (int i = 0; i < 1000; i++) p[i] = ::operator new(64, std::align_val_t(64));
    for (int i = 0; i < 1000; i++) ::operator delete(p[i], 64, std::align_val_t(64));
    for (int i = 0; i < 500; i++) { Foo *f = new Foo(); delete f; }
    for (int i = 0; i < 500; i++) { char *c = new char[i + 1]; delete[] c; }
    for (int i = 0; i < 100; i++) { void *q = ::operator new(32, std::align_val_t(32)); ::operator delete(q, std::align_val_t(32)); }
    std::vector<std::string> v;
    for (int i = 0; i < 200; i++) v.push_back(std::string(100, 'x'));
}

// An operator new that throws: the hook it crosses must not stop later
// allocations from being seen.
__attribute__((noinline)) void failing_new(void)
{
    try {
        void *volatile p = ::operator new((size_t)1 << 62);
        keep[nkeep++] = p;
    } catch (const std::bad_alloc &) {
        std::printf("bad_alloc caught\n");
    }
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        std::printf("ready %d\n", getpid());
        std::fflush(stdout);
        wait_file(argv[1], "go");
    }
    churn();
    site_array();
    site_nothrow();
    site_aligned();
    if (!getenv("CXX_ALLOC_NO_THROW")) failing_new();
    site_after_throw();
    std::printf("done: live site_array 4000 site_nothrow 1200 site_aligned 2560 site_after_throw 1000\n");
    std::fflush(stdout);
    if (argc > 1) wait_file(argv[1], "end");
    return 0;
}
