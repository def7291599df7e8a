// widgets.cc - C++ allocations through operator new, for the e2e tests.
#include <cstdio>
#include <string>
#include <vector>

struct Widget { char payload[240]; };

namespace shop {
__attribute__((noinline)) std::vector<Widget *> make_widgets(int n)
{
    std::vector<Widget *> v;
    v.reserve(n);
    for (int i = 0; i < n; i++) v.push_back(new Widget());
    return v;
}
}

int main()
{
    auto keep = shop::make_widgets(100);              // 100 x 240 B live
    for (int i = 0; i < 1000; i++) delete new Widget(); // churn, nothing left
    std::printf("widgets: %zu\n", keep.size());
    return 0;
}
