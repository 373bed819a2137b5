/* starpipe-desi-sim: a simulated DESI pre-processed CCD image, with its true spectra, from a real PSF. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fitsio.h>

#include "rng.h"
#include "../codelets/desi/fitskey.h"
#include "../codelets/desi/plan.h"
#include "../codelets/desi/psf.h"
#include "toolutil.h"

/*
 * DESIGN.  The truth is defined on the extraction's own padded wavelength
 * grid, wave[i] = wmin + (i - wavepad) dw, i = 0 .. nwave + 2 wavepad +
 * extra - 1 (wavepad bins below wmin, wavepad + extra above wmax, as
 * ../shared/science/desi-extraction.md "Decomposition"), in electrons per
 * wavelength bin, and the noiseless image is exactly the extraction's
 * forward model: model = sum over fibres f and padded bins w of
 * truth[f][w] * spot(f, wave[w]) placed at its corner (pixels off the CCD
 * dropped).  Then R * truth / dw is what an unbiased extraction's flux
 * estimates.  A fibre's spectrum depends only on (seed, fibre), so a
 * sub-range of fibres reproduces the same spectra: a continuum
 * A (1 + b1 t + b2 P2(t)) (1 + 0.2 sin(2 pi k t + phase)) with A in 50..500
 * (5..30 for sky fibres; t in -1..1 over the padded range; always > 0),
 * up to 4 Gaussian emission lines (sigma 0.8-2.5 A, peak 50-1500) on
 * targets, and 15 narrow sky lines (sigma 0.6 A, peak 200-5000, log-uniform)
 * shared by all fibres with a throughput of 0.9-1.1 per fibre.  About 10 %
 * of the fibres are OBJTYPE 'SKY'.
 *
 * Noise: Poisson on the model (exact below 20 e-, else Gaussian with
 * variance = model), plus Gaussian read noise.  IVAR = 1/(model + rdnoise^2)
 * from the noiseless model, so that pulls are unbiased (an ivar from the
 * noisy pixel would weight downward fluctuations up).  --mask-blobs paints
 * discs (radius 2-6 px) of MASK bit COSMIC (1<<4) and adds 500-5000 e- of
 * "cosmic ray" charge to IMAGE there, leaving IVAR as computed: an
 * extraction that ignored MASK would show it.  MASK is int16, RICE
 * tile-compressed by rows, as in real pre-processed images.
 *
 * The PRNG is xoshiro256** seeded by splitmix64: the same seed gives the
 * same file on every platform.  The file is written to OUT.tmp.PID and
 * renamed when complete.
 */

static const char usage_text[] =
	"usage: starpipe-desi-sim --psf PSF.fits -o IMAGE.fits [--wave WMIN,WMAX,DW]\n"
	"                         [--specmin S] [--nspec N] [-s SEED] [--rdnoise E]\n"
	"                         [--no-noise] [--mask-blobs N] [--wavepad P]\n"
	"                         [--wavepad-extra X] [--camera CAM [--psf-out FILE]]\n"
	"                         [--night NIGHT] [--expid EXPID]\n"
	"Simulates a pre-processed CCD image (HDUs IMAGE, IVAR, MASK, FIBERMAP) of\n"
	"fibres S .. S+N-1 (default 0, 500) through the GaussHermite PSF, and\n"
	"records their true spectra (TRUTH [N][nwave padded], electrons per bin;\n"
	"TRUEWAVE) on the extraction's padded grid: WMIN - P*DW .. WMAX + (P+X)*DW.\n"
	"Defaults: --wave the extraction's default grid: the camera's arm grid\n"
	"(b 3600,5800; r 5760,7620; z 7520,9824; step 0.8) within the PSF's\n"
	"domain, else the PSF's range (ceil(wmin_all),floor(wmax_all),0.8),\n"
	"--rdnoise 3.0 --wavepad 12 --wavepad-extra 50 -s 1.\n"
	"--camera CAM (b0 .. z9) names the image's camera (default: the PSF's\n"
	"CAMERA, else r0); with --psf-out, the PSF (an r camera's) is first written\n"
	"to FILE mapped to CAM's arm, its WAVEMIN/WAVEMAX moved so that DESI's\n"
	"nightly grid of the arm fits (b: shifted by -2000 A, 3543 .. 5826; z: by\n"
	"+1977 A, 7520 .. 9803, short of the z grid's 9824; r: as it is), CAMERA set\n"
	"and the mapping said\n"
	"in its header (SIMPSF*: a simulated PSF, not a measured one); the image is\n"
	"simulated through it.  --night YYYYMMDD and --expid N go into the image's\n"
	"header, as integers (DESI's NIGHT and EXPID).\n";

#define BAD_USAGE(fmt, arg) tool_bad_usage("starpipe-desi-sim", usage_text, fmt, arg)

#define MASK_COSMIC (1 << 4)
#define NSKY 15

/* Stream `stream` of seed: independent generators for each fibre and for
 * the global draws. */

static double urange(sp_rng_t *r, double lo, double hi)
{
	return lo + (hi - lo) * sp_rng_uniform(r);
}

/* Poisson deviate of mean m >= 0: exact (Knuth) below 20, else Gaussian. */
static double poisson(sp_rng_t *r, double m)
{
	if (m <= 0)
		return 0;
	if (m >= 20)
		return m + sqrt(m) * sp_rng_gaussian(r);
	double l = exp(-m), p = sp_rng_uniform(r);
	int k = 0;
	while (p > l) {
		p *= sp_rng_uniform(r);
		k++;
	}
	return k;
}

typedef struct line {
	double w, sigma, peak;
} line_t;

/* Fibre f's generator, with its first draws: sky or not, TARGETID. */
static void fibre_start(sp_rng_t *r, uint64_t seed, int f, int *sky, int64_t *targetid)
{
	sp_rng_seed(r, seed, (uint64_t)f + 1);
	*sky = sp_rng_uniform(r) < 0.1;
	*targetid = (int64_t)(39627000000000000ll + (int64_t)(sp_rng_next(r) >> 20));
}

/* The true spectrum of fibre f on wave[0..nw), electrons per bin. */
static void spectrum(uint64_t seed, int f, const double *wave, int nw, const line_t *skyl,
		     double *out)
{
	sp_rng_t r;
	int sky;
	int64_t tid;
	line_t em[4];
	int nem = 0;

	fibre_start(&r, seed, f, &sky, &tid);
	double A = sky ? urange(&r, 5, 30) : urange(&r, 50, 500);
	double b1 = urange(&r, -0.3, 0.3), b2 = urange(&r, -0.2, 0.2);
	double k = urange(&r, 0.5, 2), ph = urange(&r, 0, 6.283185307179586);
	double thr = urange(&r, 0.9, 1.1);
	double w0 = wave[0], w1 = wave[nw - 1], mid = 0.5 * (w0 + w1),
	       half = 0.5 * (w1 - w0) > 0 ? 0.5 * (w1 - w0) : 1;
	if (!sky) {
		nem = (int)(sp_rng_uniform(&r) * 5);
		for (int e = 0; e < nem; e++) {
			em[e].w = urange(&r, w0, w1);
			em[e].sigma = urange(&r, 0.8, 2.5);
			em[e].peak = urange(&r, 50, 1500);
		}
	}
	for (int i = 0; i < nw; i++) {
		double t = (wave[i] - mid) / half, v;
		v = A * (1 + b1 * t + b2 * (1.5 * t * t - 0.5)) *
		    (1 + 0.2 * sin(6.283185307179586 * k * t + ph));
		for (int e = 0; e < nem; e++) {
			double z = (wave[i] - em[e].w) / em[e].sigma;
			if (fabs(z) < 8)
				v += em[e].peak * exp(-0.5 * z * z);
		}
		for (int e = 0; e < NSKY; e++) {
			double z = (wave[i] - skyl[e].w) / skyl[e].sigma;
			if (fabs(z) < 8)
				v += thr * skyl[e].peak * exp(-0.5 * z * z);
		}
		out[i] = v > 0 ? v : 0;
	}
}

/* The first CAMERA keyword in any HDU of the PSF file, else "r0".  Opened
 * and parsed as the readers do (codelets/desi/fitskey.h). */
static void psf_camera(const char *path, char *cam, size_t size)
{
	fitsfile *f;
	int status = 0, nhdu = 0;
	char v[FLEN_VALUE], hdu[16];
	sp_err_t err;

	snprintf(cam, size, "r0");
	if (desi_fits_open(path, &f, &err) != 0)
		return;
	fits_get_num_hdus(f, &nhdu, &status);
	for (int h = 1; h <= nhdu; h++) {
		status = 0;
		snprintf(hdu, sizeof hdu, "HDU %d", h);
		if (fits_movabs_hdu(f, h, NULL, &status) == 0 &&
		    desi_fitskey_str(f, path, hdu, "CAMERA", v, sizeof v, "", &err) == 0 &&
		    v[0] != '\0') {
			/* specex writes CAMERA = '''r0      ''': strip quotes too */
			char *b = v, *e = v + strlen(v);
			while (*b == '\'' || *b == ' ')
				b++;
			while (e > b && (e[-1] == '\'' || e[-1] == ' '))
				e--;
			if (e > b)
				snprintf(cam, size, "%.*s", (int)(e - b), b);
			break;
		}
	}
	desi_fits_close(&f);
}

/* The r PSF `in` mapped to camera cam's arm into `out` (see the usage):
 * every HDU's WAVEMIN/WAVEMAX sent to the arm's range, CAMERA set, the
 * mapping in SIMPSF* keys.  Written to OUT.tmp.PID and renamed.  0 or 1
 * (said). */
static int map_psf(const char *in, const char *out, const char *cam)
{
	fitsfile *fi = NULL, *fo = NULL;
	int status = 0, nhdu = 0;
	char tmp[4096], outname[4200];
	double lo = 0; /* the arm's shift */
	if (cam[0] == 'b') {
		lo = -2000; /* a shift */
	} else if (cam[0] == 'z') {
		lo = 1977; /* a shift: 7520 .. 9803 A */
	}
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
	snprintf(outname, sizeof outname, "!%s", tmp);
	fits_open_file(&fi, in, READONLY, &status);
	fits_create_file(&fo, outname, &status);
	fits_copy_file(fi, fo, 1, 1, 1, &status);
	fits_get_num_hdus(fo, &nhdu, &status);
	double w0 = 0, w1 = 0;
	for (int h = 1; status == 0 && h <= nhdu; h++) {
		int ks = 0;
		double a, b;
		fits_movabs_hdu(fo, h, NULL, &status);
		fits_read_key(fo, TDOUBLE, "WAVEMIN", &a, NULL, &ks);
		fits_read_key(fo, TDOUBLE, "WAVEMAX", &b, NULL, &ks);
		if (ks != 0)
			continue;
		w0 = a;
		w1 = b;
		a += lo;
		b += lo;
		fits_update_key(fo, TDOUBLE, "WAVEMIN", &a, NULL, &status);
		fits_update_key(fo, TDOUBLE, "WAVEMAX", &b, NULL, &status);
	}
	char note[200];
	snprintf(note, sizeof note, "r PSF %.0f..%.0f A mapped to %s's arm (%s)",
		 w0, w1, cam, lo != 0 ? "shifted" : "as it is");
	fits_movabs_hdu(fo, 1, NULL, &status);
	fits_update_key(fo, TSTRING, "CAMERA", (char *)cam, "Spectrograph camera", &status);
	fits_update_key_longstr(fo, "SIMPSF", (char *)in, "starpipe-desi-sim: mapped from this PSF",
				&status);
	fits_update_key_longstr(fo, "SIMPSFMP", note, "simulated PSF, not a measured one", &status);
	if (fi != NULL) {
		int s2 = 0;
		fits_close_file(fi, &s2);
	}
	if (fo != NULL) {
		int s2 = 0;
		fits_close_file(fo, &s2);
		if (status == 0)
			status = s2;
	}
	if (status == 0 && rename(tmp, out) != 0)
		status = FILE_NOT_CREATED;
	if (status != 0) {
		char msg[FLEN_STATUS];
		fits_get_errstatus(status, msg);
		fprintf(stderr, "starpipe-desi-sim: %s: cannot write the mapped PSF from %s: %s\n", out,
			in, msg);
		remove(tmp);
		return 1;
	}
	return 0;
}

typedef struct sim {
	const char *psf_path, *out, *cam_opt, *psf_out;
	long night, expid; /* -1: none */
	double wmin, wmax, dw, rdnoise;
	int specmin, nspec, noise, nblobs, wavepad, extra;
	uint64_t seed;
	char camera[FLEN_VALUE];
	desi_psf_t *psf;
	int ny, nx, nwave, npad;
	double *wave;    /* [npad] */
	double *truth;   /* [nspec][npad] */
	double *model;   /* [ny][nx] */
	float *image;    /* [ny][nx] */
	int16_t *mask;   /* [ny][nx] */
} sim_t;

/* Truth and noiseless model, a fibre at a time (spots of one fibre over the
 * padded grid: a few MB). */
static int build_model(sim_t *s)
{
	int np = desi_psf_nparams(s->psf), sy = 2 * s->psf->hsizey + 1,
	    sx = 2 * s->psf->hsizex + 1;
	desi_spot_shape_t shape = { s->psf->hsizex, s->psf->hsizey, s->psf->ghdegx,
				    s->psf->ghdegy };
	double *params = malloc((size_t)s->npad * np * sizeof *params);
	double *spots = malloc((size_t)s->npad * sy * sx * sizeof *spots);
	int32_t *xc = malloc((size_t)s->npad * sizeof *xc), *yc = malloc((size_t)s->npad * sizeof *yc);
	line_t skyl[NSKY];
	sp_rng_t g;

	if (params == NULL || spots == NULL || xc == NULL || yc == NULL) {
		free(params);
		free(spots);
		free(xc);
		free(yc);
		return -1;
	}
	sp_rng_seed(&g, s->seed, 0);
	for (int e = 0; e < NSKY; e++) {
		skyl[e].w = urange(&g, s->wave[0], s->wave[s->npad - 1]);
		skyl[e].sigma = 0.6;
		skyl[e].peak = 200 * exp(sp_rng_uniform(&g) * log(25.0));
	}
	for (int k = 0; k < s->nspec; k++) {
		int f = s->specmin + k;
		double *tr = s->truth + (size_t)k * s->npad;
		spectrum(s->seed, f, s->wave, s->npad, skyl, tr);
		desi_psf_params(s->psf, f, 1, s->wave, s->npad, params);
		desi_spots_cpu(params, (size_t)s->npad, shape, spots, xc, yc);
		for (int w = 0; w < s->npad; w++) {
			const double *sp = spots + (size_t)w * sy * sx;
			double t = tr[w];
			for (int iy = 0; iy < sy; iy++) {
				int64_t row = (int64_t)yc[w] + iy;
				if (row < 0 || row >= s->ny)
					continue;
				double *m = s->model + (size_t)row * s->nx;
				for (int ix = 0; ix < sx; ix++) {
					int64_t col = (int64_t)xc[w] + ix;
					if (col >= 0 && col < s->nx)
						m[col] += t * sp[iy * sx + ix];
				}
			}
		}
		if ((k + 1) % 50 == 0 || k + 1 == s->nspec)
			fprintf(stderr, "starpipe-desi-sim: %d/%d fibres\n", k + 1, s->nspec);
	}
	free(params);
	free(spots);
	free(xc);
	free(yc);
	return 0;
}

/* Noisy image and the cosmic-ray blobs. */
static void add_noise(sim_t *s)
{
	sp_rng_t g;
	size_t n = (size_t)s->ny * s->nx;

	sp_rng_seed(&g, s->seed, UINT64_C(0x6e6f697365)); /* "noise" */
	for (size_t e = 0; e < n; e++) {
		double m = s->model[e];
		s->image[e] = (float)(s->noise ? poisson(&g, m) + s->rdnoise * sp_rng_gaussian(&g) : m);
	}
	memset(s->mask, 0, n * sizeof *s->mask);
	sp_rng_seed(&g, s->seed, UINT64_C(0x626c6f62)); /* "blob": same with --no-noise */
	for (int b = 0; b < s->nblobs; b++) {
		double cy = urange(&g, 0, s->ny), cx = urange(&g, 0, s->nx);
		double r = urange(&g, 2, 6), q = urange(&g, 500, 5000);
		for (int y = (int)floor(cy - r); y <= (int)ceil(cy + r); y++)
			for (int x = (int)floor(cx - r); x <= (int)ceil(cx + r); x++) {
				double dy = y + 0.5 - cy, dx = x + 0.5 - cx;
				if (y < 0 || y >= s->ny || x < 0 || x >= s->nx ||
				    dx * dx + dy * dy > r * r)
					continue;
				size_t e = (size_t)y * s->nx + x;
				s->mask[e] |= MASK_COSMIC;
				s->image[e] += (float)q;
			}
	}
}

static int write_fibermap(sim_t *s, fitsfile *f, int *status)
{
	char *ttype[] = { "FIBER", "TARGETID", "OBJTYPE" };
	char *tform[] = { "J", "K", "3A" };
	int nf = s->psf->nfib, petal = 0;

	if (s->camera[0] != '\0' && s->camera[1] >= '0' && s->camera[1] <= '9')
		petal = s->camera[1] - '0';
	if (fits_create_tbl(f, BINARY_TBL, nf, 3, ttype, tform, NULL, "FIBERMAP", status) != 0)
		return *status;
	for (int i = 0; i < nf && *status == 0; i++) {
		sp_rng_t r;
		int sky, fiber = petal * 500 + i;
		int64_t tid;
		char obj[4], *objp = obj;
		LONGLONG tidl;
		fibre_start(&r, s->seed, i, &sky, &tid);
		tidl = tid;
		snprintf(obj, sizeof obj, "%s", sky ? "SKY" : "TGT");
		fits_write_col(f, TINT, 1, i + 1, 1, 1, &fiber, status);
		fits_write_col(f, TLONGLONG, 2, i + 1, 1, 1, &tidl, status);
		fits_write_col(f, TSTRING, 3, i + 1, 1, 1, &objp, status);
	}
	return *status;
}

/* Writes all HDUs into f; returns the CFITSIO status. */
static int write_all(sim_t *s, fitsfile *f)
{
	int status = 0;
	long n2[2] = { s->nx, s->ny }, fp[2] = { 1, 1 };
	LONGLONG n = (LONGLONG)s->ny * s->nx;
	size_t rows = 64, cnt = rows * (size_t)s->nx;
	float *buf = malloc(cnt * sizeof *buf);
	long long seed = (long long)s->seed;

	if (buf == NULL)
		return MEMORY_ALLOCATION;
	fits_create_img(f, FLOAT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "IMAGE", NULL, &status);
	fits_update_key(f, TSTRING, "BUNIT", "electron", NULL, &status);
	fits_update_key(f, TSTRING, "CAMERA", s->camera, "Spectrograph camera", &status);
	/* integers, as DESI's raw data and preproc headers have them */
	if (s->night >= 0)
		fits_update_key(f, TLONG, "NIGHT", &s->night, "Night of the exposure", &status);
	if (s->expid >= 0)
		fits_update_key(f, TLONG, "EXPID", &s->expid, "Exposure number", &status);
	fits_update_key(f, TDOUBLE, "RDNOISE", &s->rdnoise, "Read noise [electron]", &status);
	fits_update_key(f, TLONGLONG, "SIMSEED", &seed, "starpipe-desi-sim seed", &status);
	fits_update_key(f, TLOGICAL, "SIMNOISE", &s->noise, "Noise added", &status);
	fits_update_key_longstr(f, "SIMPSF", (char *)s->psf_path, "PSF of the simulation",
				&status);
	fits_write_pix(f, TFLOAT, fp, n, s->image, &status);

	fits_create_img(f, FLOAT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "IVAR", NULL, &status);
	fits_update_key(f, TSTRING, "BUNIT", "electron**-2", NULL, &status);
	double rd2 = s->rdnoise * s->rdnoise;
	for (LONGLONG e0 = 0; e0 < n && status == 0; e0 += (LONGLONG)cnt) {
		LONGLONG m = n - e0 < (LONGLONG)cnt ? n - e0 : (LONGLONG)cnt;
		for (LONGLONG e = 0; e < m; e++) {
			double v = s->model[e0 + e] + rd2;
			buf[e] = v > 0 ? (float)(1.0 / v) : 0.0f;
		}
		fits_write_img(f, TFLOAT, e0 + 1, m, buf, &status);
	}
	free(buf);

	fits_set_compression_type(f, RICE_1, &status);
	fits_create_img(f, SHORT_IMG, 2, n2, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "MASK", NULL, &status);
	fits_write_pix(f, TSHORT, fp, n, s->mask, &status);
	fits_set_compression_type(f, 0, &status); /* back to plain HDUs */

	write_fibermap(s, f, &status);

	long nt[2] = { s->npad, s->nspec }, nw[1] = { s->npad };
	int nwave = s->nwave;
	fits_create_img(f, DOUBLE_IMG, 2, nt, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "TRUTH", NULL, &status);
	fits_update_key(f, TSTRING, "BUNIT", "electron", "per wavelength bin", &status);
	fits_update_key(f, TDOUBLE, "WMIN", &s->wmin, "Unpadded grid start [Angstrom]", &status);
	fits_update_key(f, TDOUBLE, "WMAX", &s->wmax, "Unpadded grid end [Angstrom]", &status);
	fits_update_key(f, TDOUBLE, "DW", &s->dw, "Grid step [Angstrom]", &status);
	fits_update_key(f, TINT, "NWAVE", &nwave, "Unpadded grid size", &status);
	fits_update_key(f, TINT, "WAVEPAD", &s->wavepad, "Bins of padding each side", &status);
	fits_update_key(f, TINT, "WAVEPADX", &s->extra, "Extra bins of padding above", &status);
	fits_update_key(f, TINT, "SPECMIN", &s->specmin, "First fibre", &status);
	fits_update_key(f, TINT, "NSPEC", &s->nspec, "Number of fibres", &status);
	fits_write_pix(f, TDOUBLE, fp, (LONGLONG)s->npad * s->nspec, s->truth, &status);

	fits_create_img(f, DOUBLE_IMG, 1, nw, &status);
	fits_update_key(f, TSTRING, "EXTNAME", "TRUEWAVE", NULL, &status);
	fits_update_key(f, TSTRING, "BUNIT", "Angstrom", NULL, &status);
	fits_write_pix(f, TDOUBLE, fp, (LONGLONG)s->npad, s->wave, &status);
	return status;
}

/* Writes OUT.tmp.PID and renames it; 0 or 1 with a message. */
static int write_file(sim_t *s)
{
	char tmp[PATH_MAX], txt[FLEN_STATUS], msg[FLEN_ERRMSG] = "";
	fitsfile *f;
	int status = 0, st = 0;

	if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", s->out, (long)getpid()) >= (int)sizeof tmp) {
		fprintf(stderr, "starpipe-desi-sim: %s: path too long\n", s->out);
		return 1;
	}
	unlink(tmp);
	if (fits_create_diskfile(&f, tmp, &status) == 0) {
		status = write_all(s, f);
		if (status != 0) {
			fits_read_errmsg(msg);
			fits_delete_file(f, &st);
		} else if (fits_close_file(f, &status) != 0) {
			fits_read_errmsg(msg);
		}
	} else {
		fits_read_errmsg(msg);
	}
	if (status == 0 && rename(tmp, s->out) != 0) {
		fprintf(stderr, "starpipe-desi-sim: %s: cannot rename %s: %s\n", s->out, tmp,
			strerror(errno));
		unlink(tmp);
		return 1;
	}
	if (status != 0) {
		unlink(tmp);
		fits_get_errstatus(status, txt);
		fprintf(stderr, "starpipe-desi-sim: %s: cannot write: %s (%s)\n", s->out, txt, msg);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	sim_t s = { .wmin = 0, .wmax = 0, .dw = 0.8, .rdnoise = 3.0, .specmin = 0,
		    .nspec = 500, .noise = 1, .wavepad = 12, .extra = 50, .seed = 1,
		    .night = -1, .expid = -1 };
	double x;
	sp_err_t err = { 0, "" };

	for (int a = 1; a < argc; a++) {
		const char *o = argv[a];
		if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
			fputs(usage_text, stdout);
			return 0;
		}
		if (strcmp(o, "--no-noise") == 0) {
			s.noise = 0;
			continue;
		}
		if (a + 1 >= argc)
			return BAD_USAGE("unknown option or missing value: '%s'", o);
		const char *v = argv[++a];
		if (strcmp(o, "--psf") == 0) {
			s.psf_path = v;
		} else if (strcmp(o, "-o") == 0) {
			s.out = v;
		} else if (strcmp(o, "--wave") == 0) {
			char extra;
			if (sscanf(v, "%lf,%lf,%lf%c", &s.wmin, &s.wmax, &s.dw, &extra) != 3 ||
			    !isfinite(s.wmin) || !isfinite(s.wmax) || !(s.dw > 0) ||
			    !(s.wmax >= s.wmin) || (s.wmax - s.wmin) / s.dw > 1e6)
				return BAD_USAGE("--wave: '%s' is not WMIN,WMAX,DW with "
						 "WMIN <= WMAX, DW > 0", v);
		} else if (strcmp(o, "--specmin") == 0) {
			if (!tool_integer(v, 0, 100000, &s.specmin))
				return BAD_USAGE("--specmin: '%s' is not a non-negative integer", v);
		} else if (strcmp(o, "--nspec") == 0) {
			if (!tool_integer(v, 1, 100000, &s.nspec))
				return BAD_USAGE("--nspec: '%s' is not a positive integer", v);
		} else if (strcmp(o, "-s") == 0 || strcmp(o, "--seed") == 0) {
			if (!tool_number(v, 0, 9007199254740992.0, &x) || x != floor(x))
				return BAD_USAGE("-s: '%s' is not a non-negative integer", v);
			s.seed = (uint64_t)x;
		} else if (strcmp(o, "--rdnoise") == 0) {
			if (!tool_number(v, 0, 1e4, &s.rdnoise))
				return BAD_USAGE("--rdnoise: '%s' is not in 0 .. 10000 electrons",
						 v);
		} else if (strcmp(o, "--mask-blobs") == 0) {
			if (!tool_integer(v, 0, 1e7, &s.nblobs))
				return BAD_USAGE("--mask-blobs: '%s' is not a non-negative integer",
						 v);
		} else if (strcmp(o, "--wavepad") == 0) {
			if (!tool_integer(v, 0, 10000, &s.wavepad))
				return BAD_USAGE("--wavepad: '%s' is not an integer in 0 .. 10000", v);
		} else if (strcmp(o, "--camera") == 0) {
			if (strlen(v) != 2 || strchr("brz", v[0]) == NULL || v[1] < '0' || v[1] > '9')
				return BAD_USAGE("--camera: '%s' is not b0 .. b9, r0 .. r9 or z0 .. z9", v);
			s.cam_opt = v;
		} else if (strcmp(o, "--psf-out") == 0) {
			s.psf_out = v;
		} else if (strcmp(o, "--night") == 0) {
			char *end;
			errno = 0;
			s.night = strtol(v, &end, 10);
			if (errno != 0 || *end != '\0' || strlen(v) != 8 || s.night < 19000101)
				return BAD_USAGE("--night: '%s' is not a night YYYYMMDD", v);
		} else if (strcmp(o, "--expid") == 0) {
			char *end;
			errno = 0;
			s.expid = strtol(v, &end, 10);
			if (errno != 0 || *end != '\0' || end == v || s.expid < 0 || s.expid > 99999999)
				return BAD_USAGE("--expid: '%s' is not an exposure number 0 .. 99999999", v);
		} else if (strcmp(o, "--wavepad-extra") == 0) {
			if (!tool_integer(v, 0, 10000, &s.extra))
				return BAD_USAGE("--wavepad-extra: '%s' is not an integer in "
						 "0 .. 10000", v);
		} else {
			return BAD_USAGE("unknown option '%s'", o);
		}
	}
	if (s.psf_path == NULL)
		return BAD_USAGE("%s", "--psf PSF.fits is required");
	if (s.out == NULL)
		return BAD_USAGE("%s", "-o IMAGE.fits is required");
	if (s.psf_out != NULL && s.cam_opt == NULL)
		return BAD_USAGE("%s", "--psf-out goes with --camera");
	if (s.psf_out != NULL) {
		if (map_psf(s.psf_path, s.psf_out, s.cam_opt) != 0)
			return 1;
		s.psf_path = s.psf_out;
	}

	if (desi_psf_read(s.psf_path, &s.psf, &err) != 0) {
		fprintf(stderr, "starpipe-desi-sim: %s\n", err.msg);
		return 1;
	}
	if (s.specmin + s.nspec > s.psf->nfib) {
		fprintf(stderr, "starpipe-desi-sim: fibres %d .. %d: the PSF has %d fibres\n",
			s.specmin, s.specmin + s.nspec - 1, s.psf->nfib);
		desi_psf_free(&s.psf);
		return 2;
	}
	psf_camera(s.psf_path, s.camera, 16);
	if (s.cam_opt != NULL)
		snprintf(s.camera, sizeof s.camera, "%s", s.cam_opt);
	/* The grid as the extraction builds it: by default the camera's arm
	 * grid, within the PSF's range. */
	if (desi_psf_default_grid(s.psf, s.camera, s.dw, &s.wmin, &s.wmax) != 0 || !(s.wmax >= s.wmin)) {
		fprintf(stderr, "starpipe-desi-sim: %s: no wavelength range from its YTRACE; "
			"give --wave\n", s.psf_path);
		desi_psf_free(&s.psf);
		return 1;
	}
	s.nwave = desi_grid_len(s.wmin, s.wmax, s.dw);
	s.npad = s.nwave + 2 * s.wavepad + s.extra;
	s.ny = s.psf->npix_y;
	s.nx = s.psf->npix_x;
	size_t n = (size_t)s.ny * s.nx;
	s.wave = malloc((size_t)s.npad * sizeof *s.wave);
	s.truth = malloc((size_t)s.npad * s.nspec * sizeof *s.truth);
	s.model = calloc(n, sizeof *s.model);
	s.image = malloc(n * sizeof *s.image);
	s.mask = malloc(n * sizeof *s.mask);
	int rc = 1;
	if (s.wave == NULL || s.truth == NULL || s.model == NULL || s.image == NULL ||
	    s.mask == NULL) {
		fprintf(stderr, "starpipe-desi-sim: out of memory for a %d x %d image\n", s.ny,
			s.nx);
		goto out;
	}
	for (int i = 0; i < s.npad; i++)
		s.wave[i] = s.wmin + (i - s.wavepad) * s.dw;
	if (build_model(&s) != 0) {
		fprintf(stderr, "starpipe-desi-sim: out of memory for the spots\n");
		goto out;
	}
	add_noise(&s);
	rc = write_file(&s);
out:
	free(s.wave);
	free(s.truth);
	free(s.model);
	free(s.image);
	free(s.mask);
	desi_psf_free(&s.psf);
	return rc;
}
