/* libFuzzer target for the DESI FITS readers: the PSF reader and the image reader (headers, keywords, data, FIBERMAP). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../codelets/desi/frame_io.h"
#include "../../codelets/desi/psf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	static int fd = -1;
	sp_err_t err;
	desi_psf_t *psf = NULL;
	int ny, nx;

	/* The readers take a path: feed them through one in-memory file. */
	if (fd < 0) {
		fd = memfd_create("fuzz.fits", 0);
		if (fd < 0)
			abort();
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	}
	if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
		abort();
	if (desi_psf_read(path, &psf, &err) == 0) {
		/* Evaluate what was accepted: the parameters of two fibres at
		 * the ends of the range (and the spots of one), which must not
		 * read out of bounds. */
		double waves[2] = { psf->wmin, psf->wmax };
		int nf = psf->nfib < 2 ? psf->nfib : 2, np = desi_psf_nparams(psf);
		double *p = malloc((size_t)nf * 2 * (size_t)np * sizeof *p);
		size_t nspot = (size_t)(2 * psf->hsizex + 1) * (size_t)(2 * psf->hsizey + 1);
		double *spots = malloc(nspot * sizeof *spots);
		int32_t xc, yc;
		if (p != NULL && spots != NULL) {
			desi_psf_params(psf, 0, nf, waves, 2, p);
			desi_spots_cpu(p, 1, desi_psf_shape(psf), spots, &xc, &yc);
		}
		free(p);
		free(spots);
		desi_psf_free(&psf);
	}
	if (desi_image_size(path, &ny, &nx, &err) == 0 && (size_t)ny * (size_t)nx < (1u << 20)) {
		desi_image_t img = { .ny = ny, .nx = nx };
		size_t nbad;
		img.pix = malloc((size_t)ny * (size_t)nx * sizeof *img.pix);
		img.ivar = malloc((size_t)ny * (size_t)nx * sizeof *img.ivar);
		if (img.pix != NULL && img.ivar != NULL)
			desi_image_read(path, &img, &nbad, &err);
		free(img.pix);
		free(img.ivar);
	}
	return 0;
}
