/* A test-local reader of named FITS image HDUs (CFITSIO); include after cmocka.h and fitsio.h. */
#ifndef SP_FITSREAD_H
#define SP_FITSREAD_H

#include <stdint.h>
#include <stdlib.h>

/* The n values (TDOUBLE or TINT) of image HDU `name` of f; a missing HDU
 * or another count fails the test, with CFITSIO's message. */
static inline void *tfits_read_hdu(fitsfile *f, const char *name, size_t n, int type)
{
	int st = 0, anynul = 0;
	void *buf = malloc((n ? n : 1) * (type == TDOUBLE ? sizeof(double) : sizeof(int32_t)));

	assert_non_null(buf);
	if (fits_movnam_hdu(f, IMAGE_HDU, (char *)name, 0, &st) == 0) {
		long nax[4] = { 0 }, tot = 1;
		int naxis = 0;
		fits_get_img_dim(f, &naxis, &st);
		fits_get_img_size(f, 4, nax, &st);
		for (int i = 0; i < naxis; i++)
			tot *= nax[i];
		if (st == 0 && (size_t)tot != n) {
			print_message("# HDU %s has %ld values, expected %zu\n", name, tot, n);
			st = BAD_DIMEN;
		}
		fits_read_img(f, type, 1, (LONGLONG)n, NULL, buf, &anynul, &st);
	}
	if (st != 0) {
		char msg[FLEN_STATUS];
		fits_get_errstatus(st, msg);
		print_message("# HDU %s: %s\n", name, msg);
	}
	assert_int_equal(st, 0);
	return buf;
}

#endif /* SP_FITSREAD_H */
