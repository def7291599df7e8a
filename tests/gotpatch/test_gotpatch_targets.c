/*
 * test_gotpatch_targets.c - gotpatch in real processes built for the purpose.
 *
 * Compiles, into a temp dir, the test payload libtp.so (gotpatch + counting
 * hooks) and target programs with the link options whose GOTs differ: PIE,
 * non-PIE, full and partial RELRO, -fno-plt, C++, plus plugins laid out so
 * that only the right caller's RUNPATH/RPATH/$ORIGIN finds them. Each target
 * checks its own exact counts and prints ERR: lines on failure; here we check
 * its exit status and that its output is the same with and without attach.
 * The children are built without sanitizers, so this binary's ASan/UBSan
 * build runs the same checks (ASan would interpose malloc in the children).
 */
#include <sys/wait.h>

#include "../check.h"
#include "tp_build.h"

static int ready;

static int setup(void)
{
    if (tp_find_root() || tp_mktemp()) return -1;
    atexit(tp_cleanup);
    if (tp_build_payload()) return -1;
    if (tp_sh("cd '%s' && cc -O2 -fPIC -shared -Wl,-z,lazy -Wl,--hash-style=sysv -o '%s/libtshared.so' tests/targets/gotpatch/tshared.c",
              tp_root, tp_dir))
        return -1;
    FILE *f = fopen(strcat(strcpy((char[PATH_MAX + 16]){ 0 }, tp_dir), "/input.txt"), "w");
    if (!f) return -1;
    for (int i = 0; i < 50; i++) fprintf(f, "line %d of the getline input, long enough to need a realloc %0*d\n", i, i * 3, 0);
    fclose(f);
    ready = 1;
    return 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return strdup("");
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

/* Only the program's own output lines. */
static void keep_out_lines(char *s)
{
    char *w = s;
    for (char *line = s; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (strncmp(line, "OUT:", 4) == 0) { memmove(w, line, len); w += len; }
        line += len;
    }
    *w = '\0';
}

/* Run `exe args` in tp_dir; returns exit status, fills *out (OUT lines) and *err. */
static int run(const char *exe, const char *args, char **out, char **err)
{
    char o[PATH_MAX + 64], e[PATH_MAX + 64];
    snprintf(o, sizeof o, "%s/%s.%s.out", tp_dir, exe, args);
    snprintf(e, sizeof e, "%s/%s.%s.err", tp_dir, exe, args);
    for (char *p = o + strlen(tp_dir) + 1; *p; p++) if (*p == ' ' || *p == '/') *p = '_';
    for (char *p = e + strlen(tp_dir) + 1; *p; p++) if (*p == ' ' || *p == '/') *p = '_';
    int rc = tp_sh("cd '%s' && timeout 60 ./%s %s >'%s' 2>'%s'", tp_dir, exe, args, o, e);
    *out = slurp(o);
    *err = slurp(e);
    keep_out_lines(*out);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/* attach and plain runs: attach passes its own checks, outputs are equal */
static char last_attach_err[1 << 16];

static void attach_vs_plain(const char *exe, const char *extra)
{
    char a[256], p[256];
    snprintf(a, sizeof a, "attach %s", extra);
    snprintf(p, sizeof p, "plain %s", extra);
    char *ao, *ae, *po, *pe;
    int ra = run(exe, a, &ao, &ae);
    int rp = run(exe, p, &po, &pe);
    CHECK_EQ_U64(ra, 0);
    CHECK_EQ_U64(rp, 0);
    CHECK(strstr(ao, "OUT: start") != NULL);
    CHECK(strcmp(ao, po) == 0);
    snprintf(last_attach_err, sizeof last_attach_err, "%s", ae);
    if (ra != 0 || rp != 0 || strcmp(ao, po) != 0)
        fprintf(stderr, "--- %s attach output\n%s--- stderr\n%s--- plain output\n%s--- stderr\n%s",
                exe, ao, ae, po, pe);
    free(ao); free(ae); free(po); free(pe);
}

static void build_and_run(const char *exe, const char *flags)
{
    REQUIRE(ready);
    REQUIRE(tp_sh("cd '%s' && cc -std=c11 -O2 -Wall -Werror -D_GNU_SOURCE -Igotpatch -Itests/gotpatch %s "
                  "tests/targets/gotpatch/target.c -o '%s/%s' -L'%s' -ltp -ltshared -Wl,-rpath,'%s'",
                  tp_root, flags, tp_dir, exe, tp_dir, tp_dir) == 0);
    char input[PATH_MAX + 16];
    snprintf(input, sizeof input, "%s/input.txt", tp_dir);
    attach_vs_plain(exe, input);
}

static void test_pie(void) { build_and_run("t_pie", "-fPIE -pie"); }
static void test_nopie(void)
{
    build_and_run("t_nopie", "-fno-pie -no-pie");
    /* `fp = free` in non-PIE code is the executable's canonical PLT stub:
     * libc's GLOB_DAT for free is bound to it and must be left alone (the
     * stub jumps through the executable's patched JUMP_SLOT). */
    CHECK(strstr(last_attach_err, "left canonical-plt 0 ") == NULL);
    CHECK(strstr(last_attach_err, "left canonical-plt") != NULL);
}
static void test_full_relro(void) { build_and_run("t_relro_now", "-fPIE -pie -Wl,-z,relro,-z,now"); }
static void test_partial_relro_lazy(void) { build_and_run("t_relro_lazy", "-fPIE -pie -Wl,-z,relro,-z,lazy"); }
static void test_nopie_partial_relro(void) { build_and_run("t_nopie_lazy", "-fno-pie -no-pie -Wl,-z,relro,-z,lazy"); }
static void test_fno_plt(void) { build_and_run("t_noplt", "-fPIE -pie -fno-plt -Wl,-z,relro,-z,now"); }

static void test_cxx_new_delete(void)
{
    REQUIRE(ready);
    REQUIRE(tp_sh("cd '%s' && g++ -O2 -Itests/gotpatch tests/targets/gotpatch/target_cxx.cc -o '%s/t_cxx' "
                  "-L'%s' -ltp -Wl,-rpath,'%s'", tp_root, tp_dir, tp_dir, tp_dir) == 0);
    attach_vs_plain("t_cxx", "");
}

static int dl_ready;

static int build_dl_layout(void)
{
    const char *R = tp_root, *D = tp_dir;
    return tp_sh("mkdir -p '%s/plugins/deps' '%s/lp' '%s/rp'", D, D, D) ||
           tp_sh("cd '%s' && cc -O2 -fPIC -shared -DPLUG=plugdep -o '%s/plugins/deps/libplugdep.so' tests/targets/gotpatch/plugin.c", R, D) ||
           tp_sh("cd '%s' && cc -O2 -fPIC -shared -DPLUG=plug -o '%s/plugins/libplug.so' tests/targets/gotpatch/plugin.c", R, D) ||
           tp_sh("cd '%s' && cc -O2 -fPIC -shared -DPLUG=plug2 -DWITH_DEP -o '%s/plugins/libplug2.so' tests/targets/gotpatch/plugin.c "
                 "-L'%s/plugins/deps' -lplugdep -Wl,--enable-new-dtags,-rpath,'$ORIGIN/deps'", R, D, D) ||
           tp_sh("cd '%s' && cc -O2 -fPIC -shared -DPLUG=plug3 -o '%s/lp/libplug3.so' tests/targets/gotpatch/plugin.c", R, D) ||
           tp_sh("cd '%s' && cc -O2 -fPIC -shared -DPLUG=plug4 -o '%s/rp/libplug4.so' tests/targets/gotpatch/plugin.c", R, D) ||
           tp_sh("cd '%s' && cc -O2 -fPIC -shared -fno-builtin -Wl,-Bsymbolic -o '%s/plugins/libbypass.so' tests/targets/gotpatch/bypass.c", R, D) ||
           tp_sh("cd '%s' && cc -O2 -fPIC -shared -o '%s/plugins/libuser.so' tests/targets/gotpatch/user.c "
                 "-L'%s/plugins' -lbypass -Wl,--enable-new-dtags,-rpath,'$ORIGIN'", R, D, D) ||
           tp_sh("cd '%s' && cc -O2 -fPIC -shared -o '%s/libloader.so' tests/targets/gotpatch/loader.c -ldl "
                 "-Wl,--enable-new-dtags,-rpath,'$ORIGIN/lp'", R, D) ||
           tp_sh("cd '%s' && cc -std=c11 -O2 -D_GNU_SOURCE -Igotpatch -Itests/gotpatch tests/targets/gotpatch/target_dl.c "
                 "-o '%s/target_dl' -L'%s' -ltp -lloader -ldl -Wl,--enable-new-dtags,-rpath,'$ORIGIN/plugins:$ORIGIN'", R, D, D) ||
           tp_sh("cd '%s' && cc -std=c11 -O2 -D_GNU_SOURCE -Igotpatch -Itests/gotpatch tests/targets/gotpatch/target_dl.c "
                 "-o '%s/target_rp' -L'%s' -ltp -lloader -ldl -Wl,--disable-new-dtags,-rpath,'$ORIGIN/rp:$ORIGIN'", R, D, D);
}

static void test_dlopen_runpath_origin(void)
{
    REQUIRE(ready);
    REQUIRE(build_dl_layout() == 0);
    dl_ready = 1;
    attach_vs_plain("target_dl", "");
}

static void test_dlopen_rpath(void)
{
    REQUIRE(dl_ready);
    attach_vs_plain("target_rp", "rpath");
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    if (setup() != 0) {
        printf("FAIL: setup (could not build the test payload)\n");
        return 1;
    }
    RUN(test_pie);
    RUN(test_nopie);
    RUN(test_full_relro);
    RUN(test_partial_relro_lazy);
    RUN(test_nopie_partial_relro);
    RUN(test_fno_plt);
    RUN(test_cxx_new_delete);
    RUN(test_dlopen_runpath_origin);
    RUN(test_dlopen_rpath);
    CHECK_EXIT();
}
