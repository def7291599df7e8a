/* plugmain.c - loads libplug.so by bare name (RUNPATH) after start, and
 * libbypass.so (its own malloc, -Bsymbolic: invisible to GOT patching). */
#include <dlfcn.h>
#include <stdio.h>

int main(void)
{
    void *h = dlopen("libplug.so", RTLD_NOW);
    if (!h) { printf("dlopen: %s\n", dlerror()); return 1; }
    void (*f)(int) = (void (*)(int))dlsym(h, "plug_alloc");
    f(30);
    void *b = dlopen("libbypass.so", RTLD_NOW | RTLD_LOCAL);
    if (!b) { printf("dlopen: %s\n", dlerror()); return 1; }
    unsigned long (*w)(int) = (unsigned long (*)(int))dlsym(b, "bypass_work");
    printf("plugmain: %lu\n", w(10));
    return 0;
}
