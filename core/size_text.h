/*
 * size_text.h - a size given as text: "524288", "512k", "1m", "4GiB".
 * One reading for every place that takes one (memlyze run's and
 * memlyze-attach's --rate, the payload's MEMLYZE_RATE), so that a value
 * one of them takes the others take too.
 */
#ifndef MLZ_SIZE_TEXT_H
#define MLZ_SIZE_TEXT_H

#include <stdint.h>

/* Decimal digits, then optionally k, m or g (any case: KiB, MiB, GiB),
 * then optionally i, then b or B. The value, at most 2^62; -1 for
 * anything else (a sign, an overflow, other characters). Calls nothing:
 * safe inside the payload at any time. */
int64_t mlz_size_parse(const char *s);

#endif
