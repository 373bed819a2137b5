/* Unit tests of the APPLE micrograph and coordinate I/O: MRC reading and writing, TIFF reading, STAR and BOX files. */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <png.h>

#include "testutil.h"
#include "tiffwrite.h"
#include "rng.h"

#include "../codelets/apple/micfile.h"
#include "../codelets/apple/mrc.h"
#include "../codelets/apple/tiff.h"
#include "../codelets/apple/star.h"
#include "../codelets/apple/preview.h"

static int setup(void **state)
{
	(void)state;
	return tmpdir_make("test_apple_io");
}

static int teardown(void **state)
{
	(void)state;
	return tmpdir_remove();
}

static void put32(unsigned char *p, uint32_t u, int big)
{
	for (int k = 0; k < 4; k++)
		p[big ? 3 - k : k] = (unsigned char)(u >> (8 * k));
}

/* A minimal MRC file: header fields given, nsymbt bytes of extended
 * header, then ndata bytes of data (copied from data, or zeros). */
static void write_mrc(const char *path, int32_t nx, int32_t ny, int32_t nz, int32_t mode,
		      int32_t nsymbt, const void *data, size_t ndata, int big)
{
	size_t ext = nsymbt > 0 ? (size_t)nsymbt : 0;
	unsigned char *buf = calloc(1024 + ext + ndata + 1, 1);
	assert_non_null(buf);
	put32(buf + 0, (uint32_t)nx, big);
	put32(buf + 4, (uint32_t)ny, big);
	put32(buf + 8, (uint32_t)nz, big);
	put32(buf + 12, (uint32_t)mode, big);
	put32(buf + 92, (uint32_t)nsymbt, big);
	memcpy(buf + 208, "MAP ", 4);
	buf[212] = big ? 0x11 : 0x44;
	buf[213] = big ? 0x11 : 0x44;
	if (data != NULL)
		memcpy(buf + 1024 + ext, data, ndata);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, 1024 + ext + ndata, f), 1024 + ext + ndata);
	assert_int_equal(fclose(f), 0);
	free(buf);
}

/* Loads path, asserting success (the reader's message printed otherwise). */
static float *load_ok(const char *path, apple_mrc_t *h)
{
	sp_err_t err = { 0, "" };
	float *d = NULL;
	int rc = apple_mrc_load_f32(path, h, &d, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);
	assert_non_null(d);
	return d;
}

/* Asserts that opening and reading path (MRC or TIFF by its name, as
 * apple.read reads it) fails with code and a message that starts with the
 * path and contains phrase. */
static void expect_error(const char *path, int code, const char *phrase)
{
	apple_micfile_t h;
	sp_err_t err = { 0, "" };
	float *d = NULL;
	int rc = apple_micfile_load_f32(path, &h, &d, &err);
	if (rc != code || strstr(err.msg, path) != err.msg || strstr(err.msg, phrase) == NULL)
		print_message("# got %s (%d) \"%s\", expected %s and \"%s\"\n", sp_err_name(rc), rc,
			      err.msg, sp_err_name(code), phrase);
	assert_null(d);
	assert_int_equal(rc, code);
	assert_int_equal(err.code, code);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
	assert_non_null(strstr(err.msg, phrase));
}

static void test_shared_2k(void **state)
{
	(void)state;
	char path[600];
	shared_path(path, sizeof path, "data/apple/synth_2k_float32.mrc");
	apple_mrc_t h;
	float *d = load_ok(path, &h);
	assert_int_equal(h.nx, 2048);
	assert_int_equal(h.ny, 2048);
	assert_int_equal(h.nz, 1);
	assert_int_equal(h.mode, 2);
	assert_int_equal(h.big_endian, 0);
	assert_int_equal(h.data_offset, 1024 + h.nsymbt);
	/* Cross-check pixels with a direct read at offset + 4 (row nx + col). */
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	const int rows[] = { 0, 0, 1, 1000, 2047, 2047 }, cols[] = { 0, 1, 0, 37, 0, 2047 };
	for (int k = 0; k < 6; k++) {
		float v;
		long off = (long)h.data_offset + 4L * ((long)rows[k] * 2048 + cols[k]);
		assert_int_equal(fseek(f, off, SEEK_SET), 0);
		assert_int_equal(fread(&v, 4, 1, f), 1); /* little-endian host */
		assert_memory_equal(&v, &d[(size_t)rows[k] * 2048 + cols[k]], 4);
	}
	fclose(f);
	/* Not constant: a real image. */
	assert_true(d[0] != d[1] || d[1] != d[2048]);
	free(d);
}

static void test_round_trip_f32(void **state)
{
	(void)state;
	char path[600], tmp[700];
	tmp_path(path, sizeof path, "rt.mrc");
	const int ny = 37, nx = 53;
	float *x = malloc(sizeof(float) * ny * nx), *y;
	assert_non_null(x);
	for (int e = 0; e < ny * nx; e++)
		x[e] = (float)(sin(e * 0.37) * 1e3 + 1e-7 * e);
	x[5] = -0.0f;
	x[6] = 3.4e38f;
	x[7] = 1e-40f; /* subnormal */
	sp_err_t err = { 0, "" };
	assert_int_equal(apple_mrc_write_f32(path, x, ny, nx, 1.34, &err), 0);
	apple_mrc_t h;
	assert_int_equal(apple_mrc_load_f32(path, &h, &y, &err), 0);
	assert_int_equal(h.nx, nx);
	assert_int_equal(h.ny, ny);
	assert_int_equal(h.mode, 2);
	assert_int_equal(h.nsymbt, 0);
	assert_true(fabs(h.pixel_size - 1.34) < 1e-5);
	assert_memory_equal(x, y, sizeof(float) * ny * nx);
	free(y);
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	assert_int_not_equal(access(tmp, F_OK), 0);
	/* Header fields other readers use. */
	unsigned char hb[1024];
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fread(hb, 1, 1024, f), 1024);
	fclose(f);
	assert_memory_equal(hb + 208, "MAP ", 4);
	assert_int_equal(hb[212], 0x44);
	/* Bad arguments, and a NaN, are refused; nothing is written. */
	assert_int_equal(apple_mrc_write_f32(path, x, 0, nx, 1, &err), SP_EINVAL);
	x[100] = NAN;
	tmp_path(path, sizeof path, "nan_out.mrc");
	assert_int_equal(apple_mrc_write_f32(path, x, ny, nx, 1, &err), SP_ENONFINITE);
	assert_int_not_equal(access(path, F_OK), 0);
	free(x);
}

/* Modes 0, 1, 6 (and 2 big-endian) written here, read as float. */
static void test_integer_modes(void **state)
{
	(void)state;
	char path[600];
	tmp_path(path, sizeof path, "modes.mrc");
	const int ny = 3, nx = 4;
	int8_t i8[12];
	int16_t i16[12];
	uint16_t u16[12];
	unsigned char bef[48];
	for (int e = 0; e < 12; e++) {
		i8[e] = (int8_t)(e * 23 - 128);
		i16[e] = (int16_t)(e * 5000 - 32768);
		u16[e] = (uint16_t)(e * 5900);
		float v = (float)e * 1.5f - 3.0f;
		uint32_t u;
		memcpy(&u, &v, 4);
		put32(bef + 4 * e, u, 1);
	}
	struct {
		int mode, big;
		const void *data;
		size_t n;
	} c[] = { { 0, 0, i8, sizeof i8 }, { 1, 0, i16, sizeof i16 }, { 6, 0, u16, sizeof u16 },
		  { 2, 1, bef, sizeof bef } };
	for (int k = 0; k < 4; k++) {
		write_mrc(path, nx, ny, 1, c[k].mode, k == 1 ? 96 : 0, c[k].data, c[k].n, c[k].big);
		apple_mrc_t h;
		float *d = load_ok(path, &h);
		assert_int_equal(h.mode, c[k].mode);
		assert_int_equal(h.big_endian, c[k].big);
		for (int e = 0; e < 12; e++) {
			float want = c[k].mode == 0   ? (float)i8[e]
				     : c[k].mode == 1 ? (float)i16[e]
				     : c[k].mode == 6 ? (float)u16[e]
						      : (float)e * 1.5f - 3.0f;
			assert_true(d[e] == want);
		}
		free(d);
	}
}

/* Mode 12 (float16): every finite binary16 value, both byte orders, against
 * the compiler's own conversion (_Float16); an infinity or a NaN is a
 * non-finite pixel, named. */
static void test_float16(void **state)
{
	(void)state;
	char path[600];
	tmp_path(path, sizeof path, "half.mrc");
	const int nx = 256, ny = 248; /* the 63488 patterns whose exponent is not 31 */
	uint16_t *h16 = malloc(sizeof(uint16_t) * (size_t)nx * ny);
	unsigned char *be = malloc(2 * (size_t)nx * ny);
	assert_non_null(h16);
	assert_non_null(be);
	int n = 0;
	for (uint32_t u = 0; u < 65536; u++)
		if (((u >> 10) & 31) != 31)
			h16[n++] = (uint16_t)u;
	assert_int_equal(n, nx * ny);
	for (int e = 0; e < n; e++) {
		be[2 * e] = (unsigned char)(h16[e] >> 8);
		be[2 * e + 1] = (unsigned char)h16[e];
	}
	for (int big = 0; big <= 1; big++) {
		write_mrc(path, nx, ny, 1, 12, 0, big ? (const void *)be : h16, 2 * (size_t)n, big);
		apple_mrc_t h;
		float *d = load_ok(path, &h);
		assert_int_equal(h.mode, 12);
		int bad = 0;
		for (int e = 0; e < n; e++) {
			_Float16 x;
			memcpy(&x, &h16[e], sizeof x);
			float want = (float)x;
			bad += memcmp(&d[e], &want, sizeof want) != 0; /* bit for bit: signed zeros too */
		}
		assert_int_equal(bad, 0);
		free(d);
	}
	uint16_t inf[6] = { 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x7c00, 0x3c00 }; /* 1, ..., +inf */
	write_mrc(path, 3, 2, 1, 12, 0, inf, sizeof inf, 0);
	expect_error(path, SP_ENONFINITE, "non-finite pixel at (row 1, col 1): inf");
	free(h16);
	free(be);
}

static void test_corrupt(void **state)
{
	(void)state;
	char path[600];
	float px[6] = { 1, 2, 3, 4, 5, 6 };

	tmp_path(path, sizeof path, "nonexistent.mrc");
	expect_error(path, SP_ENOENT, "no such file");
	/* Non-regular inputs are refused at once: a FIFO must not block the
	 * reader (nobody ever writes to this one), a device is not read. */
	tmp_path(path, sizeof path, "fifo.mrc");
	assert_int_equal(mkfifo(path, 0600), 0);
	expect_error(path, SP_EFORMAT, "is a FIFO");
	expect_error("/dev/zero", SP_EFORMAT, "is a character device");

	tmp_path(path, sizeof path, "badmode.mrc");
	write_mrc(path, 3, 2, 1, 4, 0, px, sizeof px, 0);
	expect_error(path, SP_EFORMAT, "unsupported MRC mode 4");

	tmp_path(path, sizeof path, "trunc.mrc");
	write_mrc(path, 3, 2, 1, 2, 0, px, 20, 0);
	expect_error(path, SP_EFORMAT, "truncated: expected 24 data bytes, found 20");

	tmp_path(path, sizeof path, "extra.mrc");
	write_mrc(path, 3, 2, 1, 2, 0, px, 24, 0);
	{
		FILE *f = fopen(path, "ab");
		assert_non_null(f);
		fputc(0, f);
		fclose(f);
	}
	expect_error(path, SP_EFORMAT, "extra data: expected 24 data bytes, found 25");

	tmp_path(path, sizeof path, "stack.mrc");
	write_mrc(path, 3, 1, 2, 2, 0, px, sizeof px, 0);
	expect_error(path, SP_ESHAPE, "not a micrograph");

	tmp_path(path, sizeof path, "header_only.mrc");
	write_mrc(path, 3, 2, 1, 2, 0, NULL, 0, 0);
	expect_error(path, SP_EFORMAT, "truncated: expected 24 data bytes, found 0");

	tmp_path(path, sizeof path, "short_header.mrc");
	{
		FILE *f = fopen(path, "wb");
		assert_non_null(f);
		fwrite(px, 1, 20, f);
		fclose(f);
	}
	expect_error(path, SP_EFORMAT, "truncated header");

	tmp_path(path, sizeof path, "nan.mrc");
	float bad[6] = { 1, 2, 3, 4, NAN, 6 };
	write_mrc(path, 3, 2, 1, 2, 0, bad, sizeof bad, 0);
	expect_error(path, SP_ENONFINITE, "non-finite pixel at (row 1, col 1)");
	bad[4] = INFINITY;
	write_mrc(path, 3, 2, 1, 2, 0, bad, sizeof bad, 0);
	expect_error(path, SP_ENONFINITE, "non-finite pixel at (row 1, col 1)");

	/* Larger than one read (1 MiB: 375 rows of 700 floats): the
	 * host-order file is read straight into the output, the other order
	 * through the conversion; the values, and the place of a non-finite
	 * pixel in a later read and a later block of the scan, come out the
	 * same in both. */
	{
		enum { W = 700, H = 600 };
		float *big = malloc(sizeof *big * W * H);
		unsigned char *be = malloc(sizeof *big * W * H);
		assert_non_null(big);
		assert_non_null(be);
		for (size_t i = 0; i < (size_t)W * H; i++)
			big[i] = (float)i * 0.5f - 1000.0f;
		tmp_path(path, sizeof path, "big_order.mrc");
		for (int order = 0; order < 2; order++) {
			apple_mrc_t h;
			const void *data = big;
			if (order == 1) { /* big-endian bytes of the same floats */
				for (size_t i = 0; i < (size_t)W * H; i++) {
					uint32_t u;
					memcpy(&u, &big[i], sizeof u);
					put32(be + 4 * i, u, 1);
				}
				data = be;
			}
			write_mrc(path, W, H, 1, 2, 0, data, sizeof *big * W * H, order);
			float *d = load_ok(path, &h);
			assert_int_equal(h.big_endian, order);
			assert_memory_equal(d, big, sizeof *big * W * H);
			free(d);
		}
		big[(size_t)590 * W + 17] = NAN;
		write_mrc(path, W, H, 1, 2, 0, big, sizeof *big * W * H, 0);
		expect_error(path, SP_ENONFINITE, "non-finite pixel at (row 590, col 17)");
		big[(size_t)590 * W + 17] = 1.0f;
		big[(size_t)401 * W + 699] = -INFINITY;
		for (size_t i = 0; i < (size_t)W * H; i++) {
			uint32_t u;
			memcpy(&u, &big[i], sizeof u);
			put32(be + 4 * i, u, 1);
		}
		write_mrc(path, W, H, 1, 2, 0, be, sizeof *big * W * H, 1);
		expect_error(path, SP_ENONFINITE, "non-finite pixel at (row 401, col 699): -inf");
		free(big);
		free(be);
	}

	tmp_path(path, sizeof path, "negative.mrc");
	write_mrc(path, -3, 2, 1, 2, 0, px, sizeof px, 0);
	expect_error(path, SP_EFORMAT, "bad image size nx -3");
	write_mrc(path, 3, 0, 1, 2, 0, px, sizeof px, 0);
	expect_error(path, SP_EFORMAT, "bad image size");

	tmp_path(path, sizeof path, "nsymbt.mrc");
	write_mrc(path, 3, 2, 1, 2, 0, px, sizeof px, 0);
	{
		FILE *f = fopen(path, "r+b");
		unsigned char w[4];
		assert_non_null(f);
		put32(w, 100000, 0);
		fseek(f, 92, SEEK_SET);
		fwrite(w, 1, 4, f);
		fclose(f);
	}
	expect_error(path, SP_EFORMAT, "NSYMBT 100000 goes beyond the end");
	write_mrc(path, 3, 2, 1, 2, -8, px, sizeof px, 0);
	expect_error(path, SP_EFORMAT, "negative extended header");

	tmp_path(path, sizeof path, "huge.mrc");
	write_mrc(path, 2000000000, 2000000000, 1, 2, 0, px, sizeof px, 0);
	expect_error(path, SP_EFORMAT, "is too large");
	write_mrc(path, 100000, 100000, 1, 2, 0, px, sizeof px, 0);
	expect_error(path, SP_EFORMAT, "truncated: expected 40000000000 data bytes, found 24");
}

static void read_ref(double **xy, size_t *n)
{
	char path[600];
	sp_err_t err = { 0, "" };
	shared_path(path, sizeof path, "data/apple/ref_2k_applepick.star");
	int rc = apple_star_read(path, xy, n, &err);
	if (rc != 0)
		print_message("# %s\n", err.msg);
	assert_int_equal(rc, 0);
}

/* Writing the reference's 101 picks reproduces its file byte for byte. */
static void test_star_reference_bytes(void **state)
{
	(void)state;
	double *xy;
	size_t n;
	read_ref(&xy, &n);
	assert_int_equal(n, 101);
	int *ixy = malloc(2 * n * sizeof *ixy);
	assert_non_null(ixy);
	for (size_t k = 0; k < 2 * n; k++)
		ixy[k] = (int)xy[k];
	assert_true(xy[0] == 1889 && xy[1] == 149);
	char out[600], ref[600];
	sp_err_t err = { 0, "" };
	tmp_path(out, sizeof out, "picks.star");
	assert_int_equal(apple_star_write(out, ixy, n, &err), 0);
	shared_path(ref, sizeof ref, "data/apple/ref_2k_applepick.star");
	FILE *a = fopen(ref, "rb"), *b = fopen(out, "rb");
	assert_non_null(a);
	assert_non_null(b);
	int ca, cb;
	long pos = 0;
	do {
		ca = getc(a);
		cb = getc(b);
		if (ca != cb)
			print_message("# differ at byte %ld\n", pos);
		assert_int_equal(ca, cb);
		pos++;
	} while (ca != EOF);
	fclose(a);
	fclose(b);
	/* Round trip. */
	double *back;
	size_t m;
	assert_int_equal(apple_star_read(out, &back, &m, &err), 0);
	assert_int_equal(m, n);
	assert_memory_equal(back, xy, 2 * n * sizeof *xy);
	free(back);
	free(xy);
	free(ixy);
}

static void write_text(const char *path, const char *s)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(s, f);
	fclose(f);
}

static void test_star_read_tolerant(void **state)
{
	(void)state;
	char path[600];
	sp_err_t err = { 0, "" };
	double *xy;
	size_t n;

	/* The shared truth: "data_", a third column. */
	shared_path(path, sizeof path, "data/apple/synth_2k_float32_truth.star");
	assert_int_equal(apple_star_read(path, &xy, &n, &err), 0);
	assert_int_equal(n, 137);
	assert_true(fabs(xy[0] - 1950.04) < 1e-9 && fabs(xy[1] - 1532.43) < 1e-9);
	free(xy);

	/* Optics block first, comments, columns in another order. */
	tmp_path(path, sizeof path, "relion31.star");
	write_text(path, "# RELION 3.1\ndata_optics\n\nloop_\n_rlnOpticsGroup #1\n1\n\n"
			 "data_particles\n\nloop_\n_rlnAnglePsi #1\n_rlnCoordinateY #2\n"
			 "# a comment\n_rlnCoordinateX #3\n0.5 10 20\n  1.5\t11 21  \n\n");
	assert_int_equal(apple_star_read(path, &xy, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_true(xy[0] == 20 && xy[1] == 10 && xy[2] == 21 && xy[3] == 11);
	free(xy);

	/* Empty loop: no picks. */
	tmp_path(path, sizeof path, "empty.star");
	write_text(path, "data_root\n\nloop_\n_rlnCoordinateX #1\n_rlnCoordinateY #2\n");
	assert_int_equal(apple_star_read(path, &xy, &n, &err), 0);
	assert_int_equal(n, 0);
	assert_null(xy);

	/* Errors. */
	tmp_path(path, sizeof path, "nolabels.star");
	write_text(path, "data_root\nloop_\n_rlnAngleRot #1\n1\n");
	assert_int_equal(apple_star_read(path, &xy, &n, &err), SP_EFORMAT);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
	assert_non_null(strstr(err.msg, "no loop_"));
	tmp_path(path, sizeof path, "short.star");
	write_text(path, "data_root\nloop_\n_rlnCoordinateX #1\n_rlnCoordinateY #2\n1 2\n3\n");
	assert_int_equal(apple_star_read(path, &xy, &n, &err), SP_EFORMAT);
	assert_non_null(strstr(err.msg, "short.star:6: expected 2 columns, found 1"));
	tmp_path(path, sizeof path, "nan.star");
	write_text(path, "data_root\nloop_\n_rlnCoordinateX #1\n_rlnCoordinateY #2\n1 abc\n");
	assert_int_equal(apple_star_read(path, &xy, &n, &err), SP_EFORMAT);
	assert_non_null(strstr(err.msg, "nan.star:5: 'abc' is not a finite number"));
	tmp_path(path, sizeof path, "none.star");
	assert_int_equal(apple_star_read(path, &xy, &n, &err), SP_ENOENT);
	assert_ptr_equal(strstr(err.msg, path), err.msg);
}

/* ---- TIFF (codelets/apple/tiff.c) ---- */

enum { TNY = 37, TNX = 53 }; /* rows, columns: not square, not a multiple of a tile or strip */

/* A random TNY x TNX image of bits-bit samples of format fmt (host byte
 * order), and in want the float32 values the reader must return for it.
 * The first pixels are the type's extremes (floats: -0, the smallest
 * subnormal, the largest finite value). */
static void *random_image(sp_rng_t *r, int bits, int fmt, float *want)
{
	const size_t n = (size_t)TNY * TNX, bps = (size_t)bits / 8;
	unsigned char *p = malloc(n * bps);
	assert_non_null(p);
	for (size_t e = 0; e < n; e++) {
		uint64_t u = sp_rng_next(r);
		if (bits == 8 && fmt == SAMPLEFORMAT_UINT) {
			p[e] = e == 0 ? 0 : e == 1 ? 255 : (uint8_t)u;
			want[e] = (float)p[e];
		} else if (bits == 8) {
			int8_t v = e == 0 ? INT8_MIN : e == 1 ? INT8_MAX : (int8_t)(uint8_t)u;
			memcpy(p + e, &v, 1);
			want[e] = (float)v;
		} else if (bits == 16 && fmt == SAMPLEFORMAT_UINT) {
			uint16_t v = e == 0 ? 0 : e == 1 ? UINT16_MAX : (uint16_t)u;
			memcpy(p + 2 * e, &v, 2);
			want[e] = (float)v;
		} else if (bits == 16) {
			int16_t v = e == 0 ? INT16_MIN : e == 1 ? INT16_MAX : (int16_t)(uint16_t)u;
			memcpy(p + 2 * e, &v, 2);
			want[e] = (float)v;
		} else {
			uint32_t b = e == 0 ? 0x80000000u : e == 1 ? 1u : e == 2 ? 0x7f7fffffu : (uint32_t)u;
			if (((b >> 23) & 0xff) == 0xff)
				b ^= 1u << 30; /* no NaN or infinity */
			memcpy(p + 4 * e, &b, 4);
			memcpy(&want[e], &b, 4);
		}
	}
	return p;
}

/* Every pixel type read (8/16-bit unsigned and signed, 32-bit float) in
 * strips and tiles, uncompressed and LZW (with and without a predictor),
 * either byte order, classic and BigTIFF: the reader returns the written
 * values bit for bit, and its header says what the file is. */
static void test_tiff_formats(void **state)
{
	(void)state;
	static const struct {
		int bits, fmt;
	} types[] = { { 8, SAMPLEFORMAT_UINT }, { 16, SAMPLEFORMAT_UINT }, { 32, SAMPLEFORMAT_IEEEFP },
		      { 8, SAMPLEFORMAT_INT }, { 16, SAMPLEFORMAT_INT } };
	static const struct {
		int comp, pred, rps, tile, big, bigtiff;
		const char *name;
	} lay[] = {
		{ COMPRESSION_NONE, 0, 0, 0, 0, 0, "uncompressed, one strip" },
		{ COMPRESSION_NONE, 0, 5, 0, 1, 0, "uncompressed, strips of 5 rows, big-endian" },
		{ COMPRESSION_LZW, 0, 0, 0, 0, 0, "LZW, one strip" },
		{ COMPRESSION_LZW, 0, 4, 0, 0, 0, "LZW, strips of 4 rows" },
		{ COMPRESSION_LZW, 1, 7, 0, 1, 0, "LZW with predictor, strips of 7 rows, big-endian" },
		{ COMPRESSION_LZW, 0, 0, 16, 0, 0, "LZW, 16 x 16 tiles" },
		{ COMPRESSION_NONE, 0, 0, 32, 1, 0, "uncompressed, 32 x 32 tiles, big-endian" },
		{ COMPRESSION_LZW, 0, 6, 0, 0, 1, "LZW, strips of 6 rows, BigTIFF" },
	};
	char path[600];
	sp_rng_t r;
	sp_rng_seed(&r, 13, 4);
	float *want = malloc(sizeof(float) * TNY * TNX);
	assert_non_null(want);
	tmp_path(path, sizeof path, "fmt.tif");
	for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
		for (size_t l = 0; l < sizeof lay / sizeof lay[0]; l++) {
			void *img = random_image(&r, types[t].bits, types[t].fmt, want);
			tiffw_opts_t o = tiffw_defaults();
			o.bits = types[t].bits;
			o.sample_format = types[t].fmt;
			o.compression = lay[l].comp;
			o.predictor = !lay[l].pred ? 0
				      : types[t].fmt == SAMPLEFORMAT_IEEEFP ? PREDICTOR_FLOATINGPOINT
									   : PREDICTOR_HORIZONTAL;
			o.rows_per_strip = lay[l].rps;
			o.tile = lay[l].tile;
			o.bigtiff = lay[l].bigtiff;
			/* libtiff 4.5.0 writes big-endian files with the floating-point
			 * predictor wrongly (its bytes swapped before the predictor;
			 * checked against Tech Note 3 by hand): not a file to test with */
			o.big_endian = lay[l].big && o.predictor != PREDICTOR_FLOATINGPOINT;
			assert_int_equal(tiffw_write(path, img, TNY, TNX, &o), 0);
			free(img);
			apple_micfile_t m;
			sp_err_t err = { 0, "" };
			float *d = NULL;
			int rc = apple_micfile_load_f32(path, &m, &d, &err);
			const apple_tiff_t h = m.tiff;
			size_t bad = 0, first = 0;
			for (size_t e = TNY * TNX; rc == 0 && e-- > 0;)
				if (memcmp(&d[e], &want[e], sizeof(float)) != 0) {
					bad++;
					first = e;
				}
			if (rc != 0 || bad != 0)
				print_message("# %d-bit format %d, %s: %s; %zu pixels differ (first %zu)\n",
					      types[t].bits, types[t].fmt, lay[l].name, err.msg, bad, first);
			assert_int_equal(rc, 0);
			assert_int_equal(bad, 0);
			assert_int_equal(h.nx, TNX);
			assert_int_equal(h.ny, TNY);
			assert_int_equal(h.bits, types[t].bits);
			assert_int_equal(h.sample_format, types[t].fmt);
			assert_int_equal(h.compression, lay[l].comp);
			assert_int_equal(h.tiled, lay[l].tile > 0);
			if (lay[l].tile > 0) {
				assert_int_equal(h.tile_w, lay[l].tile);
				assert_int_equal(h.tile_h, lay[l].tile);
			} else {
				assert_int_equal(h.rows_per_strip, lay[l].rps > 0 ? lay[l].rps : TNY);
			}
			free(d);
		}
	free(want);
}

/* The orientation choice: an MRC file and a TIFF holding the same rows in
 * the same order load, through apple.read's dispatch, as the same array,
 * row 0 first (the first row in either file; STAR y = row).  The format
 * follows the name: .tif/.tiff in any case is TIFF, anything else MRC. */
static void test_tiff_same_as_mrc(void **state)
{
	(void)state;
	char mrc[600], tif[600], upper[600];
	sp_rng_t r;
	sp_rng_seed(&r, 13, 5);
	float *img = malloc(sizeof(float) * TNY * TNX);
	assert_non_null(img);
	for (int e = 0; e < TNY * TNX; e++)
		img[e] = (float)sp_rng_gaussian(&r) + (e < TNX ? 100.0f : 0.0f); /* a bright top row */
	sp_err_t err = { 0, "" };
	tmp_path(mrc, sizeof mrc, "same.mrc");
	tmp_path(tif, sizeof tif, "same.tif");
	tmp_path(upper, sizeof upper, "SAME.TIFF");
	assert_int_equal(apple_mrc_write_f32(mrc, img, TNY, TNX, 1.0, &err), 0);
	tiffw_opts_t o = tiffw_defaults();
	o.compression = COMPRESSION_LZW;
	o.rows_per_strip = 8;
	assert_int_equal(tiffw_write(tif, img, TNY, TNX, &o), 0);
	assert_int_equal(tiffw_write(upper, img, TNY, TNX, &o), 0);
	apple_micfile_t hm, ht, hu;
	float *dm, *dt, *du;
	assert_int_equal(apple_micfile_load_f32(mrc, &hm, &dm, &err), 0);
	assert_int_equal(apple_micfile_load_f32(tif, &ht, &dt, &err), 0);
	assert_int_equal(apple_micfile_load_f32(upper, &hu, &du, &err), 0);
	assert_int_equal(hm.format, APPLE_MICFILE_MRC);
	assert_int_equal(ht.format, APPLE_MICFILE_TIFF);
	assert_int_equal(hu.format, APPLE_MICFILE_TIFF);
	assert_int_equal(ht.nx, TNX);
	assert_int_equal(ht.ny, TNY);
	assert_int_equal(hm.nx, TNX);
	assert_int_equal(hm.ny, TNY);
	assert_memory_equal(dm, img, sizeof(float) * TNY * TNX);
	assert_memory_equal(dt, img, sizeof(float) * TNY * TNX);
	assert_memory_equal(du, img, sizeof(float) * TNY * TNX);
	assert_true(dt[0] > 50.0f && dt[(size_t)(TNY - 1) * TNX] < 50.0f); /* not flipped */
	free(dm);
	free(dt);
	free(du);
	free(img);
	/* Names. */
	assert_true(apple_tiff_is_tiff_name("a.tif") && apple_tiff_is_tiff_name("d/a.TIFF") &&
		    apple_tiff_is_tiff_name("a.Tif") && apple_tiff_is_tiff_name("x.mrc.tiff"));
	assert_false(apple_tiff_is_tiff_name("a.mrc") || apple_tiff_is_tiff_name("a.tiff.bak") ||
		     apple_tiff_is_tiff_name("d.tif/a") || apple_tiff_is_tiff_name("tif") ||
		     apple_tiff_is_tiff_name("a.tifff"));
	/* A TIFF named .mrc goes to the MRC reader, which refuses it. */
	char misnamed[600];
	tmp_path(misnamed, sizeof misnamed, "really_a_tiff.mrc");
	assert_int_equal(rename(upper, misnamed), 0);
	expect_error(misnamed, SP_EFORMAT, "MRC");
}

/* Reads (set == NULL) or sets element k of the SHORT or LONG array of tag
 * in the first directory of a classic little-endian TIFF; returns the
 * element's value before. */
static uint32_t ifd_entry(const char *path, int tag, uint32_t k, const uint32_t *set)
{
	FILE *f = fopen(path, "r+b");
	unsigned char b[12];
	assert_non_null(f);
	assert_int_equal(fread(b, 1, 8, f), 8);
	assert_true(b[0] == 'I' && b[1] == 'I' && b[2] == 42);
	long ifd = (long)(b[4] | b[5] << 8 | b[6] << 16 | (uint32_t)b[7] << 24);
	assert_int_equal(fseek(f, ifd, SEEK_SET), 0);
	assert_int_equal(fread(b, 1, 2, f), 2);
	int n = b[0] | b[1] << 8;
	for (int i = 0; i < n; i++) {
		long at = ifd + 2 + 12L * i;
		assert_int_equal(fseek(f, at, SEEK_SET), 0);
		assert_int_equal(fread(b, 1, 12, f), 12);
		if ((b[0] | b[1] << 8) != tag)
			continue;
		int type = b[2] | b[3] << 8, size = type == 3 ? 2 : 4;
		uint32_t cnt = b[4] | b[5] << 8 | b[6] << 16 | (uint32_t)b[7] << 24;
		assert_true(type == 3 || type == 4);
		assert_true(k < cnt);
		long pos = cnt * size <= 4 ? at + 8 + (long)k * size
				      : (long)(b[8] | b[9] << 8 | b[10] << 16 | (uint32_t)b[11] << 24) +
						(long)k * size;
		unsigned char v[4] = { 0 };
		assert_int_equal(fseek(f, pos, SEEK_SET), 0);
		assert_int_equal(fread(v, 1, (size_t)size, f), (size_t)size);
		uint32_t old = v[0] | v[1] << 8 | (size == 4 ? v[2] << 16 | (uint32_t)v[3] << 24 : 0);
		if (set != NULL) {
			for (int j = 0; j < size; j++)
				v[j] = (unsigned char)(*set >> (8 * j));
			assert_int_equal(fseek(f, pos, SEEK_SET), 0);
			assert_int_equal(fwrite(v, 1, (size_t)size, f), (size_t)size);
		}
		assert_int_equal(fclose(f), 0);
		return old;
	}
	fail_msg("tag %d not in %s", tag, path);
	return 0;
}

/* Renames tag `from` of the first directory of a classic little-endian
 * TIFF to `to` (which must keep the tags in ascending order). */
static void ifd_retag(const char *path, int from, int to)
{
	FILE *f = fopen(path, "r+b");
	unsigned char b[8];
	assert_non_null(f);
	assert_int_equal(fread(b, 1, 8, f), 8);
	long ifd = (long)(b[4] | b[5] << 8 | b[6] << 16 | (uint32_t)b[7] << 24);
	assert_int_equal(fseek(f, ifd, SEEK_SET), 0);
	assert_int_equal(fread(b, 1, 2, f), 2);
	int n = b[0] | b[1] << 8, done = 0;
	for (int i = 0; i < n && !done; i++) {
		assert_int_equal(fseek(f, ifd + 2 + 12L * i, SEEK_SET), 0);
		assert_int_equal(fread(b, 1, 2, f), 2);
		if ((b[0] | b[1] << 8) == from) {
			b[0] = (unsigned char)to;
			b[1] = (unsigned char)(to >> 8);
			assert_int_equal(fseek(f, ifd + 2 + 12L * i, SEEK_SET), 0);
			assert_int_equal(fwrite(b, 1, 2, f), 2);
			done = 1;
		}
	}
	assert_int_equal(fclose(f), 0);
	assert_true(done);
}

/* A float32 TNY x TNX TIFF, strips of rps rows, compressed as comp. */
static void write_tif(const char *path, int comp, int rps)
{
	float img[TNY * TNX];
	for (int e = 0; e < TNY * TNX; e++)
		img[e] = (float)sin(e * 0.1);
	tiffw_opts_t o = tiffw_defaults();
	o.compression = comp;
	o.rows_per_strip = rps;
	assert_int_equal(tiffw_write(path, img, TNY, TNX, &o), 0);
}

/* Strip k of path ends early: its byte count halved; an uncompressed one
 * is also moved to the end of the file (libtiff reads an uncompressed
 * strip whole whatever its count says, so it must run out of file). */
static void short_strip(const char *path, uint32_t k, int uncompressed)
{
	uint32_t half = ifd_entry(path, TIFFTAG_STRIPBYTECOUNTS, k, NULL) / 2;
	ifd_entry(path, TIFFTAG_STRIPBYTECOUNTS, k, &half);
	if (uncompressed) {
		struct stat st;
		assert_int_equal(stat(path, &st), 0);
		uint32_t at = (uint32_t)st.st_size - half;
		ifd_entry(path, TIFFTAG_STRIPOFFSETS, k, &at);
	}
}

/* Every file libtiff can write that is not a micrograph, and broken files:
 * one error each, starting with the path, with the reason; libtiff itself
 * prints nothing (its errors go into ours, its warnings are dropped). */
static void test_tiff_corrupt(void **state)
{
	(void)state;
	char path[600], cap[600];
	uint8_t u8[TNY * TNX * 3] = { 0 };
	double f64[TNY * TNX] = { 0 };
	tiffw_opts_t o;

	tmp_path(cap, sizeof cap, "stderr.txt");
	fflush(stderr);
	int saved = dup(2), fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(saved >= 0 && fd >= 0);
	assert_int_equal(dup2(fd, 2), 2);
	close(fd);

	/* a private tag, out of order: libtiff warns (an unknown tag, tags not
	 * sorted), the warnings are dropped, the file reads */
	tmp_path(path, sizeof path, "private_tag.tif");
	write_tif(path, COMPRESSION_LZW, 8);
	ifd_retag(path, TIFFTAG_PLANARCONFIG, 65000);
	{
		apple_micfile_t h;
		sp_err_t err = { 0, "" };
		float *d = NULL;
		assert_int_equal(apple_micfile_load_f32(path, &h, &d, &err), 0);
		assert_true(d[1] == (float)sin(0.1));
		free(d);
	}

	tmp_path(path, sizeof path, "nonexistent.tif");
	expect_error(path, SP_ENOENT, "no such file");
	tmp_path(path, sizeof path, "fifo.tiff");
	assert_int_equal(mkfifo(path, 0600), 0);
	expect_error(path, SP_EFORMAT, "is a FIFO");

	tmp_path(path, sizeof path, "text.tif");
	write_text(path, "not a TIFF at all\n");
	expect_error(path, SP_EFORMAT, "not a readable TIFF file: ");
	tmp_path(path, sizeof path, "empty.tif");
	write_text(path, "");
	expect_error(path, SP_EFORMAT, "not a readable TIFF file: ");

	tmp_path(path, sizeof path, "rgb.tif");
	o = tiffw_defaults();
	o.bits = 8;
	o.sample_format = SAMPLEFORMAT_UINT;
	o.spp = 3;
	o.photometric = PHOTOMETRIC_RGB;
	assert_int_equal(tiffw_write(path, u8, TNY, TNX, &o), 0);
	expect_error(path, SP_EFORMAT, "3 samples per pixel (RGB): a micrograph has one (grey)");

	tmp_path(path, sizeof path, "u32.tif");
	o = tiffw_defaults();
	o.sample_format = SAMPLEFORMAT_UINT;
	assert_int_equal(tiffw_write(path, f64, TNY, TNX, &o), 0);
	expect_error(path, SP_EFORMAT, "unsupported TIFF pixels: 32-bit unsigned integer");
	tmp_path(path, sizeof path, "f64.tif");
	o.bits = 64;
	o.sample_format = SAMPLEFORMAT_IEEEFP;
	assert_int_equal(tiffw_write(path, f64, TNY, TNX, &o), 0);
	expect_error(path, SP_EFORMAT, "unsupported TIFF pixels: 64-bit float");
	tmp_path(path, sizeof path, "bilevel.tif");
	o = tiffw_defaults();
	o.bits = 1;
	o.sample_format = SAMPLEFORMAT_UINT;
	assert_int_equal(tiffw_write(path, u8, TNY, TNX, &o), 0);
	expect_error(path, SP_EFORMAT, "unsupported TIFF pixels: 1-bit unsigned integer");

	tmp_path(path, sizeof path, "palette.tif");
	o = tiffw_defaults();
	o.bits = 8;
	o.sample_format = SAMPLEFORMAT_UINT;
	o.photometric = PHOTOMETRIC_PALETTE;
	assert_int_equal(tiffw_write(path, u8, TNY, TNX, &o), 0);
	expect_error(path, SP_EFORMAT, "photometric interpretation 3 (palette, colour-mapped)");
	tmp_path(path, sizeof path, "white.tif");
	o.photometric = PHOTOMETRIC_MINISWHITE;
	assert_int_equal(tiffw_write(path, u8, TNY, TNX, &o), 0);
	expect_error(path, SP_EFORMAT, "photometric interpretation 0 (min-is-white)");

	tmp_path(path, sizeof path, "movie.tif");
	o = tiffw_defaults();
	o.pages = 3;
	assert_int_equal(tiffw_write(path, f64, TNY, TNX, &o), 0);
	expect_error(path, SP_ESHAPE, "a multi-page TIFF of 3 pages (a movie?), not a micrograph");

	/* libtiff writes the directory after the pixels: a cut file has none */
	tmp_path(path, sizeof path, "cut.tif");
	write_tif(path, COMPRESSION_LZW, 8);
	assert_int_equal(truncate(path, 3000), 0);
	expect_error(path, SP_EFORMAT, "truncated: the TIFF directory should be at byte ");

	/* a strip beyond the end of the file: refused at open */
	tmp_path(path, sizeof path, "beyond.tif");
	write_tif(path, COMPRESSION_NONE, 20);
	uint32_t at = 1000000;
	ifd_entry(path, TIFFTAG_STRIPOFFSETS, 1, &at);
	expect_error(path, SP_EFORMAT, "truncated: TIFF strip 1 of 2 ends at byte 1");

	/* strips that end early: an LZW one, an uncompressed one */
	tmp_path(path, sizeof path, "short_lzw.tif");
	write_tif(path, COMPRESSION_LZW, 8);
	short_strip(path, 2, 0);
	expect_error(path, SP_EFORMAT, "cannot decode TIFF strip 2 (rows 16-23): LZWDecode: ");
	tmp_path(path, sizeof path, "short_raw.tif");
	write_tif(path, COMPRESSION_NONE, 20);
	short_strip(path, 1, 1);
	expect_error(path, SP_EFORMAT, "cannot decode TIFF strip 1 (rows 20-36): TIFFReadEncodedStrip: Read error");

	/* non-finite floats, as in MRC */
	tmp_path(path, sizeof path, "nan.tif");
	float fl[TNY * TNX] = { 0 };
	fl[3 * TNX + 7] = NAN;
	o = tiffw_defaults();
	o.compression = COMPRESSION_LZW;
	assert_int_equal(tiffw_write(path, fl, TNY, TNX, &o), 0);
	expect_error(path, SP_ENONFINITE, "non-finite pixel at (row 3, col 7)");
	fl[3 * TNX + 7] = -INFINITY;
	assert_int_equal(tiffw_write(path, fl, TNY, TNX, &o), 0);
	expect_error(path, SP_ENONFINITE, "non-finite pixel at (row 3, col 7): -inf");

	fflush(stderr);
	assert_int_equal(dup2(saved, 2), 2);
	close(saved);
	struct stat st;
	assert_int_equal(stat(cap, &st), 0);
	if (st.st_size != 0) {
		char buf[512] = "";
		FILE *f = fopen(cap, "r");
		size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
		buf[n] = '\0';
		if (f)
			fclose(f);
		print_message("# printed on stderr: %s\n", buf);
	}
	assert_int_equal(st.st_size, 0);
}

/* Two files whose strips fail with different libtiff messages, read over
 * and over by 4 threads at once: each error carries its own file's reason
 * (the handlers are per file handle, not global). */
struct tiff_thread {
	const char *path, *phrase;
	int bad;
	char msg[512]; /* the last wrong message */
};

static void *tiff_thread_main(void *arg)
{
	struct tiff_thread *t = arg;
	for (int i = 0; i < 50; i++) {
		apple_micfile_t h;
		sp_err_t err = { 0, "" };
		float *d = NULL;
		if (apple_micfile_load_f32(t->path, &h, &d, &err) == 0 ||
		    strstr(err.msg, t->path) != err.msg || strstr(err.msg, t->phrase) == NULL) {
			t->bad++;
			memcpy(t->msg, err.msg, sizeof t->msg);
		}
		free(d);
	}
	return NULL;
}

static void test_tiff_threads(void **state)
{
	(void)state;
	char a[600], b[600];
	tmp_path(a, sizeof a, "thr_lzw.tif");
	write_tif(a, COMPRESSION_LZW, 8);
	short_strip(a, 2, 0);
	tmp_path(b, sizeof b, "thr_raw.tif");
	write_tif(b, COMPRESSION_NONE, 20);
	short_strip(b, 1, 1);
	struct tiff_thread t[4] = { { a, "strip 2 (rows 16-23): LZWDecode: ", 0, "" },
				    { b, "strip 1 (rows 20-36): TIFFReadEncodedStrip: Read error", 0, "" },
				    { a, "strip 2 (rows 16-23): LZWDecode: ", 0, "" },
				    { b, "strip 1 (rows 20-36): TIFFReadEncodedStrip: Read error", 0, "" } };
	pthread_t th[4];
	for (int k = 0; k < 4; k++)
		assert_int_equal(pthread_create(&th[k], NULL, tiff_thread_main, &t[k]), 0);
	for (int k = 0; k < 4; k++) {
		assert_int_equal(pthread_join(th[k], NULL), 0);
		if (t[k].bad != 0)
			print_message("# thread %d: %d wrong, the last: %s\n", k, t[k].bad, t[k].msg);
		assert_int_equal(t[k].bad, 0);
	}
}

static void test_star_f64_and_box(void **state)
{
	(void)state;
	char path[600];
	sp_err_t err = { 0, "" };
	double xy[4] = { 12.345, 7.005, 2047.5, 0.0 }, *back;
	size_t n;
	tmp_path(path, sizeof path, "truth.star");
	assert_int_equal(apple_star_write_f64(path, xy, 2, 2, &err), 0);
	assert_int_equal(apple_star_read(path, &back, &n, &err), 0);
	assert_int_equal(n, 2);
	for (int k = 0; k < 4; k++)
		assert_true(fabs(back[k] - xy[k]) <= 0.005 + 1e-12);
	free(back);

	int ixy[4] = { 100, 200, 39, 7 };
	tmp_path(path, sizeof path, "picks.box");
	assert_int_equal(apple_box_write(path, ixy, 2, 78, &err), 0);
	char buf[256] = "";
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t len = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[len] = '\0';
	assert_string_equal(buf, "61\t161\t78\t78\n0\t-32\t78\t78\n");
	assert_int_equal(apple_box_write(path, ixy, 2, 0, &err), SP_EINVAL);
}

/* The score-carrying layouts: exact text, our reader reads their
 * coordinates back; a micrograph name that is not one STAR token, or a
 * non-finite score, is refused and leaves no file. */
static void test_picks_layouts(void **state)
{
	(void)state;
	char path[600], buf[512];
	sp_err_t err = { 0, "" };
	int ixy[4] = { 100, 200, 39, 7 };
	double score[2] = { 0.5, -1.25 }, *back;
	size_t n;
	const struct {
		apple_star_format_t f;
		const char *text;
	} c[] = {
		{ APPLE_STAR_RELION, "data_root\n\nloop_\n_rlnCoordinateX #1\n_rlnCoordinateY #2\n"
				     "_rlnAutopickFigureOfMerit #3\n100 200 0.5\n39 7 -1.25\n" },
		{ APPLE_STAR_CRYOSPARC, "data_root\n\nloop_\n_rlnMicrographName #1\n_rlnCoordinateX #2\n"
					"_rlnCoordinateY #3\n_rlnAutopickFigureOfMerit #4\n"
					"m.mrc 100 200 0.5\nm.mrc 39 7 -1.25\n" },
		{ APPLE_STAR_CSV, "x,y,score\n100,200,0.5\n39,7,-1.25\n" },
	};
	for (size_t k = 0; k < 3; k++) {
		tmp_path(path, sizeof path, "layout.star");
		assert_int_equal(apple_picks_write_into(NULL, path, c[k].f, "m.mrc", ixy, score, 2, &err), 0);
		FILE *f = fopen(path, "r");
		assert_non_null(f);
		size_t len = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[len] = '\0';
		assert_string_equal(buf, c[k].text);
		if (c[k].f != APPLE_STAR_CSV) {
			assert_int_equal(apple_star_read(path, &back, &n, &err), 0);
			assert_int_equal(n, 2);
			for (int e = 0; e < 4; e++)
				assert_true(back[e] == ixy[e]);
			free(back);
		}
		remove(path);
	}
	tmp_path(path, sizeof path, "bad.star");
	assert_int_equal(apple_picks_write_into(NULL, path, APPLE_STAR_CRYOSPARC, "a b.mrc", ixy,
						score, 2, &err), SP_EINVAL);
	assert_non_null(strstr(err.msg, "'a b.mrc' cannot be a STAR value"));
	assert_int_equal(access(path, F_OK), -1);
	score[1] = NAN;
	assert_int_equal(apple_picks_write_into(NULL, path, APPLE_STAR_RELION, "m.mrc", ixy, score, 2,
						&err), SP_ENONFINITE);
	assert_int_equal(access(path, F_OK), -1);
}

/* apple_preview_render() on a rectangular 300 x 500 image binned by 5: the
 * size, the contrast stretch (1st/99th percentiles to 0/255), a pick's
 * circle green at its radius and grey at its centre, row 0 on top; the PNG
 * read back by libpng holds the same pixels; a bad max_side is refused and
 * leaves no file. */
static void test_preview(void **state)
{
	(void)state;
	enum { NY = 300, NX = 500 };
	static float img[NY][NX];
	for (int y = 0; y < NY; y++)
		for (int x = 0; x < NX; x++)
			img[y][x] = y >= 200 ? 1000.0f : (float)(10 * (x / 100));
	int xy[2] = { 250, 150 }; /* x, y */
	uint8_t *rgb = NULL;
	int h = 0, w = 0;
	sp_err_t err = { 0 };
	assert_int_equal(apple_preview_render(&img[0][0], NY, NX, xy, 1, 50, 100, &rgb, &h, &w,
					      &err), 0);
	assert_int_equal(h, 60);
	assert_int_equal(w, 100);
#define PIX(y, x, c) rgb[3 * ((size_t)(y) * w + (x)) + (c)]
	/* 1st percentile 0, 99th 1000 (the bright band, rows >= 200: binned
	 * rows >= 40): 0 -> 0, 1000 -> 255, the step 40 -> round(10.2) */
	assert_int_equal(PIX(50, 5, 0), 255);
	assert_int_equal(PIX(0, 0, 0), 0);
	assert_int_equal(PIX(10, 90, 2), 10);
	/* the circle: centre (50.1, 30.1) binned, radius 25 / 5 = 5 */
	assert_int_equal(PIX(30, 50, 0), PIX(30, 50, 1)); /* grey at the centre */
	assert_int_equal(PIX(30, 55, 0), 0);
	assert_int_equal(PIX(30, 55, 1), 255);
	assert_int_equal(PIX(25, 50, 1), 255);
	assert_true(PIX(20, 50, 0) == PIX(20, 50, 1)); /* outside the ring: grey */

	char path[600], tmp[700];
	tmp_path(path, sizeof path, "preview.png");
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	assert_int_equal(apple_preview_write_into(tmp, path, &img[0][0], NY, NX, xy, 1, 50, 100,
						  &err), 0);
	png_image im;
	memset(&im, 0, sizeof im);
	im.version = PNG_IMAGE_VERSION;
	assert_true(png_image_begin_read_from_file(&im, tmp) != 0);
	assert_int_equal(im.width, 100);
	assert_int_equal(im.height, 60);
	im.format = PNG_FORMAT_RGB;
	uint8_t *back = malloc(PNG_IMAGE_SIZE(im));
	assert_non_null(back);
	assert_true(png_image_finish_read(&im, NULL, back, 0, NULL) != 0);
	assert_memory_equal(back, rgb, 3 * (size_t)h * w);
	free(back);
	free(rgb);
	unlink(tmp);
	assert_int_equal(apple_preview_write_into(tmp, path, &img[0][0], NY, NX, xy, 1, 50, 8,
						  &err), SP_EINVAL);
	assert_int_not_equal(access(tmp, F_OK), 0);
	/* A full disk is named (libpng's own writer said "Write Error"):
	 * /dev/full fails every write with ENOSPC. */
	if (access("/dev/full", W_OK) == 0) {
		memset(&err, 0, sizeof err);
		assert_int_equal(apple_preview_write_into("/dev/full", path, &img[0][0], NY, NX, xy, 1,
							  50, 100, &err), SP_EIO);
		if (strstr(err.msg, "preview.png: cannot write the preview: No space left on device") ==
		    NULL) {
			print_message("# %s\n", err.msg);
			fail();
		}
	}
	/* and a symlink at the temporary's name is not followed */
	char target[700];
	snprintf(target, sizeof target, "%s.target", path);
	FILE *t = fopen(target, "w");
	assert_non_null(t);
	fputs("precious\n", t);
	assert_int_equal(fclose(t), 0);
	assert_int_equal(symlink(target, tmp), 0);
	assert_int_equal(apple_preview_write_into(tmp, path, &img[0][0], NY, NX, xy, 1, 50, 100,
						  &err), SP_EIO);
	struct stat sb;
	assert_int_equal(stat(target, &sb), 0);
	assert_int_equal(sb.st_size, 9);
	unlink(tmp);
	unlink(target);
#undef PIX
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shared_2k),
		cmocka_unit_test(test_round_trip_f32),
		cmocka_unit_test(test_integer_modes),
		cmocka_unit_test(test_float16),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_tiff_formats),
		cmocka_unit_test(test_tiff_same_as_mrc),
		cmocka_unit_test(test_tiff_corrupt),
		cmocka_unit_test(test_tiff_threads),
		cmocka_unit_test(test_star_reference_bytes),
		cmocka_unit_test(test_star_read_tolerant),
		cmocka_unit_test(test_star_f64_and_box),
		cmocka_unit_test(test_picks_layouts),
		cmocka_unit_test(test_preview),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
