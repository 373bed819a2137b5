/* File-system helpers shared by every stage that writes: folders and atomic files. */
#ifndef SP_FSUTIL_H
#define SP_FSUTIL_H

#include <stddef.h>
#include <stdio.h>

#include "error.h"

/* mkdir -p path.  Returns 0 or SP_EIO with err naming the folder. */
int sp_mkdirs(const char *path, sp_err_t *err);

/* mkdir -p of the folder that will hold the file `path`. */
int sp_make_parent(const char *path, sp_err_t *err);

/*
 * Output sets.  Every output of a work item is written under a unique
 * temporary name in its destination folder, created exclusively (O_EXCL, so
 * a planted file or symlink is never followed or reused); when the item has
 * succeeded, sp_outset_commit() fsyncs every temporary, renames them all
 * over their final names and fsyncs the folders, so the item's outputs
 * appear together.  On failure sp_outset_abort() removes only the set's own
 * temporaries: a previous good output is never touched.  Temporary names
 * are ".NAME.starpipe-tmp.HOST.PID.XXXXXX", so a later run on the same host
 * can tell a dead run's leftovers (sp_outset_clean_stale_dir) from a live one's.
 */
typedef struct sp_outset {
	size_t n, cap;
	struct sp_outfile {
		char *path; /* final name */
		char *tmp;  /* temporary, or NULL once renamed */
	} *f;
} sp_outset_t;

/* The folder ("." when none) and the last component of path into the
 * buffers; 0, or -1 when one is too small. */
int sp_split_path(const char *path, char *dir, size_t dsz, char *base, size_t bsz);

/* Checks that `path` can be an output: absent, or a regular file (not a
 * symlink, device, FIFO or folder).  0 or SP_EIO with err naming it. */
int sp_output_check(const char *path, sp_err_t *err);

/* Adds the output `path` to the set: creates its folder and a unique empty
 * temporary file beside it, whose name is returned in *tmp (owned by the
 * set).  Refuses a path that is already in the set or that exists and is
 * not a regular file. */
int sp_outset_add(sp_outset_t *s, const char *path, const char **tmp, sp_err_t *err);

/* fsyncs every temporary, renames each over its final name, fsyncs their
 * folders.  On failure the temporaries not yet renamed are removed. */
int sp_outset_commit(sp_outset_t *s, sp_err_t *err);

/* Removes the temporaries still there; never touches a final name. */
void sp_outset_abort(sp_outset_t *s);

/* sp_outset_abort(), then frees the set's memory (the set can be reused). */
void sp_outset_free(sp_outset_t *s);

/* Removes every temporary of every output set of the process, after any
 * commit in progress has renamed all its files, and keeps every set from
 * committing afterwards: for a process about to _exit() (a stop that cannot
 * wait for its items). */
void sp_outset_remove_live(void);

/* Removes the temporaries that dead starpipe processes of this host left in
 * the folder `dir` (one scan of it).  Returns how many were removed. */
size_t sp_outset_clean_stale_dir(const char *dir);

/* Opens a temporary of an output set for writing (O_TRUNC, O_NOFOLLOW). */
int sp_open_tmp(const char *tmp, const char *label, sp_err_t *err);

/* Writes len bytes into the temporary file `tmp` (of an output set) and
 * fsyncs it; `label` (the final name) is used in messages. */
int sp_write_file_into(const char *tmp, const char *label, const void *data, size_t len,
		       sp_err_t *err);

/* Writes len bytes to path atomically: a one-file output set.  On failure
 * nothing is left at the temporary name and a previous file at path is
 * untouched. */
int sp_write_file_atomic(const char *path, const void *data, size_t len, sp_err_t *err);

/* Closes f, an open_memstream() over *text and *len, and writes what it
 * holds to path with sp_write_file_atomic().  The caller frees *text. */
int sp_write_memstream_atomic(const char *path, FILE *f, char *const *text, const size_t *len,
			      sp_err_t *err);

/* Opens `path` for appending (a journal: several runs append to one file),
 * creating it if absent, and refuses it as an output is refused: a symbolic
 * link (never followed: O_NOFOLLOW), a FIFO, a device, a socket or a folder.
 * The open is non-blocking, so a FIFO cannot hang it, and the type comes
 * from fstat of the open descriptor; O_NONBLOCK is cleared before
 * returning.  `what` names the file in messages ("the journal").  Returns
 * the descriptor (O_CLOEXEC) or a negative SP_E* code with err naming it. */
int sp_open_append(const char *path, const char *what, sp_err_t *err);

/* Writes len bytes to fd (O_APPEND) and fsyncs it.  A write that fails
 * part-way is cut back off the file (when nobody else appended meanwhile),
 * so a reader never sees half a record.  0, or -1 with errno set. */
int sp_append_record(int fd, const void *data, size_t len);

/* Opens an input file read-only, refusing anything but a regular file: the
 * open is non-blocking (a FIFO cannot hang it), the type comes from fstat
 * of the open descriptor, and O_NONBLOCK is cleared before returning.
 * Returns the descriptor (O_CLOEXEC) or a negative SP_E* code with err
 * naming the file and the reason ("is a FIFO", "is a folder", ...). */
int sp_open_regular(const char *path, sp_err_t *err);

/* sp_open_regular() as a stdio stream ("rb"); NULL with err set. */
FILE *sp_fopen_regular(const char *path, sp_err_t *err);

/* For libraries that open files by name (CFITSIO): 0 when path is a
 * regular file that can be opened for reading, else as sp_open_regular(). */
int sp_check_regular(const char *path, sp_err_t *err);

#endif /* SP_FSUTIL_H */
