/* MRC micrograph reading (modes 0, 1, 2, 6, 12; either byte order) and mode-2 writing. */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64

#include "mrc.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "fsutil.h"

/*
 * DESIGN.  Fields are decoded byte by byte (get32() below), never by
 * casting the header to a struct, so the code does not depend on the host's
 * byte order or on struct padding.  Sizes are checked in 64-bit arithmetic
 * with overflow checks before the file size is compared, so a corrupt header
 * with huge dimensions is reported as such, not as an allocation failure.
 * Reading goes through a buffer of a few rows and converts as it copies.
 */

/* Header word offsets (bytes). */
enum {
	H_NX = 0, H_NY = 4, H_NZ = 8, H_MODE = 12, H_MX = 28, H_MY = 32, H_MZ = 36,
	H_CELLA = 40, H_CELLB = 52, H_MAPC = 64, H_DMIN = 76, H_DMAX = 80, H_DMEAN = 84,
	H_ISPG = 88, H_NSYMBT = 92, H_EXTTYP = 104, H_NVERSION = 108, H_ORIGIN = 196,
	H_MAP = 208, H_MACHST = 212, H_RMS = 216, H_NLABL = 220, H_LABEL = 224
};

static uint32_t get32(const unsigned char *p, int big)
{
	return big ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
		   : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

static int32_t geti32(const unsigned char *p, int big)
{
	uint32_t u = get32(p, big);
	int32_t v;
	memcpy(&v, &u, sizeof v);
	return v;
}

static float getf32(const unsigned char *p, int big)
{
	uint32_t u = get32(p, big);
	float v;
	memcpy(&v, &u, sizeof v);
	return v;
}

static void put32(unsigned char *p, uint32_t u)
{
	p[0] = (unsigned char)u;
	p[1] = (unsigned char)(u >> 8);
	p[2] = (unsigned char)(u >> 16);
	p[3] = (unsigned char)(u >> 24);
}

static void putf32(unsigned char *p, float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	put32(p, u);
}

static int item_size(int mode)
{
	switch (mode) {
	case 0: return 1;
	case 1: return 2;
	case 2: return 4;
	case 6: return 2;
	case 12: return 2;
	default: return 0;
	}
}

static const char *mode_name(int mode)
{
	switch (mode) {
	case 3: return " (complex int16)";
	case 4: return " (complex float32)";
	case 16: return " (RGB)";
	case 101: return " (4-bit)";
	default: return "";
	}
}

/* Byte order from MACHST, else from which order gives a known mode. */
static int is_big_endian(const unsigned char *h)
{
	if (h[H_MACHST] == 0x11 && h[H_MACHST + 1] == 0x11)
		return 1;
	if (h[H_MACHST] == 0x44 && (h[H_MACHST + 1] == 0x44 || h[H_MACHST + 1] == 0x41))
		return 0;
	int32_t le = geti32(h + H_MODE, 0), be = geti32(h + H_MODE, 1);
	return !(le >= 0 && le <= 16) && (be >= 0 && be <= 16);
}

int apple_mrc_open(const char *path, apple_mrc_t *hdr, sp_err_t *err)
{
	unsigned char h[APPLE_MRC_HEADER];
	struct stat st;

	memset(hdr, 0, sizeof *hdr);
	FILE *f = sp_fopen_regular(path, err);
	if (f == NULL)
		return err ? err->code : SP_EIO;
	if (fstat(fileno(f), &st) != 0) {
		int e = errno;
		fclose(f);
		return sp_seterr(err, SP_EIO, "%s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		fclose(f);
		return sp_seterr(err, SP_EFORMAT, "%s: not a regular file", path);
	}
	size_t got = fread(h, 1, sizeof h, f);
	int rerr = ferror(f);
	fclose(f);
	if (rerr)
		return sp_seterr(err, SP_EIO, "%s: read error", path);
	if (got < sizeof h)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: truncated header: the file has %zu bytes, an MRC header "
				 "has %d", path, got, APPLE_MRC_HEADER);

	int big = is_big_endian(h);
	int32_t nx = geti32(h + H_NX, big), ny = geti32(h + H_NY, big), nz = geti32(h + H_NZ, big);
	int32_t mode = geti32(h + H_MODE, big), nsymbt = geti32(h + H_NSYMBT, big);
	int isz = item_size(mode);

	if (isz == 0)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: unsupported MRC mode %ld%s: expected 0 (int8), 1 (int16), "
				 "2 (float32), 6 (uint16) or 12 (float16)", path, (long)mode, mode_name(mode));
	if (nx < 1 || ny < 1 || nz < 1)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: bad image size nx %ld, ny %ld, nz %ld (each must be >= 1)",
				 path, (long)nx, (long)ny, (long)nz);
	if (nsymbt < 0)
		return sp_seterr(err, SP_EFORMAT, "%s: negative extended header size NSYMBT %ld",
				 path, (long)nsymbt);
	if ((int64_t)nsymbt > (int64_t)st.st_size - APPLE_MRC_HEADER)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: extended header size NSYMBT %ld goes beyond the end of the "
				 "file (%lld bytes)", path, (long)nsymbt, (long long)st.st_size);
	if (nz > 1)
		return sp_seterr(err, SP_ESHAPE,
				 "%s: a stack or volume of %ld sections (nz), not a micrograph; "
				 "split it into single images", path, (long)nz);

	int64_t need;
	if (__builtin_mul_overflow((int64_t)nx, (int64_t)ny, &need) ||
	    __builtin_mul_overflow(need, (int64_t)isz, &need) || (uint64_t)need > SIZE_MAX / 2)
		return sp_seterr(err, SP_EFORMAT, "%s: image size %ld x %ld is too large", path,
				 (long)ny, (long)nx);
	int64_t have = (int64_t)st.st_size - APPLE_MRC_HEADER - nsymbt;
	if (have < need)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: truncated: expected %lld data bytes, found %lld", path,
				 (long long)need, (long long)have);
	if (have > need)
		return sp_seterr(err, SP_EFORMAT,
				 "%s: extra data: expected %lld data bytes, found %lld (is the "
				 "header's size or mode wrong?)", path, (long long)need,
				 (long long)have);

	hdr->nx = nx;
	hdr->ny = ny;
	hdr->nz = nz;
	hdr->mode = mode;
	hdr->itemsize = isz;
	hdr->big_endian = big;
	hdr->nsymbt = nsymbt;
	hdr->data_offset = APPLE_MRC_HEADER + (int64_t)nsymbt;
	int32_t mx = geti32(h + H_MX, big);
	float cx = getf32(h + H_CELLA, big);
	hdr->pixel_size = mx > 0 && isfinite(cx) && cx > 0 ? (double)cx / mx : 0.0;
	return 0;
}

/* IEEE 754 binary16 (MRC mode 12) to float: every value is exact in float. */
static float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u, u;
	float f;

	if (e == 0) { /* zero or subnormal: m 2^-24 */
		f = ldexpf((float)m, -24);
		return sign ? -f : f;
	}
	if (e == 31) /* infinity or NaN */
		u = sign | 0x7f800000u | (m << 13);
	else /* rebias the exponent: 15 -> 127 */
		u = sign | ((e + 112u) << 23) | (m << 13);
	memcpy(&f, &u, sizeof f);
	return f;
}

/* Converts n items of the file's type at p into out. */
static void convert(const unsigned char *p, size_t n, int mode, int big, float *out)
{
	size_t i;

	switch (mode) {
	case 0:
		for (i = 0; i < n; i++)
			out[i] = (float)(int8_t)p[i];
		break;
	case 1:
		for (i = 0; i < n; i++) {
			uint16_t u = big ? (uint16_t)(p[2 * i] << 8 | p[2 * i + 1])
					 : (uint16_t)(p[2 * i + 1] << 8 | p[2 * i]);
			int16_t v;
			memcpy(&v, &u, sizeof v);
			out[i] = (float)v;
		}
		break;
	case 6:
		for (i = 0; i < n; i++)
			out[i] = (float)(big ? (p[2 * i] << 8 | p[2 * i + 1])
					     : (p[2 * i + 1] << 8 | p[2 * i]));
		break;
	case 12:
		for (i = 0; i < n; i++)
			out[i] = half_to_float(big ? (uint16_t)(p[2 * i] << 8 | p[2 * i + 1])
						   : (uint16_t)(p[2 * i + 1] << 8 | p[2 * i]));
		break;
	default:
		for (i = 0; i < n; i++)
			out[i] = getf32(p + 4 * i, big);
		break;
	}
}

/* The index of the first of v[0..n) that is not finite, or n: a branchless
 * scan of the exponent bits in blocks (vectorised), the exact index looked
 * for only in a block that has one. */
static size_t first_nonfinite(const float *v, size_t n)
{
	enum { B = 4096 };
	for (size_t b = 0; b < n; b += B) {
		const size_t m = n - b < B ? n - b : B;
		uint32_t any = 0;
		for (size_t i = 0; i < m; i++) {
			uint32_t u;
			memcpy(&u, v + b + i, sizeof u);
			any |= (uint32_t)((u & 0x7f800000u) == 0x7f800000u);
		}
		if (any)
			for (size_t i = 0; i < m; i++)
				if (!isfinite(v[b + i]))
					return b + i;
	}
	return n;
}

/* 1 when the file's pixels are this machine's floats, byte for byte (mode
 * 2 in the host's byte order): read straight into the output. */
static int native_f32(const apple_mrc_t *hdr)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return hdr->mode == 2 && !hdr->big_endian;
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	return hdr->mode == 2 && hdr->big_endian;
#else
	(void)hdr;
	return 0;
#endif
}

int apple_mrc_read_f32(const char *path, const apple_mrc_t *hdr, float *out, sp_err_t *err)
{
	size_t nx = (size_t)hdr->nx, ny = (size_t)hdr->ny, isz = (size_t)hdr->itemsize;
	size_t rows = (1u << 20) / (nx * isz) + 1;
	if (rows > ny)
		rows = ny;
	const int direct = native_f32(hdr);
	unsigned char *buf = direct ? NULL : malloc(rows * nx * isz);
	if (!direct && buf == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory for a read buffer", path);
	FILE *f = sp_fopen_regular(path, err);
	if (f == NULL) {
		free(buf);
		return err ? err->code : SP_EIO;
	}
	int rc = 0;
	if (fseeko(f, (off_t)hdr->data_offset, SEEK_SET) != 0) {
		rc = sp_seterr(err, SP_EIO, "%s: cannot seek to the data: %s", path, strerror(errno));
		goto out;
	}
	for (size_t y0 = 0; y0 < ny; y0 += rows) {
		size_t m = ny - y0 < rows ? ny - y0 : rows, want = m * nx;
		float *o = out + y0 * nx;
		size_t got = fread(direct ? (void *)o : (void *)buf, isz, want, f);
		if (got != want) {
			rc = ferror(f) ? sp_seterr(err, SP_EIO, "%s: read error", path)
				       : sp_seterr(err, SP_EFORMAT,
						   "%s: truncated: the file changed since it was "
						   "opened (data ends at row %zu)", path, y0 + got / nx);
			goto out;
		}
		if (!direct)
			convert(buf, want, hdr->mode, hdr->big_endian, o);
		if (hdr->mode == 2 || hdr->mode == 12) {
			size_t e = first_nonfinite(o, want);
			if (e < want) {
				rc = sp_seterr(err, SP_ENONFINITE,
					       "%s: non-finite pixel at (row %zu, col %zu): %g", path,
					       y0 + e / nx, e % nx, (double)o[e]);
				goto out;
			}
		}
	}
out:
	fclose(f);
	free(buf);
	return rc;
}

int apple_mrc_load_f32(const char *path, apple_mrc_t *hdr, float **data, sp_err_t *err)
{
	*data = NULL;
	int rc = apple_mrc_open(path, hdr, err);
	if (rc != 0)
		return rc;
	float *d = malloc((size_t)hdr->ny * (size_t)hdr->nx * sizeof *d);
	if (d == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory for a %d x %d image", path,
				 hdr->ny, hdr->nx);
	rc = apple_mrc_read_f32(path, hdr, d, err);
	if (rc != 0) {
		free(d);
		return rc;
	}
	*data = d;
	return 0;
}

int apple_mrc_write_f32(const char *path, const float *data, int ny, int nx, double pixel_size,
			sp_err_t *err)
{
	if (ny < 1 || nx < 1)
		return sp_seterr(err, SP_EINVAL, "%s: bad image size %d x %d", path, ny, nx);
	if (!isfinite(pixel_size) || pixel_size < 0)
		return sp_seterr(err, SP_EINVAL, "%s: bad pixel size %g", path, pixel_size);
	size_t n = (size_t)ny * (size_t)nx;
	if (n > (SIZE_MAX - APPLE_MRC_HEADER) / 4)
		return sp_seterr(err, SP_EINVAL, "%s: image too large", path);
	unsigned char *buf = calloc(APPLE_MRC_HEADER + 4 * n, 1);
	if (buf == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory for a %d x %d image", path, ny,
				 nx);
	double mn = INFINITY, mx = -INFINITY, sum = 0, sum2 = 0;
	for (size_t e = 0; e < n; e++) {
		double v = data[e];
		if (!isfinite(v)) {
			free(buf);
			return sp_seterr(err, SP_ENONFINITE,
					 "%s: non-finite pixel at (row %zu, col %zu) not written", path,
					 e / (size_t)nx, e % (size_t)nx);
		}
		mn = v < mn ? v : mn;
		mx = v > mx ? v : mx;
		sum += v;
		putf32(buf + APPLE_MRC_HEADER + 4 * e, data[e]);
	}
	double mean = sum / (double)n;
	for (size_t e = 0; e < n; e++)
		sum2 += ((double)data[e] - mean) * ((double)data[e] - mean);

	unsigned char *h = buf;
	put32(h + H_NX, (uint32_t)nx);
	put32(h + H_NY, (uint32_t)ny);
	put32(h + H_NZ, 1);
	put32(h + H_MODE, 2);
	put32(h + H_MX, (uint32_t)nx);
	put32(h + H_MY, (uint32_t)ny);
	put32(h + H_MZ, 1);
	putf32(h + H_CELLA, (float)(pixel_size * nx));
	putf32(h + H_CELLA + 4, (float)(pixel_size * ny));
	putf32(h + H_CELLA + 8, (float)pixel_size);
	for (int k = 0; k < 3; k++) {
		putf32(h + H_CELLB + 4 * k, 90.0f);
		put32(h + H_MAPC + 4 * k, (uint32_t)k + 1);
	}
	putf32(h + H_DMIN, (float)mn);
	putf32(h + H_DMAX, (float)mx);
	putf32(h + H_DMEAN, (float)mean);
	put32(h + H_ISPG, 0); /* a 2-D image (MRC2014) */
	put32(h + H_NVERSION, 20140);
	memcpy(h + H_MAP, "MAP ", 4);
	h[H_MACHST] = 0x44;
	h[H_MACHST + 1] = 0x44;
	putf32(h + H_RMS, (float)sqrt(sum2 / (double)n));
	put32(h + H_NLABL, 1);
	static const char label[] = "starpipe apple_mrc_write_f32";
	memcpy(h + H_LABEL, label, sizeof label - 1);
	memset(h + H_LABEL + sizeof label - 1, ' ', 80 - (sizeof label - 1));

	int rc = sp_write_file_atomic(path, buf, APPLE_MRC_HEADER + 4 * n, err);
	free(buf);
	return rc;
}
