/*
 * fuzz_reader.c - libFuzzer target: any byte string fed to the reader must
 * end in a clean stream end or a reported error, never a crash, a hang or a
 * sanitizer report. Seeds: the .txt files of tests/fuzz/seeds, turned into binary files
 * by `memlyze undump` when `make fuzz` runs, and tests/data/split_model1.mlyze.
 *
 * A split file is read a second time with every block's checksum made right
 * again: behind a wrong checksum a mutation stops at the checksum, and the
 * decoder's own checks (codes naming nothing, stream lengths, widths) would
 * never be reached.
 */
#include "mlz_format.h"
#include "codec_split.h"
#include "varint.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void read_all(const uint8_t *data, size_t size)
{
    mlz_error e;
    for (unsigned flags = 0; flags <= MLZ_READ_TRUNCATED_OK; flags += MLZ_READ_TRUNCATED_OK) {
        mlz_reader *r = mlz_reader_open_mem(data, size, flags, &e);
        if (!r) continue;
        mlz_event ev;
        uint64_t sum = 0;
        while (mlz_reader_next(r, &ev, &e) == 1) {
            sum += ev.addr + ev.size + ev.len;
            for (uint64_t i = 0; i < ev.len; i++) sum += ev.data[i];  /* payload must be readable */
        }
        const mlz_meta *m = mlz_reader_meta(r);
        for (size_t i = 0; i < m->nstacks; i++)
            for (uint32_t j = 0; j < m->stacks[i].depth; j++)
                sum += (uintptr_t)mlz_meta_function(m, m->stacks[i].frames[j].func_id);
        (void)sum;
        mlz_reader_close(r);
    }
    /* Split-stream files: the block-column path too. */
    mlz_reader *r = mlz_reader_open_mem(data, size, 0, &e);
    if (r && (mlz_reader_header(r)->flags & MLZ_FLAG_SPLIT)) {
        mlz_block_view b;
        uint64_t sum = 0;
        while (mlz_reader_next_block(r, &b, &e) == 1) {
            for (uint32_t i = 0; i < b.nalloc; i++) sum += b.a_addr[i] + b.a_size[i] + b.a_stack[i] + b.a_thread[i];
            for (uint32_t i = 0; i < b.nfree; i++) sum += b.f_addr[i];
            for (uint32_t i = 0; i < b.n; i++) sum += b.kind[i] + b.delta[i];
        }
        (void)sum;
    }
    mlz_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_all(data, size);
    if (size < MLZ_HEADER_SIZE || !(mlz_get_u32(data + 20) & MLZ_FLAG_SPLIT)) return 0;
    uint8_t *fixed = malloc(size);
    if (!fixed) return 0;
    memcpy(fixed, data, size);
    uint64_t off = MLZ_HEADER_SIZE + (uint64_t)mlz_get_u32(fixed + 16);
    while (off + MLZ_SPLIT_HEADER <= size) {
        uint32_t plen = mlz_get_u32(fixed + off);
        if (plen > size - off - MLZ_SPLIT_HEADER) break;
        mlz_put_u32(fixed + off + 12, mlz_split_crc(fixed + off + MLZ_SPLIT_HEADER, plen));
        off += MLZ_SPLIT_HEADER + plen;
    }
    read_all(fixed, size);
    free(fixed);
    return 0;
}
