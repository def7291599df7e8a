/*
 * import.c - what the importers share (import.h).
 */
#include "import.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void import_note(import_job *job, const char *fmt, ...)
{
    size_t n = strlen(job->notes);
    if (n + 2 >= sizeof job->notes) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(job->notes + n, sizeof job->notes - n - 1, fmt, ap);
    va_end(ap);
    strcat(job->notes, "\n");
}
