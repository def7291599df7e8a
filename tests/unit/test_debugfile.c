/*
 * test_debugfile.c - symbolize/debugfile.c: a debug file whose sections are
 * zlib-compressed comes back as a memfd whose every section holds the same
 * bytes as binutils' own inflation of it (objcopy --decompress-debug-
 * sections), none flagged compressed; files it must not touch (already
 * inflated, not ELF, a compressed section that does not inflate, a section
 * past the end of the file) come back as the same descriptor, still open.
 */
#include "../check.h"
#include "debugfile.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

static char dir[] = "/tmp/mlz-debugfile.XXXXXX";
static char path_z[128], path_plain[128];

static int sh(const char *cmd)
{
    int rc = system(cmd);
    return rc == 0 ? 0 : -1;
}

/* A program with debug info, its debug part compressed and inflated. */
static int make_files(void)
{
    char cmd[1024];
    if (!mkdtemp(dir)) return -1;
    snprintf(path_z, sizeof path_z, "%s/prog.debug", dir);
    snprintf(path_plain, sizeof path_plain, "%s/plain.debug", dir);
    /* 400 functions: objcopy compresses only sections that shrink. */
    snprintf(cmd, sizeof cmd,
             "{ echo 'int f0(int x) { return x; }'; for i in $(seq 1 400); do "
             "echo \"struct s$i { int a$i; long b$i; }; int f$i(int x) { struct s$i v = { x, $i }; "
             "return f$((i - 1))(x) + (int)v.b$i; }\"; done; "
             "echo 'int main(int c, char **v) { (void)v; return f400(c) & 1; }'; } > %s/prog.c && "
             "cc -g -O0 -o %s/prog %s/prog.c && "
             "objcopy --only-keep-debug --compress-debug-sections=zlib %s/prog %s && "
             "objcopy --decompress-debug-sections %s %s",
             dir, dir, dir, dir, path_z, path_z, path_plain);
    return sh(cmd);
}

/* Section name -> data, compared section by section. */
static int same_sections(int fd_a, int fd_b, int *compressed_left)
{
    Elf *a = elf_begin(fd_a, ELF_C_READ, NULL), *b = elf_begin(fd_b, ELF_C_READ, NULL);
    size_t stra, strb, na = 0, nb = 0;
    int same = a && b && !elf_getshdrstrndx(a, &stra) && !elf_getshdrstrndx(b, &strb) && !elf_getshdrnum(a, &na) &&
               !elf_getshdrnum(b, &nb) && na == nb && na > 1;
    *compressed_left = 0;
    for (size_t i = 1; same && i < na; i++) {
        Elf_Scn *sa = elf_getscn(a, i), *sb = elf_getscn(b, i);
        GElf_Shdr ha, hb;
        if (!sa || !sb || !gelf_getshdr(sa, &ha) || !gelf_getshdr(sb, &hb)) { same = 0; break; }
        *compressed_left += (ha.sh_flags & SHF_COMPRESSED) != 0;
        const char *name_a = elf_strptr(a, stra, ha.sh_name), *name_b = elf_strptr(b, strb, hb.sh_name);
        if (!name_a || !name_b || strcmp(name_a, name_b) || ha.sh_type != hb.sh_type) { same = 0; break; }
        if (ha.sh_type == SHT_NOBITS) continue;
        Elf_Data *da = elf_rawdata(sa, NULL), *db = elf_rawdata(sb, NULL);
        if (!da || !db || da->d_size != db->d_size || (da->d_size && memcmp(da->d_buf, db->d_buf, da->d_size))) {
            fprintf(stderr, "  section %s differs\n", name_a);
            same = 0;
        }
    }
    if (a) elf_end(a);
    if (b) elf_end(b);
    return same;
}

static int is_memfd(int fd)
{
    char p[64], link[256];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(p, link, sizeof link - 1);
    if (n < 0) return 0;
    link[n] = 0;
    return strstr(link, "memfd:") != NULL;
}

static void test_inflates_like_binutils(void)
{
    int fd = open(path_z, O_RDONLY), plain = open(path_plain, O_RDONLY);
    REQUIRE(fd >= 0 && plain >= 0);
    int left = 0, before = 0;
    CHECK(same_sections(fd, fd, &before));
    CHECK(before >= 3);                              /* .debug_info, _abbrev, _line at least */
    int mfd = sym_debug_inflated(fd);
    CHECK(mfd != fd);
    CHECK(is_memfd(mfd));
    CHECK(fcntl(fd, F_GETFD) == -1);                 /* the file's descriptor was closed */
    CHECK(same_sections(mfd, plain, &left));
    CHECK_EQ_U64(left, 0);
    close(mfd);
    close(plain);
}

/* Same descriptor back, still open, and nothing else. */
static void check_untouched(const char *path, const char *what)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) { fprintf(stderr, "  %s: cannot open %s\n", what, path); CHECK(fd >= 0); return; }
    int got = sym_debug_inflated(fd);
    if (got != fd) fprintf(stderr, "  %s: a new descriptor\n", what);
    CHECK(got == fd);
    CHECK(fcntl(fd, F_GETFD) != -1);
    close(got);
    if (got != fd) close(fd);
}

/* Copies the compressed file with one change at offset at (of the byte
 * from the file's section named name, plus delta), or truncated to len. */
static void altered_copy(const char *out, const char *name, long delta, off_t truncate_to)
{
    int fd = open(path_z, O_RDONLY);
    off_t off = -1;
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    size_t str;
    if (e && !elf_getshdrstrndx(e, &str))
        for (Elf_Scn *s = NULL; (s = elf_nextscn(e, s));) {
            GElf_Shdr h;
            const char *n = gelf_getshdr(s, &h) ? elf_strptr(e, str, h.sh_name) : NULL;
            if (n && !strcmp(n, name)) off = (off_t)h.sh_offset + delta;
        }
    if (e) elf_end(e);
    close(fd);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp %s %s", path_z, out);
    sh(cmd);
    int w = open(out, O_RDWR);
    if (off >= 0 && !truncate_to) {
        unsigned char c;
        if (pread(w, &c, 1, off) == 1) { c ^= 0xff; if (pwrite(w, &c, 1, off) != 1) off = -1; }
    }
    if (truncate_to && ftruncate(w, truncate_to)) off = -1;
    close(w);
    CHECK(off >= 0);
}

static void test_leaves_others_alone(void)
{
    char bad[160], cut[160];
    check_untouched(path_plain, "already inflated");
    snprintf(bad, sizeof bad, "%s/prog.c", dir);
    check_untouched(bad, "not ELF");
    check_untouched("/dev/null", "not a regular file");
    /* 40 bytes into .debug_info: past the 24-byte header, inside the deflate stream. */
    snprintf(bad, sizeof bad, "%s/flipped.debug", dir);
    altered_copy(bad, ".debug_info", 40, 0);
    check_untouched(bad, "a section that does not inflate");
    /* cut in the middle of .debug_info: the section headers are gone too */
    snprintf(cut, sizeof cut, "%s/cut.debug", dir);
    int fd = open(path_z, O_RDONLY);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    size_t str;
    off_t at = 0;
    if (e && !elf_getshdrstrndx(e, &str))
        for (Elf_Scn *s = NULL; (s = elf_nextscn(e, s));) {
            GElf_Shdr h;
            const char *n = gelf_getshdr(s, &h) ? elf_strptr(e, str, h.sh_name) : NULL;
            if (n && !strcmp(n, ".debug_info")) at = (off_t)(h.sh_offset + h.sh_size / 2);
        }
    if (e) elf_end(e);
    close(fd);
    altered_copy(cut, ".debug_info", 0, at);
    check_untouched(cut, "a file cut short");
}

int main(int argc, char **argv)
{
    CHECK_MAIN_INIT(argc, argv);
    elf_version(EV_CURRENT);
    if (make_files()) {
        fprintf(stderr, "cannot build the test's debug file (cc, objcopy)\n");
        printf("FAIL: make_files\n");
        return 1;
    }
    RUN(test_inflates_like_binutils);
    RUN(test_leaves_others_alone);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    sh(cmd);
    CHECK_EXIT();
}
