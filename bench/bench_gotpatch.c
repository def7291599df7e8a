/*
 * bench_gotpatch.c - time to patch every module of a process with 50 shared
 * libraries (plus libc, libtp and the executable), and the slots patched.
 *
 * Generates the 50 tiny libraries at run time (tests/targets/gotpatch/benchlib.c,
 * each calling malloc, calloc, realloc and free through its own PLT), links a
 * program against all of them and the test payload, and runs it; the program
 * times mlz_got_patch_all() and mlz_got_unpatch_all() over N cycles and
 * prints the medians. Usage: bench_gotpatch [cycles] (default 51).
 */
#include "../tests/gotpatch/tp_build.h"

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 51;
    if (tp_find_root() || tp_mktemp()) {
        fprintf(stderr, "bench_gotpatch: cannot find the source tree or make a temp dir\n");
        return 1;
    }
    atexit(tp_cleanup);
    if (tp_build_payload()) return 1;
    if (tp_sh("cd '%s' && for i in $(seq 1 50); do "
              "cc -O2 -fPIC -shared -DIDX=$i -o '%s'/libbench$i.so tests/targets/gotpatch/benchlib.c || exit 1; done",
              tp_root, tp_dir))
        return 1;
    if (tp_sh("cd '%s' && cc -std=c11 -O2 -D_GNU_SOURCE -Igotpatch -Itests/gotpatch "
              "tests/targets/gotpatch/bench_main.c -o '%s/bench_main' -L'%s' -Wl,--no-as-needed "
              "$(for i in $(seq 1 50); do printf ' -lbench%%d' $i; done) -ltp -Wl,-rpath,'%s'",
              tp_root, tp_dir, tp_dir, tp_dir))
        return 1;
    printf("bench_gotpatch: 50 generated libraries, median of %d cycles\n", runs);
    fflush(stdout);
    return tp_sh("'%s/bench_main' %d", tp_dir, runs) ? 1 : 0;
}
