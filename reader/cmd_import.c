/*
 * cmd_import.c - memlyze import FORMAT IN -o OUT.mlyze: another tool's
 * recording as a memlyze trace, so every report reads it.
 *
 * Each format is one row of IMPORT_FORMATS: its name, its importer (an
 * import_fn in its own file) and its help text; the usage text and the
 * format error come from the table.
 */
#include "cli.h"
#include "import.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IMPORT_FORMATS(X)                                                                   \
    X("dumpalloc", dumpalloc_import,                                                        \
      "a dumpalloc file (PROC, OBJE, ALOC + FRAM chain, DALC records). ALOC\n"             \
      "               carries no size: allocations are imported with the size of a\n"       \
      "               preceding ASIZ record (memlyze's own exports have one), else\n"        \
      "               as 0 bytes, so counts, times and stacks are exact and byte\n"         \
      "               totals are not (a note says how many). Frees take the time of\n"    \
      "               the last ALOC; a DALC of an address never allocated is dropped\n"    \
      "               and counted. NTVE frames become functions named by their\n"          \
      "               address (0x...), PCAL frames keep function, file and line.\n") \
    X("heaptrack", heaptrack_import,                                                        \
      "a heaptrack data file (heaptrack.PROG.PID.zst, or .gz, or plain), as\n"             \
      "               heaptrack writes it. Sizes, counts, call chains (with inlined\n"      \
      "               frames) and times (milliseconds) are kept. heaptrack records no\n"   \
      "               addresses: each block gets a made-up one, and a free takes the\n"     \
      "               newest live block of its size and call chain. Raw files (not yet\n" \
      "               interpreted by heaptrack) are refused.\n")

typedef struct import_format {
    const char *name;
    import_fn read;
} import_format;

#define ROW(name, fn, help) { name, fn },
static const import_format formats[] = { IMPORT_FORMATS(ROW) };
#undef ROW
#define NFORMATS (sizeof formats / sizeof formats[0])
#define NAME(name, fn, help) ", " name
static const char format_names[] = IMPORT_FORMATS(NAME);
#undef NAME
#define HELP(name, fn, help) "  " name "\n               " help

static int run(int argc, char **argv)
{
    const char *out = NULL;
    int force = 0, c;
    static const struct option opts[] = {
        { "output", required_argument, 0, 'o' }, { "force", no_argument, 0, 'f' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:f", opts, NULL)) != -1) {
        if (c == 'o') out = optarg;
        else if (c == 'f') force = 1;
        else return cli_usage_error(&cmd_import, "bad option");
    }
    if (argc - optind != 2) return cli_usage_error(&cmd_import, "need a FORMAT and an input FILE");
    if (!out) return cli_usage_error(&cmd_import, "need -o OUT.mlyze");
    const import_format *fmt = NULL;
    for (size_t i = 0; i < NFORMATS; i++)
        if (!strcmp(formats[i].name, argv[optind])) fmt = &formats[i];
    if (!fmt) return cli_usage_error(&cmd_import, "FORMAT is one of %s", format_names + 2);

    const char *path = argv[optind + 1];
    int fd = open(path, O_RDONLY | O_NONBLOCK);   /* a FIFO: refused below, not waited on */
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        int e = errno;
        if (fd >= 0) close(fd);
        return cli_error("import", "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return cli_error("import", "%s: not a regular file", path);
    }
    size_t len = (size_t)st.st_size;
    void *data = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (len && data == MAP_FAILED) return cli_error("import", "%s: %s", path, strerror(errno));

    imp_trace t;
    import_job *job = calloc(1, sizeof *job);
    int rc = 1;
    if (!job || imp_init(&t)) {
        free(job);
        if (len) munmap(data, len);
        return cli_error("import", "out of memory");
    }
    job->path = path;
    job->data = data;
    job->len = len;
    job->t = &t;
    job->info.pid = -1;
    job->info.source = fmt->name;
    char err[384];
    if (fmt->read(job)) {
        cli_error("import", "%s: %s", path, job->err);
    } else if (imp_write(&t, out, &job->info, force, err, sizeof err)) {
        cli_error("import", "%s%s", err, strstr(err, "File exists") ? " (--force replaces it)" : "");
    } else {
        for (char *l = job->notes, *e; (e = strchr(l, '\n')); l = e + 1)
            fprintf(stderr, "memlyze import: warning: %.*s\n", (int)(e - l), l);
        rc = 0;
    }
    for (size_t i = 0; i < sizeof job->owned / sizeof job->owned[0]; i++) free(job->owned[i]);
    free(job);
    imp_free(&t);
    if (len) munmap(data, len);
    return rc;
}

const mlz_command cmd_import = {
    "import", run, "turn a dumpalloc or heaptrack recording into a memlyze trace",
    "usage: memlyze import FORMAT IN -o OUT.mlyze [--force]\n"
    "\n"
    "Reads IN, a recording made by another tool, and writes an exact memlyze\n"
    "trace (every allocation, rate 1) that all memlyze reports read: top, diff,\n"
    "flamegraph, export to pprof... Problems the reader can step over are counted\n"
    "and printed as warnings; a malformed file is refused with one line naming\n"
    "the byte where it breaks, and no output is written.\n"
    "  -o, --output OUT  the trace to write\n"
    "  -f, --force       replace OUT if it exists\n"
    "\n"
    "Formats:\n" IMPORT_FORMATS(HELP),
};
