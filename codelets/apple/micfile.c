/* A micrograph file in any format APPLE reads (see micfile.h). */
#include "micfile.h"

#include <stdlib.h>
#include <string.h>

int apple_micfile_open(const char *path, apple_micfile_t *m, sp_err_t *err)
{
	int rc;

	memset(m, 0, sizeof *m);
	if (apple_tiff_is_tiff_name(path)) {
		m->format = APPLE_MICFILE_TIFF;
		rc = apple_tiff_open(path, &m->tiff, err);
		m->nx = m->tiff.nx;
		m->ny = m->tiff.ny;
	} else {
		m->format = APPLE_MICFILE_MRC;
		rc = apple_mrc_open(path, &m->mrc, err);
		m->nx = m->mrc.nx;
		m->ny = m->mrc.ny;
	}
	return rc;
}

int apple_micfile_read_f32(const char *path, const apple_micfile_t *m, float *out, sp_err_t *err)
{
	return m->format == APPLE_MICFILE_TIFF ? apple_tiff_read_f32(path, &m->tiff, out, err)
					       : apple_mrc_read_f32(path, &m->mrc, out, err);
}

int apple_micfile_load_f32(const char *path, apple_micfile_t *m, float **data, sp_err_t *err)
{
	*data = NULL;
	int rc = apple_micfile_open(path, m, err);
	if (rc != 0)
		return rc;
	float *d = malloc((size_t)m->ny * (size_t)m->nx * sizeof *d);
	if (d == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory for a %d x %d image", path, m->ny,
				 m->nx);
	rc = apple_micfile_read_f32(path, m, d, err);
	if (rc != 0) {
		free(d);
		return rc;
	}
	*data = d;
	return 0;
}
