/*
 * tmp_guard.h - temporary output files removed if a signal ends the tool.
 *
 * Outputs are built under "<path>.<pid>.tmp" and renamed when complete.
 * Ctrl-C or a SIGTERM in the middle would leave that file behind; a tool
 * calls mlz_tmp_guard_signals() once, and from then on the files added
 * here are unlinked before the signal takes the process down as it would
 * have. Inside a profiled process (the payload) no handler is installed
 * and adding is a no-op: the target's signals are not ours.
 */
#ifndef MLZ_TMP_GUARD_H
#define MLZ_TMP_GUARD_H

void mlz_tmp_guard_signals(void);
void mlz_tmp_guard_add(const char *path);    /* PATH must stay valid until dropped */
void mlz_tmp_guard_drop(const char *path);
/* A line (with its newline; it must stay valid) written to stderr when a
 * signal ends the tool: what was kept and where. NULL: none. */
void mlz_tmp_guard_note(const char *line);

#endif
