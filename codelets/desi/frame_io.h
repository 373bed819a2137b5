/* DESI frame I/O: the pre-processed CCD image in, the extracted frame out (CFITSIO). */
#ifndef SP_DESI_FRAME_IO_H
#define SP_DESI_FRAME_IO_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* A pre-processed image: HDUs IMAGE (float32, electrons), IVAR (float32),
 * MASK (int16, any set bit except BADREADNOISE means "do not use"), found by
 * EXTNAME; optional FIBERMAP table. */
typedef struct desi_image {
	int ny, nx;          /* rows, columns */
	float *pix;          /* [ny][nx] */
	float *ivar;         /* [ny][nx], 0 where masked or non-finite */
	char camera[16];     /* CAMERA keyword, "" if absent */
	double rdnoise;      /* RDNOISE keyword, 0 if absent */
} desi_image_t;

/* Reads the image size first (cheap), so the caller can allocate pinned
 * buffers; then the data into them.  Masked pixels and non-finite values
 * get ivar = 0 (a NaN in IMAGE with ivar > 0 is not an error: the pixel is
 * masked and counted in *nbad).  Errors: "PATH: reason" (missing HDU,
 * shapes differ between HDUs, unreadable file). */
int desi_image_size(const char *path, int *ny, int *nx, sp_err_t *err);
int desi_image_read(const char *path, desi_image_t *img, size_t *nbad, sp_err_t *err);

/* The exposure's sky position and time for the barycentric correction,
 * with desispec's precedence (extract.py): RA from TARGTRA, SKYRA, TELRA or
 * RA; DEC from TARGTDEC, SKYDEC, TELDEC or DEC (degrees); the UTC MJD from
 * MJD-OBS or MJD; each looked for in the IMAGE HDU's header, then the
 * primary's.  A missing or malformed one: "PATH: reason". */
int desi_image_sky(const char *path, double *ra, double *dec, double *mjd, sp_err_t *err);

/* A separate fibermap file (desispec's -f/--fibermap): it must have a
 * FIBERMAP binary table, with the image's FIBERMAP checks (an integer FIBER
 * column of DESI fibres).  Errors: "PATH: reason". */
int desi_fibermap_check(const char *path, sp_err_t *err);

/* The output frame, desispec's layout.  stride lets flux, ivar,
 * resolution and chi2pix be rows of one larger array (the extraction's
 * [nspec][field][nwave] buffer, written without a copy): spectrum s's row
 * starts stride floats after spectrum s-1's; 0 means packed (nwave, and
 * (2 ndiag + 1) nwave for resolution). */
typedef struct desi_frame {
	int nspec, nwave, ndiag;    /* resolution has 2 ndiag + 1 rows */
	int specmin;
	size_t stride;              /* see above; 0: packed */
	const double *wave;         /* [nwave], Angstrom */
	const float *flux;          /* [nspec][nwave] electron/Angstrom */
	const float *ivar;          /* [nspec][nwave] */
	const uint32_t *mask;       /* [nspec][nwave], always packed */
	const float *resolution;    /* [nspec][2 ndiag + 1][nwave] */
	const float *chi2pix;       /* [nspec][nwave] */
	const char *in_psf, *in_img; /* recorded as IN_PSF, IN_IMG */
	const char *fibermap;       /* separate fibermap file (IN_FMAP); NULL or "": the image's */
	int scores;                 /* write the SCORES table (desi_frame_scores()) */
	double heliocor;            /* barycentric factor applied to wave (HELIOCOR); 0: none */
} desi_frame_t;

/* desispec's MASK bits (specmask) that extraction sets. */
#define DESI_SOMEBADPIX 0x1u  /* more than half of the bin's pixels masked or ivar 0 */
#define DESI_ALLBADPIX 0x2u   /* all of them */
#define DESI_BAD2DFIT 0x80u   /* bit 7: chi2pix > 100, the 2-D model does not fit */

/*
 * The SCORES table desispec's extraction appends (specscore.py,
 * compute_frame_scores(frame, suffix="RAW"), as its frames are written): the
 * band is b, r or z by the grid's mean wavelength (<= 5800: b, >= 7600: z),
 * its top hat [4000, 5800), [5800, 7600) or [7600, 9800) Angstrom; with
 * dwave = numpy.gradient(wave) and the bins in the top hat, per spectrum:
 *   sum[s]    SUM_RAW_COUNT_<B>    sum of flux
 *   count[s]  MEDIAN_RAW_COUNT_<B> median of flux / dwave
 *   snr[s]    MEDIAN_RAW_SNR_<B>   median of sqrt(max(ivar, 0)) flux / sqrt(dwave)
 * (desispec treats a frame's flux as counts per bin here although its BUNIT
 * is per Angstrom; we keep its numbers).  *band gets 'B', 'R' or 'Z'.
 * Returns 0, or -1 when the grid has fewer than 2 bins or none in the top
 * hat (desispec raises ValueError) or memory runs out.
 */
int desi_frame_scores(const desi_frame_t *fr, char *band, float *sum, double *count,
		      double *snr);

/* Writes FLUX (primary... see desispec: FLUX as the primary HDU with EXTNAME
 * FLUX), IVAR, MASK, WAVELENGTH, RESOLUTION, FIBERMAP (rows specmin ..
 * specmin+nspec-1 copied from fr->fibermap's FIBERMAP when it is given, which
 * must then have one, else from the image's when it has one), CHI2PIX, and
 * SCORES when fr->scores;
 * header keys NSPEC, WAVEMIN, WAVEMAX, WAVESTEP, IN_PSF, IN_IMG,
 * BUNIT='electron/Angstrom' and the image's primary header cards.  Written to
 * a temporary name in the same folder and renamed when complete; on failure
 * nothing is left. */
int desi_frame_write(const char *path, const desi_frame_t *fr, const char *image_path,
		     sp_err_t *err);

/* As desi_frame_write(), into `tmp`, a temporary of an output set
 * (src/io/fsutil.h) that the caller commits; `path` is the final name, for
 * messages. */
int desi_frame_write_into(const char *tmp, const char *path, const desi_frame_t *fr,
			  const char *image_path, sp_err_t *err);

/* The 2-D model image of a frame (desi.write model=true; desispec's
 * -m/--model): sum over the extracted spectra specmin .. specmin+nspec-1
 * and grid wavelengths wmin .. wmax of spot x deconvolved flux. */
typedef struct desi_model {
	int ny, nx;         /* the CCD image's shape */
	const float *pix;   /* [ny][nx], electrons */
	int specmin, nspec;
	double wmin, wmax;  /* the grid's first and last wavelengths (Angstrom) */
	const char *in_psf, *in_img; /* recorded as IN_PSF, IN_IMG */
} desi_model_t;

/* Writes the model as the primary HDU, float32 [ny][nx], EXTNAME 'MODEL'
 * (gpu_specter's name), BUNIT 'electron', the input image's IMAGE header
 * cards (as the frame's FLUX), then IN_IMG, IN_PSF, SPECMIN, SPECMAX,
 * WAVEMIN, WAVEMAX and CREATOR 'starpipe <version>', with a COMMENT giving
 * the definition; into `tmp`, a temporary of an output set (src/io/fsutil.h)
 * that the caller commits; `path` is the final name, for messages.  On
 * failure the temporary is removed. */
int desi_model_write_into(const char *tmp, const char *path, const desi_model_t *m,
			  const char *image_path, sp_err_t *err);

/* Checks an existing output (a frame or a model, as the writers above make
 * them) before --skip-existing keeps it: it opens as desi_fits_open()
 * opens inputs (which refuses a file shorter than its headers say), every
 * HDU has CHECKSUM and DATASUM and fits_verify_chksum() accepts both, and
 * a frame (primary EXTNAME 'FLUX') has IVAR, MASK, WAVELENGTH, RESOLUTION
 * and CHI2PIX.  Returns 0, or SP_EFORMAT with err naming the file, the HDU
 * and what is wrong. */
int desi_output_verify(const char *path, sp_err_t *err);

#endif /* SP_DESI_FRAME_IO_H */
