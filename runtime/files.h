/*
 * files.h: the one place that decides how the tools read and write files
 * (runtime/files.c).  Internal to libtessera and its tools; not installed.
 *
 * Inputs (tsr_in_*): a path is stat'ed before it is opened and anything but
 * a regular file (after links) is refused, so a FIFO or a device given as
 * an input is an error, never a read that blocks forever.
 *
 * Outputs (tsr_out_*): the outputs of one command form a transaction.  Each
 * is written to a temporary beside its target; commit renames them all, and
 * a failure anywhere removes the temporaries and leaves every file that
 * existed before as it was.  A symbolic link is written through (the temp
 * goes beside the link's target, the link stays); a character device or a
 * FIFO (/dev/stdout, a pipe) is written directly, and so is a file the
 * process has open, named through /proc (/dev/stdout redirected to a file:
 * appended to); a directory or any other non-regular file is never
 * replaced.  Folders (a corpus, a report) are
 * built the same way: a temporary folder beside the target, renamed into
 * place when complete.
 *
 * Cost: a few system calls per file (lstat, open, rename) on top of the
 * writes; nothing is copied.  Not thread-safe per transaction; separate
 * transactions may run in parallel threads.
 */
#ifndef TSR_FILES_H
#define TSR_FILES_H

#include <stdio.h>
#include <sys/types.h>

#include "tessera.h"

/* "a directory", "a FIFO", "a character device", ... for messages. */
const char *tsri_file_kind(mode_t mode);
/* 1 when dir is a folder holding nothing (but . and ..), 0 when it holds
 * something, -1 when it cannot be read (errno set). */
int tsri_file_dir_empty(const char *dir);

/* ---- inputs ---------------------------------------------------------------- */

/* Checks that path (links followed) names a regular file.  On failure the
 * message is "<what> '<path>': <reason>", `what` defaulting to "cannot
 * read": "cannot read 'm.npy': a FIFO, not a regular file". */
tsr_status tsri_in_check(const char *path, const char *what, tsr_error *err);
/* tsri_in_check, then fopen(path, "rb") without blocking on a file swapped
 * for a FIFO in between; NULL on failure (err says why). */
FILE *tsri_in_open(const char *path, const char *what, tsr_error *err);

/* ---- outputs --------------------------------------------------------------- */

typedef struct tsr_out tsr_out;

enum {
  TSR_OUT_NEW = 1 /* refuse a target that exists ("file exists") */
};

tsr_status tsri_out_begin(tsr_out **t, tsr_error *err);
/* Adds the file `path` to t: checks what is there, opens the temporary (or
 * the device) and gives the stream to write the content to in *f, owned by
 * t.  Two outputs that name the same file are refused. */
tsr_status tsri_out_file(tsr_out *t, const char *path, int flags, FILE **f, tsr_error *err);
/* The same for a writer that needs a path (SQLite): *tmp names an empty
 * temporary file, owned by t; the target must be a regular file or absent. */
tsr_status tsri_out_path(tsr_out *t, const char *path, int flags, const char **tmp,
                        tsr_error *err);
/* Whether an existing, non-empty folder may be replaced as a whole (a
 * previous report, say); NULL: never. */
typedef int (*tsr_out_replaceable)(const char *dir, void *ud);
/* Adds the folder `path`: absent or empty (or `replaceable`).  *work names
 * the temporary folder to fill, owned by t; commit renames it onto path. */
tsr_status tsri_out_dir(tsr_out *t, const char *path, tsr_out_replaceable replaceable, void *ud,
                       const char **work, tsr_error *err);
/* Closes every stream, then renames every temporary onto its target; on any
 * failure undoes what it had renamed and removes the temporaries.  (What
 * goes to a device, FIFO or open file is written as it is produced and
 * cannot be taken back.)  Frees t either way; t may be NULL after a failed
 * begin (returns the error). */
tsr_status tsri_out_commit(tsr_out *t, tsr_error *err);
/* Removes the temporaries and frees t (NULL is fine); targets are untouched. */
void tsri_out_abort(tsr_out *t);

/* One file, in one transaction. */
tsr_status tsri_out_write(const char *path, const void *data, size_t n, tsr_error *err);

/* npy.c: writes `a` as .npy to f (path names the file in messages); with
 * tsri_out_file, several arrays become outputs of one transaction. */
tsr_status tsri_npy_write(FILE *f, const char *path, const tsr_array *a, tsr_error *err);

#endif
