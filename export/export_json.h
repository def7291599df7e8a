/*
 * export_json.h - memlyze's own JSON dump of a replayed profile: every site
 * with all its estimates, their 95% intervals and its symbolized frames.
 * The shape (tests/e2e/reports/export-schema.json is its JSON schema):
 *
 *   { "format": "memlyze-export", "version": 1, "file", "kind", "rate",
 *     "pid", "exe", "start_us", "at_us",          (the moment described)
 *     "totals": { live_bytes, live_bytes_ci95, live_count, live_count_ci95,
 *                 live_samples, samples, peak_bytes, peak_us },
 *     "modules": [ { path, build_id, base, size, bias } ],
 *     "sites": [   (by live bytes, largest first)
 *       { stack_id, samples, live_samples,
 *         live_bytes, live_bytes_ci95, live_count, live_count_ci95,
 *         alloc_bytes, alloc_bytes_ci95, alloc_count, alloc_count_ci95,
 *         peak_bytes, peak_us,
 *         frames: [ { function, file, line, label, module, address, inlined } ] } ] }
 *
 * frames are leaf first, as in the .mlyze metadata; address is the runtime
 * address (module load bias + module-relative address), module an index
 * into modules or -1. Byte and count values are estimates (floats).
 */
#ifndef MLZ_EXPORT_JSON_H
#define MLZ_EXPORT_JSON_H

#include "profile.h"

#include <stdio.h>

int export_json_write(FILE *f, const prof *p, const char *file, uint64_t start_us, uint64_t at_us,
                      char *err, size_t errlen);

#endif
