/*
 * size_text.c - see size_text.h.
 */
#include "size_text.h"

#define SIZE_MAX_VALUE (1ull << 62)

int64_t mlz_size_parse(const char *s)
{
    uint64_t v = 0;
    if (!s || *s < '0' || *s > '9') return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > SIZE_MAX_VALUE / 10) return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    unsigned shift = 0;
    switch (*s) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    }
    if (shift) {
        if (v > SIZE_MAX_VALUE >> shift) return -1;
        v <<= shift;
        s++;
        if (*s == 'i' || *s == 'I') s++;
    }
    if (*s == 'b' || *s == 'B') s++;
    return *s || v > SIZE_MAX_VALUE ? -1 : (int64_t)v;
}
