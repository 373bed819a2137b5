/* MRC micrographs (MRC2014 image format): header checks, reading as float32, writing mode 2. */
#ifndef SP_APPLE_MRC_H
#define SP_APPLE_MRC_H

/*
 * DESIGN: a micrograph is one 2-D section: nz must be 1 (a stack or a
 * volume is rejected with its nz in the message).  The header is the
 * MRC2014 one (1024 bytes), then NSYMBT bytes of extended header (skipped),
 * then nx * ny * nz items of the mode's type, x (columns) fastest.  Modes
 * read: 0 int8 (signed, as MRC2014 says), 1 int16, 2 float32, 6 uint16,
 * 12 float16 (IEEE binary16, as MRC2014 since 2018 and cryoSPARC write); all
 * become float32.  The byte order comes from MACHST (0x44 0x44/0x41:
 * little-endian, 0x11 0x11: big-endian, both read, swapped where needed);
 * a file with a blank MACHST (old writers) is taken as little-endian when
 * its mode reads sensibly so, else big-endian.  The file's size must be
 * exactly 1024 + NSYMBT + the data: a short file is "truncated", a longer
 * one has "extra data" (both usually a wrong header, not a file to guess
 * at).  Every message starts with the file's path.
 *
 * Layout in memory: float out[ny][nx], row y = the file's y index (row 0 is
 * the first row in the file), column x = the file's x index.  No flip.
 */

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define APPLE_MRC_HEADER 1024

typedef struct apple_mrc {
	int nx, ny, nz;          /* columns, rows, sections (always 1 after open) */
	int mode;                /* 0, 1, 2, 6 or 12 */
	int itemsize;            /* bytes per pixel in the file: 1, 2, 4 or 2 */
	int big_endian;          /* 1 if the file's data are big-endian */
	int32_t nsymbt;          /* extended header bytes, skipped */
	int64_t data_offset;     /* 1024 + nsymbt */
	double pixel_size;       /* Angstrom: cella.x / mx, 0 when unset */
} apple_mrc_t;

/* Reads and checks the header of `path` into hdr (see DESIGN).  Returns 0,
 * SP_ENOENT (no such file), SP_EIO (unreadable), SP_EFORMAT (short header,
 * unsupported mode, negative or zero sizes, NSYMBT beyond the file,
 * truncated or extra data) or SP_ESHAPE (nz > 1: a stack, not a
 * micrograph). */
int apple_mrc_open(const char *path, apple_mrc_t *hdr, sp_err_t *err);

/* Reads the ny * nx pixels of `path`, described by hdr (from
 * apple_mrc_open()), into out[ny][nx] as float32.  Returns 0, SP_EIO,
 * SP_EFORMAT (the file changed since it was opened) or SP_ENONFINITE (a
 * NaN or infinite float32 pixel: "non-finite pixel at (row, col)"). */
int apple_mrc_read_f32(const char *path, const apple_mrc_t *hdr, float *out, sp_err_t *err);

/* apple_mrc_open() + malloc + apple_mrc_read_f32(): on success *data is a
 * malloc'ed float[ny][nx] that the caller frees; on failure it is NULL.
 * Returns the codes of both, or SP_ENOMEM. */
int apple_mrc_load_f32(const char *path, apple_mrc_t *hdr, float **data, sp_err_t *err);

/* Writes data[ny][nx] as a little-endian mode-2 MRC2014 file (nz 1, no
 * extended header, cell = sizes x pixel_size Angstrom (pixel_size 0: cell
 * 0), DMIN/DMAX/DMEAN/RMS filled in, "MAP ", MACHST 0x44 0x44), atomically:
 * PATH.tmp.PID, fsync, rename; on failure nothing is left at either name.
 * The parent folder must exist.  Returns 0, SP_EINVAL (sizes < 1 or
 * pixel_size < 0 or not finite), SP_ENOMEM or SP_EIO. */
int apple_mrc_write_f32(const char *path, const float *data, int ny, int nx, double pixel_size,
			sp_err_t *err);

#endif /* SP_APPLE_MRC_H */
