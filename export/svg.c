/*
 * svg.c - see svg.h.
 */
#include "svg.h"

#include <math.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at s, or 0. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (s[0] > 0xf4) return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    /* No overlong forms, surrogates or code points above U+10FFFF. */
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return n;
}

void svg_text(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        switch (c) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if (c < 0x80) {
                fputc(c < 0x20 && c != '\t' && c != '\n' ? '?' : c, f);
            } else {
                /* A name with broken UTF-8 must not make the file ill-formed. */
                int n = utf8_len(p);
                if (!n) { fputc('?', f); break; }
                fwrite(p, 1, (size_t)n, f);
                p += n - 1;
            }
        }
    }
}

double svg_nice_step(double range, int n)
{
    if (!(range > 0) || n < 1) return 1;
    double raw = range / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

double svg_bytes_step(double range, int n, const char **unit, double *div)
{
    static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    double d = 1;
    while (u < 4 && range / d >= 2048) { d *= 1024; u++; }
    *unit = units[u];
    *div = d;
    return svg_nice_step(range / d, n) * d;
}

void svg_name_color(const char *name, char *buf, size_t len)
{
    /* Greens and teals, as memory flame graphs are usually drawn (warm
     * colors are taken by CPU profiles); hashed so a name keeps its color. */
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p && *p != ' '; p++) h = (h ^ *p) * 16777619u;
    double a = (h & 0xff) / 255.0, b = ((h >> 8) & 0xff) / 255.0, c = ((h >> 16) & 0xff) / 255.0;
    snprintf(buf, len, "rgb(%d,%d,%d)", (int)(40 * c), (int)(170 + 70 * a), (int)(60 + 150 * b));
}
