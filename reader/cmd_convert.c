/*
 * cmd_convert.c - memlyze convert: rewrites a .mlyze file in another
 * encoding of its event stream (v1, v1 in LZ4 blocks, split-stream blocks).
 * Events keep their stored deltas and the header's spare bytes and the
 * metadata are copied as they are, so v1 -> split -> v1 gives back the
 * original file byte for byte.
 */
#include "cli.h"
#include "codec_split.h"
#include "finalize.h"

#include <getopt.h>
#include <string.h>

static int run(int argc, char **argv)
{
    const char *out = NULL;
    int encoding = -1, force = 0, level = 0, c;
    static const struct option opts[] = {
        { "output", required_argument, 0, 'o' }, { "format", required_argument, 0, 'F' },
        { "level", required_argument, 0, 'L' }, { "force", no_argument, 0, 'f' }, { 0, 0, 0, 0 } };
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:f", opts, NULL)) != -1) {
        if (c == 'o') out = optarg;
        else if (c == 'f') force = 1;
        else if (c == 'F') {
            if ((encoding = mlz_encoding_parse(optarg)) < 0)
                return cli_usage_error(&cmd_convert, "--format takes split, v1 or lz4");
        } else if (c == 'L') {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || end == optarg || v < 1 || v > MLZ_SPLIT_LEVEL_MAX)
                return cli_usage_error(&cmd_convert, "--level takes 1 to 19");
            level = (int)v;
        } else return cli_usage_error(&cmd_convert, "bad option");
    }
    if (encoding < 0) return cli_usage_error(&cmd_convert, "missing --format");
    if (!out) return cli_usage_error(&cmd_convert, "missing -o FILE");
    if (level && encoding != MLZ_ENC_SPLIT) return cli_usage_error(&cmd_convert, "--level is for --format split");
    if (argc - optind != 1) return cli_usage_error(&cmd_convert, "need exactly one input FILE");
    const char *in = argv[optind];
    mlz_reader *r = cli_open("convert", in, MLZ_READ_NO_INDEX);
    if (!r) return 1;
    const mlz_header *h = mlz_reader_header(r);
    const mlz_meta *m = mlz_reader_meta(r);
    unsigned flags = mlz_encoding_flags(encoding);
    /* Blocks of the same kind keep their boundaries (a round trip through
     * another encoding then restores them too, the writers being greedy). */
    int same_blocks = flags && (h->flags & MLZ_FLAGS_BLOCKS) == flags;

    static uint8_t buf[MLZ_SPLIT_MAX_RAW], zbuf[MLZ_LZ4_BOUND];
    static mlz_writer w;
    mlz_writer_opts o = { .start_us = h->start_us, .meta = m->json, .meta_len = m->json_len,
                          .flags = flags, .replace = force, .plain = !(h->flags & MLZ_FLAG_SEALED) || (h->flags & MLZ_FLAG_UNSEALED_V1),
                          .buf = buf, .buf_size = sizeof buf, .zbuf = zbuf, .zbuf_size = sizeof zbuf, .level = level };
    int we = mlz_writer_open(&w, out, &o);
    if (we) {
        mlz_reader_close(r);
        return cli_error("convert", "%s: %s", mlz_writer_error_path(&w, out), strerror(-we));
    }
    mlz_writer_set_header_rest(&w, h->rest);
    mlz_event ev;
    mlz_error e = { 0 };
    int rc;
    uint64_t n = 0;
    while ((rc = mlz_reader_next(r, &ev, &e)) == 1) {
        if (same_blocks && n++ > 0 && mlz_reader_at_block_start(r) && (we = mlz_writer_end_block(&w))) break;
        if ((we = mlz_writer_raw_event(&w, &ev))) break;
    }
    if (rc < 0 || we) {
        mlz_writer_abort(&w);
        if (rc < 0) cli_print_format_error("convert", in, &e);
        else cli_error("convert", "%s: %s", mlz_writer_error_path(&w, out), strerror(-we));
        mlz_reader_close(r);
        return 1;
    }
    mlz_reader_close(r);
    if ((we = mlz_writer_close(&w))) return cli_error("convert", "%s: %s", mlz_writer_error_path(&w, out), strerror(-we));
    return 0;
}

const mlz_command cmd_convert = {
    "convert", run, "rewrite a file in another encoding (split, v1, lz4)",
    "usage: memlyze convert --format split|v1|lz4 [--level N] [-f] -o OUT FILE\n"
    "\n"
    "Writes OUT with the same metadata and events as FILE, its event stream\n"
    "encoded as: split (split-stream zstd blocks, the default for traces),\n"
    "v1 (the plain .mlyze v1 stream) or lz4 (v1 in LZ4 blocks). Compressed\n"
    "outputs get a .mlyze.idx index. A v1 file converted to split and back is\n"
    "identical to the original, byte for byte.\n"
    "  --format ENC        split, v1 or lz4\n"
    "  --level N           split's zstd level, 1 (fastest) to 19 (smallest);\n"
    "                      traces are written at 9 (on a recorded redis, 19\n"
    "                      is 16% smaller and 6 times slower)\n"
    "  -o, --output FILE   the file to write (never replaced unless -f)\n"
    "  -f, --force         replace OUT if it exists\n",
};
