/* Compares two DESI frame files field by field: the largest difference relative to each field's largest value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <fitsio.h>

/*
 * DESIGN.  Usage: desi-framediff A.fits B.fits [TOL].  For each of FLUX,
 * IVAR, CHI2PIX and RESOLUTION, reads both images as doubles and prints
 * max |a - b| / max |a|, the number of elements that differ at all, and
 * the element count.  MASK must be identical.  Exits 1 when a field's
 * relative difference exceeds TOL (default 1e-5: the GPU and CPU routes
 * differ by rounding amplified by iCov's conditioning, doc/desi.md), 2
 * when a file cannot be read or the shapes differ.  Used by bench/gpu to
 * check each GPU variant's frame against the CPU's in the same run.
 */

static double *read_field(const char *path, const char *hdu, long *nel, long dims[3], int *ndim)
{
	fitsfile *f = NULL;
	int st = 0, anynul = 0;
	double *v = NULL;
	*nel = 0;
	fits_open_file(&f, path, READONLY, &st);
	fits_movnam_hdu(f, IMAGE_HDU, (char *)hdu, 0, &st);
	fits_get_img_dim(f, ndim, &st);
	if (st == 0 && (*ndim < 1 || *ndim > 3))
		st = BAD_NAXIS;
	dims[0] = dims[1] = dims[2] = 1;
	fits_get_img_size(f, 3, dims, &st);
	if (st == 0) {
		*nel = dims[0] * dims[1] * dims[2];
		v = malloc((size_t)(*nel > 0 ? *nel : 1) * sizeof *v);
		if (v == NULL)
			st = MEMORY_ALLOCATION;
		else
			fits_read_img(f, TDOUBLE, 1, *nel, NULL, v, &anynul, &st);
	}
	if (st != 0) {
		char msg[FLEN_STATUS];
		fits_get_errstatus(st, msg);
		fprintf(stderr, "desi-framediff: %s: HDU %s: %s\n", path, hdu, msg);
		free(v);
		v = NULL;
	}
	int st2 = 0;
	if (f != NULL)
		fits_close_file(f, &st2);
	return v;
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: desi-framediff A.fits B.fits [TOL]\n");
		return 2;
	}
	const double tol = argc == 4 ? atof(argv[3]) : 1e-5;
	static const char *const fields[] = { "FLUX", "IVAR", "CHI2PIX", "RESOLUTION", "MASK" };
	int rc = 0;
	for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
		long na, nb, da[3], db[3];
		int ka, kb;
		double *a = read_field(argv[1], fields[k], &na, da, &ka);
		double *b = read_field(argv[2], fields[k], &nb, db, &kb);
		if (a == NULL || b == NULL || na != nb || ka != kb) {
			if (a != NULL && b != NULL)
				fprintf(stderr, "desi-framediff: %s: shapes differ\n", fields[k]);
			free(a);
			free(b);
			return 2;
		}
		double big = 0.0, worst = 0.0;
		long ndiff = 0;
		for (long i = 0; i < na; i++) {
			big = fmax(big, fabs(a[i]));
			const double d = fabs(a[i] - b[i]);
			if (a[i] != b[i] && !(isnan(a[i]) && isnan(b[i]))) {
				ndiff++;
				worst = fmax(worst, isnan(d) ? INFINITY : d);
			}
		}
		const double rel = big > 0.0 ? worst / big : worst;
		const int bad = k == 4 ? ndiff != 0 : !(rel <= tol);
		printf("%-10s max|a-b|/max|a| %.3g  differing %ld of %ld%s\n", fields[k], rel, ndiff, na,
		       bad ? "  ** over tolerance" : "");
		rc |= bad;
		free(a);
		free(b);
	}
	return rc;
}
