/*
 * pprof.h - a replayed profile as pprof's profile.proto, gzip'd, following
 * Go's heap convention so that pprof, Pyroscope and Parca read it:
 *
 *   sample_type  alloc_objects/count alloc_space/bytes inuse_objects/count
 *                inuse_space/bytes (already unsampled: our estimates)
 *   period_type  space/bytes, period = the sampling rate
 *   one Sample per site, locations leaf first; inlined frames are extra
 *   Lines of one Location, innermost first; Mappings carry build ids.
 */
#ifndef MLZ_PPROF_H
#define MLZ_PPROF_H

#include "profile.h"

#include <stdio.h>

/* start_us: the recording's start (time_nanos); end_us: the moment the
 * profile describes (duration_nanos = end - start). 0 on success, -1 with
 * a message in err. */
int pprof_write(FILE *f, const prof *p, uint64_t start_us, uint64_t end_us, char *err, size_t errlen);

#endif
