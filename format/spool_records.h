/*
 * spool_records.h - the payloads of the spool's extension events (FORMAT.md,
 * "Spools"), encoded in one place. The payload's drain thread is their only
 * writer (memlyze snapshot writes a .mlyze directly, no spool); finalize
 * reads them back. No allocation.
 */
#ifndef MLZ_SPOOL_RECORDS_H
#define MLZ_SPOOL_RECORDS_H

#include <stddef.h>
#include <stdint.h>

#include "mlz_format.h"

/* Room a MODULE payload may need. */
#define MLZ_SPOOL_MODULE_MAX (MLZ_PATH_MAX + 128)
/* Room a STACK_RAW payload of depth frames needs. */
#define MLZ_SPOOL_STACK_MAX(depth) (30 + (size_t)(depth) * 10)

/* MODULE: start, size, bias, build-id, path (cut at MLZ_PATH_MAX). */
size_t mlz_spool_module(uint8_t *out, uint64_t start, uint64_t size, uint64_t bias,
                      const uint8_t *build_id, size_t build_id_len, const char *path);
/* STACK_RAW: id, depth, the PCs leaf first, then the time (µs) of an
 * allocation that had it: the event's own time is only the stream's. */
size_t mlz_spool_stack(uint8_t *out, uint64_t id, const uint64_t *pcs, unsigned depth, uint64_t t_us);
/* MODULE_GONE: the module at start (path) was unloaded by time t_us. */
size_t mlz_spool_module_gone(uint8_t *out, uint64_t start, uint64_t t_us, const char *path);

#endif
