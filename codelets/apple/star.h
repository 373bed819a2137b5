/* Particle coordinate files: RELION STAR (write and read) and EMAN BOX (write). */
#ifndef SP_APPLE_STAR_H
#define SP_APPLE_STAR_H

/*
 * DESIGN: coordinates are in pixels of the original micrograph, x = column,
 * y = row (RELION's convention), stored as pairs xy[2 k], xy[2 k + 1].  The
 * STAR file written is exactly APPLE's (ASPIRE's) layout:
 *
 *     data_root
 *     <blank>
 *     loop_
 *     _rlnCoordinateX #1
 *     _rlnCoordinateY #2
 *     1889 149
 *     ...
 *
 * The reader is tolerant, for truth files and other pickers' output: any
 * data block name ("data_", "data_root", several blocks: the first loop
 * with both labels is used), comments ('#' lines), labels with or without
 * "#N" (columns are located by label, extra columns ignored).  All files
 * are written atomically (PATH.tmp.PID, fsync, rename).
 */

#include <stddef.h>

#include "error.h"

/* Writes n integer picks xy[n][2] as a STAR file (layout above).  Returns
 * 0, SP_ENOMEM or SP_EIO. */
int apple_star_write(const char *path, const int *xy, size_t n, sp_err_t *err);

/* As apple_star_write() for fractional coordinates (truth files), each
 * printed with `decimals` digits after the point (0 .. 9; 0 gives integers
 * rounded half away from zero).  Returns 0, SP_EINVAL, SP_ENOMEM or
 * SP_EIO. */
int apple_star_write_f64(const char *path, const double *xy, size_t n, int decimals,
			 sp_err_t *err);

/* Writes n picks as an EMAN BOX file: one line per pick,
 * "x - box/2 TAB y - box/2 TAB box TAB box" (integer division: the box's
 * lower-left corner in EMAN's convention as APPLE writes it).  box >= 1.
 * Returns 0, SP_EINVAL, SP_ENOMEM or SP_EIO. */
int apple_box_write(const char *path, const int *xy, size_t n, int box, sp_err_t *err);

/* As apple_star_write() and apple_box_write(), into `tmp`, a temporary of
 * an output set (fsutil.h); `path` is its final name, for messages. */
int apple_star_write_into(const char *tmp, const char *path, const int *xy, size_t n,
			  sp_err_t *err);
int apple_box_write_into(const char *tmp, const char *path, const int *xy, size_t n, int box,
			 sp_err_t *err);

/* The layouts of apple_picks_write_into(). */
typedef enum {
	APPLE_STAR_ASPIRE,    /* apple_star_write()'s: ASPIRE's file, byte for byte */
	APPLE_STAR_RELION,    /* X, Y, _rlnAutopickFigureOfMerit (the pick's score) */
	APPLE_STAR_CRYOSPARC, /* _rlnMicrographName, X, Y, _rlnAutopickFigureOfMerit */
	APPLE_STAR_CSV        /* "x,y,score" header, one pick a line */
} apple_star_format_t;

/* Writes n picks xy[n][2] with their scores score[n] (apple_pick_scores();
 * unused for ASPIRE's layout) in `format` into `tmp`, a temporary of an
 * output set (NULL: `path` written atomically).  `mic` is the micrograph's
 * name for cryoSPARC's layout (a single STAR token: no blank, quote or
 * '#').  Scores are printed with 6 significant digits.  Returns 0,
 * SP_EINVAL (a name that is not a token), SP_ENONFINITE (a score),
 * SP_ENOMEM or SP_EIO. */
int apple_picks_write_into(const char *tmp, const char *path, apple_star_format_t format,
			   const char *mic, const int *xy, const double *score, size_t n,
			   sp_err_t *err);

/* Reads the _rlnCoordinateX/_rlnCoordinateY columns of `path`.  On success
 * *xy is a malloc'ed double[*n][2] (NULL when *n is 0) that the caller
 * frees.  Returns 0, SP_ENOENT, SP_EIO, SP_EFORMAT ("PATH:LINE: reason":
 * no loop with both labels, a short row, a value that is not a finite
 * number) or SP_ENOMEM. */
int apple_star_read(const char *path, double **xy, size_t *n, sp_err_t *err);

/* Check an existing output before --skip-existing keeps it: the file is
 * not empty and ends with a newline (every line the writers write does, so
 * a file cut mid-line fails), and its structure parses: for a STAR file, a
 * loop with _rlnCoordinateX and _rlnCoordinateY whose every row has its
 * columns (apple_star_read()); for a BOX file, lines of four integers.
 * Returns 0, or SP_EFORMAT (SP_EIO, SP_ENOENT) with err naming the file
 * and what is wrong. */
int apple_star_verify(const char *path, sp_err_t *err);
int apple_box_verify(const char *path, sp_err_t *err);

#endif /* SP_APPLE_STAR_H */
