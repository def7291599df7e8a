/* bench_main.c - the process with 50 libraries that bench_gotpatch times. */
#include <stdio.h>
#include <stdlib.h>

#include "gotpatch.h"
#include "tp_payload.h"

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 21;
    double med = 0, umed = 0;
    int slots = 0, modules = 0;
    if (tp_bench(runs, &med, &umed, &slots, &modules) != 0) return 1;
    mlz_got_patch_all();
    mlz_got_stats st;
    mlz_got_get_stats(&st);
    mlz_got_unpatch_all(NULL);
    printf("modules_scanned=%u modules_patched=%d slots=%d jump_slot=%u glob_dat=%u abs64=%u "
           "patch_all_median_us=%.1f unpatch_all_median_us=%.1f runs=%d\n",
           st.modules_scanned, modules, slots, st.slots_patched[MLZ_GOT_JUMP_SLOT],
           st.slots_patched[MLZ_GOT_GLOB_DAT], st.slots_patched[MLZ_GOT_ABS64], med, umed, runs);
    return 0;
}
