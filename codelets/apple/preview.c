/* A PNG picture of a micrograph's picks (see preview.h). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <png.h>

#include "preview.h"

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

/* A 2-pixel-thick circle of radius r around (cx, cy), clipped. */
static void circle(uint8_t *rgb, int h, int w, double cx, double cy, double r)
{
	int x0 = (int)floor(cx - r - 2), x1 = (int)ceil(cx + r + 2);
	int y0 = (int)floor(cy - r - 2), y1 = (int)ceil(cy + r + 2);
	for (int y = y0 < 0 ? 0 : y0; y <= y1 && y < h; y++)
		for (int x = x0 < 0 ? 0 : x0; x <= x1 && x < w; x++) {
			double d = hypot(x + 0.5 - cx, y + 0.5 - cy);
			if (d >= r - 1.0 && d < r + 1.0) {
				uint8_t *p = rgb + 3 * ((size_t)y * w + x);
				p[0] = 0;
				p[1] = 255;
				p[2] = 0;
			}
		}
}

int apple_preview_render(const float *img, int ny, int nx, const int *xy, size_t n,
			 int particle_size, int max_side, uint8_t **rgb, int *h, int *w,
			 sp_err_t *err)
{
	*rgb = NULL;
	if (img == NULL || ny < 1 || nx < 1 || max_side < 16)
		return sp_seterr(err, SP_EINVAL, "preview: no pixels, or max_side %d < 16", max_side);
	int big = ny > nx ? ny : nx, f = (big + max_side - 1) / max_side;
	int hh = (ny + f - 1) / f, ww = (nx + f - 1) / f;
	size_t m = (size_t)hh * ww;
	float *bin = calloc(m, sizeof *bin), *sorted = malloc(m * sizeof *sorted);
	uint8_t *out = malloc(3 * m);
	if (bin == NULL || sorted == NULL || out == NULL) {
		free(bin);
		free(sorted);
		free(out);
		return sp_seterr(err, SP_ENOMEM, "preview: out of memory for %d x %d", hh, ww);
	}
	for (int y = 0; y < ny; y++)
		for (int x = 0; x < nx; x++)
			bin[(size_t)(y / f) * ww + x / f] += img[(size_t)y * nx + x];
	for (int by = 0; by < hh; by++)
		for (int bx = 0; bx < ww; bx++) {
			int cy = (by + 1) * f > ny ? ny - by * f : f;
			int cx = (bx + 1) * f > nx ? nx - bx * f : f;
			bin[(size_t)by * ww + bx] /= (float)(cy * cx);
		}
	memcpy(sorted, bin, m * sizeof *sorted);
	qsort(sorted, m, sizeof *sorted, cmp_float);
	double lo = sorted[(size_t)(0.01 * (double)(m - 1))];
	double hi = sorted[(size_t)(0.99 * (double)(m - 1))];
	double scale = hi > lo ? 255.0 / (hi - lo) : 0;
	for (size_t i = 0; i < m; i++) {
		double v = (bin[i] - lo) * scale;
		uint8_t g = v <= 0 ? 0 : v >= 255 ? 255 : (uint8_t)lround(v);
		out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = g;
	}
	double r = 0.5 * particle_size / f;
	if (r < 2)
		r = 2;
	for (size_t k = 0; k < n; k++)
		circle(out, hh, ww, (xy[2 * k] + 0.5) / f, (xy[2 * k + 1] + 0.5) / f, r);
	free(bin);
	free(sorted);
	*rgb = out;
	*h = hh;
	*w = ww;
	return 0;
}

/* libpng reports errors by longjmp; the message goes to err.  Its own
 * write function says only "Write Error": ours writes with write(2) and
 * keeps errno, so a full disk is named ("No space left on device"). */
struct png_err {
	jmp_buf jb;
	char msg[160];
	int fd;
	int errnum; /* errno of the failed write, or 0 */
};

static void on_png_write(png_structp png, png_bytep data, size_t len)
{
	struct png_err *e = png_get_io_ptr(png);
	while (len > 0) {
		ssize_t w = write(e->fd, data, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			e->errnum = w < 0 ? errno : ENOSPC;
			png_error(png, strerror(e->errnum));
		}
		data += w;
		len -= (size_t)w;
	}
}

static void on_png_flush(png_structp png)
{
	(void)png; /* nothing buffered: the output set's commit fsyncs */
}

static void on_png_error(png_structp png, png_const_charp msg)
{
	struct png_err *e = png_get_error_ptr(png);
	snprintf(e->msg, sizeof e->msg, "%s", msg);
	longjmp(e->jb, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg)
{
	(void)png;
	(void)msg;
}

int apple_preview_write_into(const char *tmp, const char *path, const float *img, int ny, int nx,
			     const int *xy, size_t n, int particle_size, int max_side,
			     sp_err_t *err)
{
	uint8_t *rgb = NULL;
	int h = 0, w = 0;
	int rc = apple_preview_render(img, ny, nx, xy, n, particle_size, max_side, &rgb, &h, &w,
				      err);
	if (rc != 0)
		return rc;
	/* O_CREAT as fopen("wb") did (a caller may pass a fresh name), never
	 * through a symlink */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
	if (fd < 0) {
		int e = errno;
		free(rgb);
		return sp_seterr(err, SP_EIO, "%s: cannot write the preview: %s", path, strerror(e));
	}
	/* volatile: read after a longjmp from libpng */
	struct png_err *volatile e = calloc(1, sizeof *e);
	png_structp png = e == NULL ? NULL :
		png_create_write_struct(PNG_LIBPNG_VER_STRING, e, on_png_error, on_png_warning);
	png_infop info = png == NULL ? NULL : png_create_info_struct(png);
	if (info == NULL) {
		png_destroy_write_struct(&png, NULL);
		close(fd);
		free(e);
		free(rgb);
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory for the preview", path);
	}
	e->fd = fd;
	if (setjmp(e->jb) != 0) {
		rc = sp_seterr(err, SP_EIO, "%s: cannot write the preview: %s", path, e->msg);
	} else {
		png_set_write_fn(png, e, on_png_write, on_png_flush);
		png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB,
			     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
		png_write_info(png, info);
		for (int y = 0; y < h; y++)
			png_write_row(png, rgb + 3 * (size_t)y * w);
		png_write_end(png, NULL);
	}
	png_destroy_write_struct(&png, &info);
	if (close(fd) != 0 && rc == 0)
		rc = sp_seterr(err, SP_EIO, "%s: cannot write the preview: %s", path, strerror(errno));
	free(e);
	free(rgb);
	return rc;
}
