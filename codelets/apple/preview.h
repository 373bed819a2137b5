/* A PNG picture of a micrograph's picks (libpng), as ASPIRE's --create_jpg. */
#ifndef SP_APPLE_PREVIEW_H
#define SP_APPLE_PREVIEW_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/*
 * The micrograph img[ny][nx] binned by f = ceil(max(ny, nx) / max_side) (the
 * mean of each f x f block, partial blocks at the edges included), its
 * contrast stretched from the 1st to the 99th percentile of the binned
 * pixels to 0..255 (clipped), as grey; then a green circle (radius
 * particle_size / 2, binned, at least 2 pixels, 2 pixels thick) around each
 * of the n picks xy[2k] = x (column), xy[2k + 1] = y (row) of the
 * micrograph.  Row 0 of the PNG is row 0 of img (the MRC's first row).
 *
 * apple_preview_render() fills *rgb (malloc'ed [h][w][3], the caller frees)
 * and its size; apple_preview_write_into() writes it as an 8-bit RGB PNG to
 * tmp (a temporary of an output set; `path` is the final name, for
 * messages).  Both return 0, SP_EINVAL (no pixels, max_side < 16), SP_ENOMEM
 * or (writing) SP_EIO.
 */
int apple_preview_render(const float *img, int ny, int nx, const int *xy, size_t n,
			 int particle_size, int max_side, uint8_t **rgb, int *h, int *w,
			 sp_err_t *err);
int apple_preview_write_into(const char *tmp, const char *path, const float *img, int ny, int nx,
			     const int *xy, size_t n, int particle_size, int max_side,
			     sp_err_t *err);

#endif /* SP_APPLE_PREVIEW_H */
