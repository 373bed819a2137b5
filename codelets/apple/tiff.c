/* TIFF micrograph reading through libtiff (one grey page; 8/16-bit integers, 32-bit float). */
#define _POSIX_C_SOURCE 200809L
#define _FILE_OFFSET_BITS 64

#include "tiff.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tiffio.h>

#include "fsutil.h"

/*
 * DESIGN.  The file is opened by sp_open_regular() (a FIFO or a device is
 * refused before libtiff sees it) and handed to TIFFFdOpenExt() with mode
 * "rm": no memory map, so a file cut while it is read gives a read error,
 * not SIGBUS.  The open options carry this file's error and warning
 * handlers (libtiff >= 4.5); they write into a struct tiff_log on the
 * caller's stack, so nothing is global and nothing reaches stderr.  The
 * first error is kept: later ones are usually consequences of it.  Both
 * apple_tiff_open() and apple_tiff_read_f32() go through tiff_start(),
 * which checks everything the read relies on; the read then compares what
 * it found with the caller's hdr, as the MRC reader compares sizes.
 */

/* Tiles larger than this are refused (crafted tile sizes would make the
 * decode buffer huge for a tiny image). */
#define APPLE_TIFF_MAX_TILE_BYTES ((uint64_t)256 << 20)

struct tiff_log {
	char first[300]; /* the first error libtiff reported, "" if none */
};

static int log_error_cb(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
	struct tiff_log *log = user;
	if (log->first[0] == '\0') {
		char text[sizeof log->first];
		vsnprintf(text, sizeof text, fmt, ap);
		/* libtiff's module is a function name, which some messages
		 * repeat, or the file's name, which ours starts with */
		size_t m = module != NULL ? strlen(module) : 0;
		if (m == 0 || (tif != NULL && strcmp(module, TIFFFileName(tif)) == 0) ||
		    (strncmp(text, module, m) == 0 && text[m] == ':'))
			sp_fmt_fit(log->first, sizeof log->first, "%s", text);
		else
			sp_fmt_fit(log->first, sizeof log->first, "%s: %s", module, text);
	}
	return 1; /* handled: libtiff's global handler (stderr) is not called */
}

static int drop_warning_cb(TIFF *tif, void *user, const char *module, const char *fmt, va_list ap)
{
	(void)tif;
	(void)user;
	(void)module;
	(void)fmt;
	(void)ap;
	return 1;
}

int apple_tiff_is_tiff_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *dot = strrchr(slash != NULL ? slash + 1 : path, '.');
	return dot != NULL && (strcasecmp(dot, ".tif") == 0 || strcasecmp(dot, ".tiff") == 0);
}

/* Where the first directory should be, from the file's header, for a
 * better message than libtiff's when a cut file lost its directory (libtiff
 * writes it after the pixels).  0 if the header is not TIFF's. */
static uint64_t first_ifd_offset(int fd)
{
	unsigned char h[16];
	if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h)
		return 0;
	int le = h[0] == 'I' && h[1] == 'I', be = h[0] == 'M' && h[1] == 'M';
	if (!le && !be)
		return 0;
	unsigned version = le ? (unsigned)(h[2] | h[3] << 8) : (unsigned)(h[2] << 8 | h[3]);
	int first = version == 42 ? 4 : version == 43 ? 8 : 0, n = version == 42 ? 4 : 8;
	if (first == 0)
		return 0;
	uint64_t off = 0;
	for (int k = 0; k < n; k++)
		off |= (uint64_t)h[first + (le ? k : n - 1 - k)] << (8 * k);
	return off;
}

static const char *format_name(int fmt)
{
	switch (fmt) {
	case SAMPLEFORMAT_UINT: return "unsigned integer";
	case SAMPLEFORMAT_INT: return "signed integer";
	case SAMPLEFORMAT_IEEEFP: return "float";
	case SAMPLEFORMAT_COMPLEXINT: return "complex integer";
	case SAMPLEFORMAT_COMPLEXIEEEFP: return "complex float";
	default: return "untyped";
	}
}

static const char *photometric_name(int p)
{
	switch (p) {
	case PHOTOMETRIC_MINISWHITE: return "min-is-white";
	case PHOTOMETRIC_RGB: return "RGB";
	case PHOTOMETRIC_PALETTE: return "palette, colour-mapped";
	case PHOTOMETRIC_MASK: return "transparency mask";
	case PHOTOMETRIC_SEPARATED: return "CMYK";
	case PHOTOMETRIC_YCBCR: return "YCbCr";
	default: return "colour or unknown";
	}
}

/* Opens path and checks its first and only page; fills hdr.  On success
 * *out is the open handle (TIFFClose() it; log must outlive it). */
static int tiff_start(const char *path, struct tiff_log *log, TIFF **out, apple_tiff_t *hdr,
		      sp_err_t *err)
{
	struct stat st;
	*out = NULL;
	memset(hdr, 0, sizeof *hdr);
	log->first[0] = '\0';

	int fd = sp_open_regular(path, err);
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return sp_seterr(err, SP_EIO, "%s: %s", path, strerror(e));
	}
	TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
	if (opts == NULL) {
		close(fd);
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory for libtiff's options", path);
	}
	TIFFOpenOptionsSetErrorHandlerExtR(opts, log_error_cb, log);
	TIFFOpenOptionsSetWarningHandlerExtR(opts, drop_warning_cb, NULL);
	TIFF *tif = TIFFFdOpenExt(fd, path, "rm", opts);
	TIFFOpenOptionsFree(opts); /* the handle keeps its own copy of the handlers */
	if (tif == NULL) {
		/* libtiff does not close a descriptor it failed to open */
		uint64_t ifd = first_ifd_offset(fd);
		close(fd);
		if (ifd != 0 && ifd >= (uint64_t)st.st_size)
			return sp_seterr(err, SP_EFORMAT,
					 "%s: truncated: the TIFF directory should be at byte %llu, "
					 "the file has %lld bytes", path, (unsigned long long)ifd,
					 (long long)st.st_size);
		return sp_seterr(err, SP_EFORMAT, "%s: not a readable TIFF file: %s", path,
				 log->first[0] ? log->first : "libtiff cannot open it");
	}

	int rc = 0;
	uint32_t w = 0, h = 0;
	uint16_t spp = 1, bits = 1, fmt = SAMPLEFORMAT_UINT, photo = PHOTOMETRIC_MINISBLACK;
	uint16_t comp = COMPRESSION_NONE;
	tdir_t pages = TIFFNumberOfDirectories(tif);
	if (pages > 1) {
		rc = sp_seterr(err, SP_ESHAPE,
			       "%s: a multi-page TIFF of %lu pages (a movie?), not a micrograph; "
			       "motion-correct or sum its frames into one image first", path,
			       (unsigned long)pages);
		goto out;
	}
	if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h) ||
	    w < 1 || h < 1 || w > INT32_MAX || h > INT32_MAX) {
		rc = sp_seterr(err, SP_EFORMAT, "%s: bad or missing TIFF image size %lu x %lu", path,
			       (unsigned long)h, (unsigned long)w);
		goto out;
	}
	TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &spp);
	TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bits);
	TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &fmt);
	TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photo); /* absent: min-is-black */
	TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &comp);
	if (spp != 1) {
		rc = sp_seterr(err, SP_EFORMAT,
			       "%s: %u samples per pixel (%s): a micrograph has one (grey)", path,
			       (unsigned)spp, photo == PHOTOMETRIC_RGB ? "RGB" : "colour or extra channels");
		goto out;
	}
	if (!((fmt == SAMPLEFORMAT_UINT || fmt == SAMPLEFORMAT_INT) && (bits == 8 || bits == 16)) &&
	    !(fmt == SAMPLEFORMAT_IEEEFP && bits == 32)) {
		rc = sp_seterr(err, SP_EFORMAT,
			       "%s: unsupported TIFF pixels: %u-bit %s; expected 8- or 16-bit "
			       "integers (unsigned or signed) or 32-bit float", path, (unsigned)bits,
			       format_name(fmt));
		goto out;
	}
	if (photo != PHOTOMETRIC_MINISBLACK) {
		rc = sp_seterr(err, SP_EFORMAT,
			       "%s: unsupported TIFF photometric interpretation %u (%s): a micrograph "
			       "is grey, min-is-black", path, (unsigned)photo, photometric_name(photo));
		goto out;
	}
	if (!TIFFIsCODECConfigured(comp)) {
		rc = sp_seterr(err, SP_EFORMAT,
			       "%s: TIFF compression %u is not supported by this libtiff (%s)", path,
			       (unsigned)comp, TIFFGetVersion());
		goto out;
	}
	int64_t need;
	if (__builtin_mul_overflow((int64_t)w, (int64_t)h, &need) ||
	    __builtin_mul_overflow(need, (int64_t)sizeof(float), &need) ||
	    (uint64_t)need > SIZE_MAX / 2) {
		rc = sp_seterr(err, SP_EFORMAT, "%s: image size %lu x %lu is too large", path,
			       (unsigned long)h, (unsigned long)w);
		goto out;
	}
	hdr->nx = (int)w;
	hdr->ny = (int)h;
	hdr->bits = bits;
	hdr->sample_format = fmt;
	hdr->compression = comp;
	hdr->tiled = TIFFIsTiled(tif) != 0;
	uint32_t nstrile;
	const char *what;
	if (hdr->tiled) {
		uint32_t tw = 0, th = 0;
		TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
		TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
		if (tw < 1 || th < 1 || tw > INT32_MAX || th > INT32_MAX ||
		    (uint64_t)tw * th * (bits / 8) > APPLE_TIFF_MAX_TILE_BYTES) {
			rc = sp_seterr(err, SP_EFORMAT, "%s: bad TIFF tile size %lu x %lu", path,
				       (unsigned long)th, (unsigned long)tw);
			goto out;
		}
		hdr->tile_w = (int)tw;
		hdr->tile_h = (int)th;
		nstrile = TIFFNumberOfTiles(tif);
		what = "tile";
	} else {
		uint32_t rps = 0;
		TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
		hdr->rows_per_strip = rps < 1 || rps > h ? (int)h : (int)rps;
		nstrile = TIFFNumberOfStrips(tif);
		what = "strip";
	}
	/* Every strip or tile inside the file: a cut file is refused now. */
	for (uint32_t k = 0; k < nstrile; k++) {
		uint64_t off = TIFFGetStrileOffset(tif, k), len = TIFFGetStrileByteCount(tif, k);
		if (len == 0) {
			rc = sp_seterr(err, SP_EFORMAT, "%s: TIFF %s %lu has no data (byte count 0)",
				       path, what, (unsigned long)k);
			goto out;
		}
		if (len > (uint64_t)st.st_size || off > (uint64_t)st.st_size - len) {
			rc = sp_seterr(err, SP_EFORMAT,
				       "%s: truncated: TIFF %s %lu of %lu ends at byte %llu, the file "
				       "has %lld bytes", path, what, (unsigned long)k,
				       (unsigned long)nstrile, (unsigned long long)(off + len),
				       (long long)st.st_size);
			goto out;
		}
	}
out:
	if (rc != 0) {
		TIFFClose(tif);
		return rc;
	}
	*out = tif;
	return 0;
}

int apple_tiff_open(const char *path, apple_tiff_t *hdr, sp_err_t *err)
{
	struct tiff_log log;
	TIFF *tif;
	int rc = tiff_start(path, &log, &tif, hdr, err);
	if (rc == 0)
		TIFFClose(tif);
	return rc;
}

/* Converts n samples at p (host byte order: libtiff swaps) into out. */
static void convert(const unsigned char *p, size_t n, int bits, int fmt, float *out)
{
	size_t i;

	if (bits == 8 && fmt == SAMPLEFORMAT_UINT) {
		for (i = 0; i < n; i++)
			out[i] = (float)p[i];
	} else if (bits == 8) {
		for (i = 0; i < n; i++)
			out[i] = (float)(int8_t)p[i];
	} else if (bits == 16 && fmt == SAMPLEFORMAT_UINT) {
		for (i = 0; i < n; i++) {
			uint16_t v;
			memcpy(&v, p + 2 * i, sizeof v);
			out[i] = (float)v;
		}
	} else if (bits == 16) {
		for (i = 0; i < n; i++) {
			int16_t v;
			memcpy(&v, p + 2 * i, sizeof v);
			out[i] = (float)v;
		}
	} else {
		memcpy(out, p, n * sizeof(float));
	}
}

/* Decodes strip or tile k into buf, which must come out exactly want
 * bytes long. */
static int decode(TIFF *tif, const char *path, const apple_tiff_t *hdr, uint32_t k, void *buf,
		  uint64_t want, int y0, int y1, int x0, struct tiff_log *log, sp_err_t *err)
{
	log->first[0] = '\0'; /* this strip's reason, not an earlier one */
	tmsize_t got = hdr->tiled ? TIFFReadEncodedTile(tif, k, buf, (tmsize_t)want)
				  : TIFFReadEncodedStrip(tif, k, buf, (tmsize_t)want);
	if (got == (tmsize_t)want)
		return 0;
	char where[80];
	if (hdr->tiled)
		snprintf(where, sizeof where, "tile %lu (rows %d-%d, from column %d)",
			 (unsigned long)k, y0, y1 - 1, x0);
	else
		snprintf(where, sizeof where, "strip %lu (rows %d-%d)", (unsigned long)k, y0, y1 - 1);
	if (got < 0)
		return sp_seterr(err, SP_EFORMAT, "%s: cannot decode TIFF %s: %s", path, where,
				 log->first[0] ? log->first : "libtiff gave no reason");
	return sp_seterr(err, SP_EFORMAT, "%s: truncated TIFF %s: %lld bytes decoded, %llu expected",
			 path, where, (long long)got, (unsigned long long)want);
}

int apple_tiff_read_f32(const char *path, const apple_tiff_t *hdr, float *out, sp_err_t *err)
{
	struct tiff_log log;
	apple_tiff_t now;
	TIFF *tif;
	int rc = tiff_start(path, &log, &tif, &now, err);
	if (rc != 0)
		return rc;
	if (memcmp(&now, hdr, sizeof now) != 0) {
		TIFFClose(tif);
		return sp_seterr(err, SP_EFORMAT, "%s: the file changed since it was opened", path);
	}
	const size_t nx = (size_t)hdr->nx, bps = (size_t)hdr->bits / 8;
	const int ny = hdr->ny;
	const uint64_t cap = hdr->tiled ? TIFFTileSize64(tif) : TIFFStripSize64(tif);
	if (cap == 0 || cap > SIZE_MAX) {
		TIFFClose(tif);
		return sp_seterr(err, SP_EFORMAT, "%s: bad TIFF %s size (%llu bytes)", path,
				 hdr->tiled ? "tile" : "strip", (unsigned long long)cap);
	}
	unsigned char *buf = malloc((size_t)cap);
	if (buf == NULL) {
		TIFFClose(tif);
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory for a TIFF %s of %llu bytes", path,
				 hdr->tiled ? "tile" : "strip", (unsigned long long)cap);
	}
	if (!hdr->tiled) {
		const int rps = hdr->rows_per_strip;
		for (int y0 = 0; y0 < ny && rc == 0; y0 += rps) {
			int y1 = ny - y0 < rps ? ny : y0 + rps;
			uint64_t want = (uint64_t)(y1 - y0) * nx * bps;
			if (want > cap) { /* libtiff's strips are not RowsPerStrip's */
				rc = sp_seterr(err, SP_EFORMAT,
					       "%s: TIFF strip of rows %d-%d needs %llu bytes, libtiff's "
					       "strips hold %llu", path, y0, y1 - 1,
					       (unsigned long long)want, (unsigned long long)cap);
				break;
			}
			rc = decode(tif, path, hdr, TIFFComputeStrip(tif, (uint32_t)y0, 0), buf, want, y0,
				    y1, 0, &log, err);
			if (rc == 0)
				convert(buf, (size_t)(y1 - y0) * nx, hdr->bits, hdr->sample_format,
					out + (size_t)y0 * nx);
		}
	} else {
		const int tw = hdr->tile_w, th = hdr->tile_h;
		for (int y0 = 0; y0 < ny && rc == 0; y0 += th)
			for (int x0 = 0; x0 < (int)nx && rc == 0; x0 += tw) {
				int y1 = ny - y0 < th ? ny : y0 + th;
				size_t w = nx - (size_t)x0 < (size_t)tw ? nx - (size_t)x0 : (size_t)tw;
				/* a tile decodes whole, its padding included */
				rc = decode(tif, path, hdr,
					    TIFFComputeTile(tif, (uint32_t)x0, (uint32_t)y0, 0, 0), buf,
					    cap, y0, y1, x0, &log, err);
				for (int y = y0; y < y1 && rc == 0; y++)
					convert(buf + (size_t)(y - y0) * (size_t)tw * bps, w, hdr->bits,
						hdr->sample_format, out + (size_t)y * nx + (size_t)x0);
			}
	}
	free(buf);
	TIFFClose(tif);
	if (rc == 0 && hdr->sample_format == SAMPLEFORMAT_IEEEFP)
		for (size_t e = 0; e < (size_t)ny * nx; e++)
			if (!isfinite(out[e]))
				return sp_seterr(err, SP_ENONFINITE,
						 "%s: non-finite pixel at (row %zu, col %zu): %g", path,
						 e / nx, e % nx, (double)out[e]);
	return rc;
}
