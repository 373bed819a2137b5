/* File-system helpers shared by every stage that writes: folders and atomic files. */
#ifndef SP_FSUTIL_H
#define SP_FSUTIL_H

#include <stddef.h>

#include "error.h"

/* mkdir -p path.  Returns 0 or SP_EIO with err naming the folder. */
int sp_mkdirs(const char *path, sp_err_t *err);

/* mkdir -p of the folder that will hold the file `path`. */
int sp_make_parent(const char *path, sp_err_t *err);

/* Writes len bytes to path atomically: path.tmp.PID, fsync, rename; on
 * failure nothing is left at either name. */
int sp_write_file_atomic(const char *path, const void *data, size_t len, sp_err_t *err);

#endif /* SP_FSUTIL_H */
