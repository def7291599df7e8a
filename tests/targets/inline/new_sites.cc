// new_sites.cc - C++ operator new/delete defined in the executable, on top
// of the executable's own malloc (own_alloc.c): every new, including
// libstdc++'s own (std::string, std::vector growth), reaches malloc by a
// direct call. Held: site_new 1000 x 100 B, site_string 10 strings of
// 5000 chars (5001 B each).
#include <cstdlib>
#include <cstdio>
#include <new>
#include <string>

void *operator new(std::size_t n)
{
    if (void *p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void *operator new[](std::size_t n) { return operator new(n); }
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, std::size_t) noexcept { std::free(p); }
void operator delete[](void *p, std::size_t) noexcept { std::free(p); }

static char *held[1000];
static std::string *strs[10];

__attribute__((noinline)) void site_new()
{
    for (int i = 0; i < 1000; i++) held[i] = new char[100];
}

__attribute__((noinline)) void site_string()
{
    for (int i = 0; i < 10; i++) strs[i] = new std::string(5000, 'x');   // 32 B object + 5001 B buffer
}

int main()
{
    site_new();
    site_string();
    for (int i = 0; i < 200; i++) { std::string t(300, 'y'); delete new int[50]; }
    std::printf("new_sites: ok\n");
    return 0;
}
