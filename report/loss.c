/*
 * loss.c - one line on what a trace lost (see loss.h).
 */
#include "loss.h"
#include "mlz_format.h"

#include <stdio.h>

static unsigned long long counter(const json_t *c, const char *name)
{
    json_t *v = json_object_get(c, name);
    return json_is_integer(v) ? (unsigned long long)json_integer_value(v) : 0;
}

int mlz_loss_describe(const json_t *counters, uint64_t rate, char *buf, size_t len)
{
    if (len) buf[0] = 0;
    if (!json_is_object(counters)) return 0;
    /* Given up samples leave the trace consistent but its estimates low;
     * lost frees leave objects that look live although they were freed. */
    unsigned long long given_up = counter(counters, "ring_drops") + counter(counters, "no_ring") +
                                  counter(counters, "map_full_drops") + counter(counters, "handler_allocs");
    unsigned long long frees = counter(counters, "frees_lost");
    /* Stopped early: what was recorded is consistent, but it ends before
     * the program did. */
    const char *disk = counter(counters, "disk_low_stops")
                     ? "; new allocations stopped being recorded when the spool's file system was almost full" : "";
    /* Raised rate: nothing lost, but fewer samples than asked for. */
    char raised[160] = "";
    unsigned long long shift = counter(counters, "rate_shift");
    if (shift)
        snprintf(raised, sizeof raised, "%ssampling rate raised %llux, to %llu bytes, to keep up with the program "
                 "(estimates stay unbiased, their intervals wider)", given_up || frees || *disk ? "; " : "",
                 1ull << (shift < 63 ? shift : 63), (unsigned long long)rate << (shift < 63 ? shift : 63));
    /* A snapshot read while the program ran: not one instant. */
    char moving[200] = "";
    unsigned long long born = counter(counters, "born_while_read");
    if (born)
        snprintf(moving, sizeof moving, "%sthe heap was read while the program ran (%.1f ms): %llu of these objects "
                 "were born meanwhile, and as many freed meanwhile may be counted too",
                 given_up || frees || *disk || shift ? "; " : "", counter(counters, "read_us") / 1000.0, born);
    /* A full heap map has a remedy: a bigger one. */
    char full[200] = "";
    unsigned long long full_drops = counter(counters, "map_full_drops"), cap = counter(counters, "map_capacity");
    if (full_drops)
        snprintf(full, sizeof full, "; %llu of them found the heap map full (%llu slots): memlyze-attach and memlyze "
                 "run take --max-live N for more", full_drops, cap);
    if (!given_up && !frees && !*disk && !shift && !born) return 0;
    if (!given_up && !frees)
        snprintf(buf, len, "%s%s%s%s", *disk ? "recording incomplete" : "", disk, raised, moving);
    else
        snprintf(buf, len, "events lost while recording: %llu samples given up (estimates are low), "
                 "%llu frees not recorded (as many objects may show as live)%s%s%s%s", given_up, frees, full, disk,
                 raised, moving);
    return 1;
}

int mlz_loss_of_file(const char *path, char *buf, size_t len)
{
    if (len) buf[0] = 0;
    mlz_error e = { 0 };
    mlz_reader *r = mlz_reader_open(path, 0, &e);
    if (!r) return 0;
    const mlz_meta *m = mlz_reader_meta(r);
    int lost = m && m->root ? mlz_loss_describe(json_object_get(m->root, "counters"), m->rate, buf, len) : 0;
    mlz_reader_close(r);
    return lost;
}
