/*
 * target_dl.c - dlopen after attach, with search paths that depend on the
 * caller. Layout made by test_gotpatch_targets (DIR is the executable's dir):
 *   DIR/target_dl        RUNPATH $ORIGIN/plugins:$ORIGIN, NEEDED libtp.so libloader.so
 *   DIR/libloader.so     RUNPATH $ORIGIN/lp
 *   DIR/plugins/libplug.so, libplug2.so (RUNPATH $ORIGIN/deps), libuser.so, libbypass.so
 *   DIR/plugins/deps/libplugdep.so
 *   DIR/lp/libplug3.so
 *   DIR/rp/libplug4.so   (mode rpath: the executable target_rp has DT_RPATH $ORIGIN/rp:$ORIGIN)
 * Usage: target_dl attach|plain [rpath]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gotpatch.h"
#include "tp_payload.h"

void *loader_open(const char *name);

static int fails;
#define EXPECT(c) do { if (!(c)) { fails++; fprintf(stderr, "ERR: %s:%d: %s\n", __FILE__, __LINE__, #c); } } while (0)
#define EXPECT_EQ(a, b) do { unsigned long a_ = (unsigned long)(a), b_ = (unsigned long)(b); if (a_ != b_) { fails++; \
    fprintf(stderr, "ERR: %s:%d: %s == %s (%lu != %lu)\n", __FILE__, __LINE__, #a, #b, a_, b_); } } while (0)

typedef unsigned long (*work_fn)(int);

static mlz_got_slot slots[8192];

/* Slots in the table whose module path ends with `suffix`, in `state` (-1: any). */
static size_t count_slots(const char *suffix, int state, const char *name)
{
    size_t n = mlz_got_slots(slots, 8192), k = 0;
    for (size_t i = 0; i < n && i < 8192; i++) {
        size_t ml = strlen(slots[i].module), sl = strlen(suffix);
        if (ml < sl || strcmp(slots[i].module + ml - sl, suffix) != 0) continue;
        if (state >= 0 && slots[i].state != state) continue;
        if (name && strcmp(slots[i].name, name) != 0) continue;
        k++;
    }
    return k;
}

static unsigned long run_plugin(void *h, const char *sym, int n, int attach, unsigned long expect_mallocs)
{
    EXPECT(h != NULL);
    if (!h) { fprintf(stderr, "  dlerror: %s\n", dlerror()); return 0; }
    work_fn f = (work_fn)dlsym(h, sym);
    EXPECT(f != NULL);
    if (!f) return 0;
    unsigned long m0 = tp_count(TP_MALLOC), f0 = tp_count(TP_FREE);
    unsigned long s = f(n);
    if (attach) {
        EXPECT_EQ(tp_count(TP_MALLOC) - m0, expect_mallocs);
        EXPECT_EQ(tp_count(TP_FREE) - f0, expect_mallocs);
    }
    return s;
}

int main(int argc, char **argv)
{
    int attach = argc > 1 && strcmp(argv[1], "attach") == 0;
    int rpath = argc > 2 && strcmp(argv[2], "rpath") == 0;
    const int N = 50;
    printf("OUT: start\n");
    fflush(stdout);
    if (attach) EXPECT(tp_attach() > 0);

    if (rpath) {
        /* bare name found only in the executable's DT_RPATH */
        void *h = dlopen("libplug4.so", RTLD_NOW);
        printf("OUT: plug4 %lu\n", run_plugin(h, "plug4_work", N, attach, N));
        if (attach) {
            char out[4096];
            EXPECT(mlz_got_dlopen_path("libplug4.so", (void *)main, out, sizeof out) == 1);
            EXPECT(strstr(out, "/rp/libplug4.so") != NULL);
        }
    } else {
        /* 1. the executable's RUNPATH */
        void *h = dlopen("libplug.so", RTLD_NOW);
        printf("OUT: plug %lu\n", run_plugin(h, "plug_work", N, attach, N));
        if (attach) {
            char out[4096];
            EXPECT(mlz_got_dlopen_path("libplug.so", (void *)main, out, sizeof out) == 1);
            EXPECT(strstr(out, "/plugins/libplug.so") != NULL);
            EXPECT(count_slots("/libplug.so", MLZ_GOT_SLOT_PATCHED, NULL) >= 2);
        }
        /* 2. $ORIGIN in the name, expanded for the executable; the plugin's
         *    own dependency found through its RUNPATH $ORIGIN/deps */
        void *h2 = dlopen("$ORIGIN/plugins/libplug2.so", RTLD_NOW);
        printf("OUT: plug2 %lu\n", run_plugin(h2, "plug2_work", N, attach, 2 * N));
        if (attach) EXPECT(count_slots("/libplugdep.so", MLZ_GOT_SLOT_PATCHED, NULL) >= 2);
        /* 3. a library calling dlopen: its own RUNPATH counts */
        if (attach) {
            /* regression (memray #525): the answer depends on the caller. Only
             * libloader's RUNPATH finds libplug3; the payload's context finds
             * neither plugin. */
            char out[4096];
            EXPECT(mlz_got_dlopen_path("libplug3.so", (void *)loader_open, out, sizeof out) == 1);
            EXPECT(strstr(out, "/lp/libplug3.so") != NULL);
            EXPECT(mlz_got_dlopen_path("libplug3.so", (void *)main, out, sizeof out) == 0);
            EXPECT(mlz_got_dlopen_path("libplug.so", (void *)tp_count, out, sizeof out) == 0);
            EXPECT(mlz_got_dlopen_path("$ORIGIN/plugins/libplug2.so", (void *)main, out, sizeof out) == 1);
            EXPECT(out[0] == '/' && strstr(out, "$") == NULL);
        }
        void *h3 = loader_open("libplug3.so");
        printf("OUT: plug3 %lu\n", run_plugin(h3, "plug3_work", N, attach, N));
        /* 4. RTLD_DEEPBIND binds libuser's malloc to libbypass's: left alone, reported */
        void *hu = dlopen("libuser.so", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        printf("OUT: user %lu\n", run_plugin(hu, "user_work", N, attach, 0));
        if (attach) {
            EXPECT(count_slots("/libuser.so", MLZ_GOT_LEFT_OTHER_DEF, "malloc") == 1);
            EXPECT(count_slots("/libuser.so", MLZ_GOT_SLOT_PATCHED, "malloc") == 0);
            /* 5. the blind-spot scan finds libbypass's direct calls */
            static mlz_got_module_report mods[256];
            mlz_got_blindspot_report r = { .modules = mods, .cap = 256 };
            EXPECT(mlz_got_blindspot_scan(&r) == 0);
            int found = 0;
            for (size_t i = 0; i < r.n && i < 256; i++) {
                size_t l = strlen(mods[i].path);
                if (l < 13 || strcmp(mods[i].path + l - 13, "/libbypass.so") != 0) {
                    if (l >= 12 && strcmp(mods[i].path + l - 12, "/libplug.so") == 0)
                        EXPECT_EQ(mods[i].direct_sites, 0);
                    continue;
                }
                found = 1;
                EXPECT(mods[i].flags & MLZ_GOT_MOD_OWN_ALLOC);
                EXPECT(mods[i].own_alloc_mask & (1u << TP_MALLOC));
                EXPECT(mods[i].own_alloc_mask & (1u << TP_FREE));
                EXPECT(mods[i].direct_sites >= 2);
                EXPECT(mods[i].nsites >= 2);
            }
            EXPECT(found);
            static char buf[1 << 16];
            mlz_got_format_report(&r, buf, sizeof buf);
            fprintf(stderr, "%s", buf);
        }
        /* 6. dlclose drops the plugin's slots */
        EXPECT(dlclose(h) == 0);
        if (attach) EXPECT_EQ(count_slots("/libplug.so", -1, NULL), 0);
        if (h2) dlclose(h2);
        if (attach) EXPECT_EQ(count_slots("/libplugdep.so", -1, NULL), 0);
        if (hu) dlclose(hu);
        /* reopen after close: patched again */
        h = dlopen("libplug.so", RTLD_NOW);
        printf("OUT: plug again %lu\n", run_plugin(h, "plug_work", N, attach, N));
    }
    if (attach) {
        /* modules loaded since attach change the maps: compare slots and RELRO only */
        tp_detach_result r;
        tp_detach(&r);
        EXPECT_EQ(r.rc, 0);
        EXPECT_EQ(r.relro_diffs, 0);
        EXPECT_EQ(r.left, 0);
        EXPECT_EQ(r.slot_diffs, 0);
        EXPECT(tp_count(TP_DLOPEN) >= 1);
    }
    return fails;
}
