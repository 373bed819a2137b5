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

/* Writes len bytes to path atomically: path.tmp.PID, fsync, rename; on
 * failure nothing is left at either name. */
int sp_write_file_atomic(const char *path, const void *data, size_t len, sp_err_t *err);

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
