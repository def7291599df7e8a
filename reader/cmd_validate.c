/*
 * cmd_validate.c - memlyze validate FILE...: checks every byte of each file
 * against the format's rules; "FILE: ok" or one line naming rule and offset.
 */
#include "arc.h"
#include "cli.h"

#include <string.h>

/* A .arc heap dump (by its name: the stream has no magic): every rule of
 * seed 003 (arc_read.c). */
static int validate_arc(const char *path)
{
    arc_file a;
    arc_error e;
    int rc = arc_open(&a, path, &e);
    if (rc && !strcmp(e.rule, "io")) fprintf(stderr, "memlyze validate: %s: %s\n", path, e.msg);
    else if (rc) fprintf(stderr, "memlyze validate: %s: invalid: %s at byte %llu: %s\n", path, e.rule,
                         (unsigned long long)e.offset, e.msg);
    else printf("%s: ok (.arc, %zu objects)\n", path, a.nobjs);
    arc_close(&a);
    return rc ? 1 : 0;
}

static int run(int argc, char **argv)
{
    if (argc < 2) return cli_usage_error(&cmd_validate, "no file given");
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        size_t l = strlen(argv[i]);
        if (l > 4 && !strcmp(argv[i] + l - 4, ".arc")) { bad |= validate_arc(argv[i]); continue; }
        mlz_reader *r = cli_open("validate", argv[i], 0);
        if (!r) { bad = 1; continue; }
        mlz_event ev;
        mlz_error e = { 0 };
        int rc;
        uint64_t n = 0;
        if (mlz_reader_header(r)->flags & MLZ_FLAG_SPLIT) {
            /* Whole blocks at a time: the same checks, twice as fast. */
            mlz_block_view b;
            while ((rc = mlz_reader_next_block(r, &b, &e)) == 1) n += b.n;
        } else {
            while ((rc = mlz_reader_next(r, &ev, &e)) == 1) n++;
        }
        if (rc < 0) {
            cli_print_format_error("validate", argv[i], &e);
            bad = 1;
        } else {
            const mlz_header *h = mlz_reader_header(r);
            const mlz_meta *m = mlz_reader_meta(r);
            printf("%s: ok (%llu events, %zu stacks%s%s%s)\n", argv[i], (unsigned long long)n,
                   m->nstacks, (h->flags & MLZ_FLAG_LZ4) ? ", lz4" : (h->flags & MLZ_FLAG_SPLIT) ? ", split" : "",
                   (h->flags & MLZ_FLAGS_BLOCKS) && !mlz_reader_has_index(r) ? ", index missing or stale" : "",
                   m->kind ? (m->kind[0] == 's' && m->kind[1] == 'p' ? ", spool" : "")
                           : (h->flags & MLZ_FLAGS_BLOCKS) ? ", metadata of a plain v1 file" : ", plain v1");
        }
        mlz_reader_close(r);
    }
    return bad;
}

const mlz_command cmd_validate = {
    "validate", run, "check files against the .mlyze format rules",
    "usage: memlyze validate FILE...\n"
    "\n"
    "Reads each FILE completely and checks it against the format's seven rules\n"
    "(docs/FORMAT.md). Prints \"FILE: ok (...)\" for a valid file; for an invalid\n"
    "one, one line naming the rule broken and the byte offset. Exits 1 if any\n"
    "file is invalid. Files named *.arc are heap dumps (memlyze heapdump): they\n"
    "are checked against every rule of the .arc stream (docs/FORMAT.md).\n",
};
