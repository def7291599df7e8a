/*
 * dumpalloc_import.c - memlyze import dumpalloc: the parse (dumpalloc_read.c)
 * as an importer, its counted oddities as notes.
 */
#include "dumpalloc.h"
#include "import.h"

#include <string.h>

int dumpalloc_import(import_job *job)
{
    dumpalloc_info di;
    int rc = dumpalloc_parse(job->data, job->len, job->t, &di, job->err, sizeof job->err);
    const dumpalloc_counts *n = &di.n;
    if (rc == 0) {
        job->info.source = "dumpalloc";
        job->info.pid = di.pid;
        job->info.exe = job->owned[0] = di.process;
        job->info.extra_json = job->owned[1] = di.objects_json;
        di.process = di.objects_json = NULL;
        if (n->unsized)
            import_note(job, "%llu of %llu allocations have no size (dumpalloc's ALOC carries none): "
                        "imported as 0 bytes, counts and stacks exact", (unsigned long long)n->unsized,
                        (unsigned long long)n->allocs);
        if (n->unknown_frees)
            import_note(job, "%llu DALC records free an address not allocated: dropped",
                        (unsigned long long)n->unknown_frees);
        if (n->chains_without_term)
            import_note(job, "%llu frame chains end without TERM: ended at the next record",
                        (unsigned long long)n->chains_without_term);
        if (n->unknown_records)
            import_note(job, "%llu records of unknown types skipped", (unsigned long long)n->unknown_records);
        if (n->unknown_frames)
            import_note(job, "%llu frames of unknown kinds skipped", (unsigned long long)n->unknown_frames);
        if (n->stray_frames)
            import_note(job, "%llu FRAM records outside an ALOC chain skipped", (unsigned long long)n->stray_frames);
        if (n->bad_nanos)
            import_note(job, "%llu timestamps with nanoseconds past 999999999: clamped", (unsigned long long)n->bad_nanos);
    }
    dumpalloc_info_free(&di);
    return rc;
}
