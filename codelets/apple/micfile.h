/* A micrograph file in any format APPLE reads: MRC or TIFF, told apart by the file name. */
#ifndef SP_APPLE_MICFILE_H
#define SP_APPLE_MICFILE_H

/*
 * DESIGN: a name ending in .tif or .tiff (any case) is read as TIFF
 * (tiff.h), every other name as MRC (mrc.h), as RELION and cryoSPARC tell
 * them apart; the contents are not sniffed, so a TIFF named .mrc is refused
 * by the MRC reader with its reason.  Both readers fill the same float32
 * [ny][nx] array in the file's own row order (row 0 = the first stored
 * row): the same image stored either way gives the same picks.
 */

#include "error.h"
#include "mrc.h"
#include "tiff.h"

typedef enum apple_micfile_format {
	APPLE_MICFILE_MRC,
	APPLE_MICFILE_TIFF,
} apple_micfile_format_t;

typedef struct apple_micfile {
	int nx, ny;                    /* columns, rows */
	apple_micfile_format_t format; /* which of the two below is filled */
	apple_mrc_t mrc;
	apple_tiff_t tiff;
} apple_micfile_t;

/* apple_mrc_open() or apple_tiff_open() by path's name, into m; their
 * codes. */
int apple_micfile_open(const char *path, apple_micfile_t *m, sp_err_t *err);

/* apple_mrc_read_f32() or apple_tiff_read_f32() as m (from
 * apple_micfile_open()) says: out[ny][nx]; their codes. */
int apple_micfile_read_f32(const char *path, const apple_micfile_t *m, float *out, sp_err_t *err);

/* apple_micfile_open() + malloc + apple_micfile_read_f32(): on success
 * *data is a malloc'ed float[ny][nx] that the caller frees; on failure it
 * is NULL.  Returns the codes of both, or SP_ENOMEM. */
int apple_micfile_load_f32(const char *path, apple_micfile_t *m, float **data, sp_err_t *err);

#endif /* SP_APPLE_MICFILE_H */
