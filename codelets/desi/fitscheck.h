/* The raw checks of fitscheck.c, for desi_fits_open() (fitskey.c) only. */
#ifndef SP_DESI_FITSCHECK_H
#define SP_DESI_FITSCHECK_H

#include <stdio.h>

#include <fitsio.h>

#include "error.h"

/* Every header of path (open as fp, size bytes) on its raw cards, before
 * CFITSIO reads it (the rules: fitscheck.c): 0, or a negative SP_E* code
 * and one line in err. */
int desi__fits_prescan(const char *path, FILE *fp, long long size, sp_err_t *err);

/* Every RICE-compressed tile of f's current HDU, a tile-compressed image
 * (hdu: its number, for messages), checked before CFITSIO decodes any:
 * 0, or a negative SP_E* code and one line in err. */
int desi__fits_check_rice(fitsfile *f, const char *path, int hdu, sp_err_t *err);

#endif
