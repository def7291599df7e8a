/*
 * spool_records.c - see spool_records.h.
 */
#include "spool_records.h"
#include "varint.h"

#include <string.h>

size_t mlz_spool_module(uint8_t *out, uint64_t start, uint64_t size, uint64_t bias,
                      const uint8_t *build_id, size_t build_id_len, const char *path)
{
    size_t n = 0, plen = strlen(path);
    if (plen > MLZ_PATH_MAX) plen = MLZ_PATH_MAX;
    if (build_id_len > 64) build_id_len = 64;
    n += mlz_varint_put(out + n, start);
    n += mlz_varint_put(out + n, size);
    n += mlz_varint_put(out + n, bias);
    n += mlz_varint_put(out + n, build_id_len);
    memcpy(out + n, build_id, build_id_len);
    n += build_id_len;
    n += mlz_varint_put(out + n, plen);
    memcpy(out + n, path, plen);
    return n + plen;
}

size_t mlz_spool_stack(uint8_t *out, uint64_t id, const uint64_t *pcs, unsigned depth, uint64_t t_us)
{
    size_t n = mlz_varint_put(out, id);
    n += mlz_varint_put(out + n, depth);
    for (unsigned i = 0; i < depth; i++) n += mlz_varint_put(out + n, pcs[i]);
    return n + mlz_varint_put(out + n, t_us);
}

size_t mlz_spool_module_gone(uint8_t *out, uint64_t start, uint64_t t_us, const char *path)
{
    size_t n = 0, plen = strlen(path);
    if (plen > MLZ_PATH_MAX) plen = MLZ_PATH_MAX;
    n += mlz_varint_put(out + n, start);
    n += mlz_varint_put(out + n, t_us);
    n += mlz_varint_put(out + n, plen);
    memcpy(out + n, path, plen);
    return n + plen;
}
