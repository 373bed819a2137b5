/* APPLE-Picker CPU kernels: parameters, preprocessing and window moments.
 * The score is in apple_score.c, the SVM in apple_svm.c, morphology and
 * picking in apple_morph.c (doc/apple.md). */
#include "apple.h"
#include "apple_kern.h"
#include "apple_score_isa.h"
#include "cancel.h"
#include "cpuisa.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * DESIGN.  Each step reproduces ASPIRE's arithmetic where the result is a
 * discrete decision downstream (Pillow's resampling coefficients and
 * accumulation order, the low-pass kernel's normalisation, argmax/argmin
 * tie order, libsvm's decision sum), and is free elsewhere: window sums are
 * direct separable sums (the reference's FFT box filter carries ~1e-13
 * relative noise that only moves decision values by as much), erosions by
 * disks are thresholds of one exact squared distance transform (a disk of
 * radius r fits at p iff no 0 pixel, the outside counting as 0, lies within
 * r), and labelling is a two-pass union-find whose roots are the smallest
 * pixel index, so labels come out in SciPy's raster order.
 */

/* The per-pixel and per-pair loops (the low-pass correlation, the
 * window sums, the score's conjugate product and maxima), compiled for the
 * build's target and for AVX2 in files of their own (apple_score_isa.h),
 * chosen at run time (src/base/cpuisa.h); the variants compute the same
 * bits. */
static const apple_score_simd_t *const score_simd[SP_ISA_COUNT] = {
	[SP_ISA_BASELINE] = &apple_score_simd_tab_base,
#if SP_HAVE_AVX2_VARIANT
	[SP_ISA_AVX2] = &apple_score_simd_tab_avx2,
#endif
};

const apple_score_simd_t *apple_score_simd(int isa)
{
	if (isa < 0 || isa >= SP_ISA_COUNT || !sp_isa_supported(isa) ||
	    score_simd[isa] == NULL)
		return NULL;
	return score_simd[isa];
}

/* ---- parameters -------------------------------------------------------- */

void apple_params_defaults(apple_params_t *p)
{
	int ps = p->particle_size;

	if (p->max_particle_size <= 0)
		p->max_particle_size = 2 * ps;
	if (p->min_particle_size <= 0)
		p->min_particle_size = ps / 4;
	if (p->minimum_overlap_amount <= 0)
		p->minimum_overlap_amount = ps / 10;
	if (p->query_image_size <= 0) {
		/* np.round: half to even, as rint() in the default rounding mode */
		int q = (int)rint(ps * 2.0 / 3.0);
		p->query_image_size = q - q % 4;
	}
	if (p->container_size <= 0)
		p->container_size = 450;
	if (p->margin_left <= 0)
		p->margin_left = 99;
	if (p->margin_right <= 0)
		p->margin_right = 100;
	if (p->margin_top <= 0)
		p->margin_top = 99;
	if (p->margin_bottom <= 0)
		p->margin_bottom = 100;
}

int apple_params_derive(const apple_params_t *p, int ny, int nx, apple_sizes_t *s, sp_err_t *err)
{
	int ps = p->particle_size, qi = p->query_image_size;

	memset(s, 0, sizeof *s);
	if (ps < 5 || ps >= 3000)
		return sp_seterr(err, SP_EINVAL, "%s: particle_size %d must be in [5, 3000)",
				 __func__, ps);
	if (p->max_particle_size < 1 || p->max_particle_size > 3000)
		return sp_seterr(err, SP_EINVAL, "%s: max_particle_size %d must be in [1, 3000]",
				 __func__, p->max_particle_size);
	if (p->min_particle_size < 1 || p->min_particle_size >= 3000)
		return sp_seterr(err, SP_EINVAL, "%s: min_particle_size %d must be in [1, 3000)",
				 __func__, p->min_particle_size);
	if (qi < 4 || qi > ps)
		return sp_seterr(err, SP_EINVAL,
				 "%s: query_image_size %d must be in [4, particle_size %d]", __func__,
				 qi, ps);
	if (p->minimum_overlap_amount < 0 || p->minimum_overlap_amount > 3000)
		return sp_seterr(err, SP_EINVAL, "%s: minimum_overlap_amount %d must be in [0, 3000]",
				 __func__, p->minimum_overlap_amount);
	if (p->container_size < ps || p->container_size > 1900)
		return sp_seterr(err, SP_EINVAL, "%s: container_size %d must be in [%d, 1900]",
				 __func__, p->container_size, ps);

	s->particle = ps / 2;
	s->max_size = p->max_particle_size / 2;
	s->min_size = p->min_particle_size / 2;
	s->query = qi / 2;
	s->query -= s->query % 2;
	s->moa = p->minimum_overlap_amount / 2;
	s->container = p->container_size / 2;

	/* the whole rectangle inside the margins (ASPIRE crops it to a square) */
	s->sidey = ny - p->margin_top - p->margin_bottom;
	s->sidex = nx - p->margin_left - p->margin_right;
	s->ny = s->sidey / 2;
	s->nx = s->sidex / 2;
	int nmin = s->ny < s->nx ? s->ny : s->nx;
	if (s->sidey < 2 || s->sidex < 2 || nmin < 2 * s->container || nmin < 2 * s->query + 2 ||
	    nmin < s->max_size)
		return sp_seterr(err, SP_EINVAL,
				 "%s: micrograph %d x %d too small for particle_size %d (binned %d x %d, "
				 "container %d)",
				 __func__, ny, nx, ps, s->ny > 0 ? s->ny : 0, s->nx > 0 ? s->nx : 0,
				 s->container);
	if ((long long)s->ny * s->nx > 0x7fffffffLL / 4)
		return sp_seterr(err, SP_EINVAL, "%s: micrograph %d x %d too large", __func__, ny, nx);
	s->nwy = s->ny - s->query + 1;
	s->nwx = s->nx - s->query + 1;
	s->gy = 2 * s->ny / s->query - 1;
	s->gx = 2 * s->nx / s->query - 1;
	s->ncy = s->ny / s->container;
	s->ncx = s->nx / s->container;
	s->nref = 4 * s->ncy * s->ncx;
	/* the response cube, a value per (query window, reference): bounded
	 * (APPLE_MAX_CORRELATIONS) before any int product of the two */
	const double ncorr = (double)s->gy * (double)s->gx * (double)s->nref;
	if (ncorr > APPLE_MAX_CORRELATIONS)
		return sp_seterr(err, SP_EINVAL,
				 "%s: query_image_size %d and container_size %d make %d x %d query "
				 "windows x %d references = %.4g correlations (at most %.4g: %d MiB of "
				 "responses; raise query_image_size or container_size)",
				 __func__, qi, p->container_size, s->gy, s->gx, s->nref, ncorr,
				 (double)APPLE_MAX_CORRELATIONS,
				 (int)(APPLE_MAX_CORRELATIONS * sizeof(double) >> 20));

	double qbox = 4000.0 * 4000.0 / ((double)qi * qi) * 4.0;
	int nq = s->gy * s->gx;
	int t1 = p->tau1 > 0 ? p->tau1 : (int)(qbox * 0.03);
	int t2 = p->tau2 > 0 ? p->tau2 : (int)(qbox * 0.3);
	if (p->tau2 <= 0 && t2 > nq) {
		/* the reference would crash: scale the defaults to this image */
		if (p->tau1 <= 0)
			t1 = 3 * nq / 100;
		t2 = 30 * nq / 100;
	}
	if (t1 < 0 || t2 < t1 || t2 > nq)
		return sp_seterr(err, SP_EINVAL, "%s: need 0 <= tau1 (%d) <= tau2 (%d) <= %d query windows",
				 __func__, t1, t2, nq);
	s->tau1 = t1;
	s->tau2 = t2;
	return 0;
}

/* ---- step 1: preprocess ------------------------------------------------ */

/* Pillow's precompute_coeffs() (Resample.c) for BICUBIC (a = -0.5), box
 * [0, insize): the CUDA coefficient kernel's body, one output at a time
 * (the result is checked against ASPIRE's preprocessed image). */
static int resample_coeffs(int insize, int outsize, int32_t *bounds, double *kk)
{
	int ksize = apk_resample_ksize(insize, outsize);
	for (int xx = 0; xx < outsize; xx++)
		apk_resample_coeffs(xx, insize, outsize, ksize, bounds, kk);
	return ksize;
}

size_t apple_preprocess_work_size(const apple_params_t *p, const apple_sizes_t *s)
{
	(void)p;
	size_t sy = (size_t)s->sidey, ny = (size_t)s->ny, nx = (size_t)s->nx;
	/* float tmp [sidey][nx] (as doubles) + the resized image [ny][nx]
	 * (float values, held as doubles for the low-pass's vector loads) +
	 * the two axes' coefficients and bounds */
	return (sy * nx + 1) / 2 + ny * nx + 2 + (size_t)apk_resample_ksize(s->sidex, s->nx) * nx +
	       nx + (size_t)apk_resample_ksize(s->sidey, s->ny) * ny + ny + 4;
}

/* NumPy's pairwise summation (pairwise_sum in loops_utils.h), unit stride. */
static double np_pairwise_sum(const double *a, size_t n)
{
	if (n < 8) {
		double res = 0.;
		for (size_t i = 0; i < n; i++)
			res += a[i];
		return res;
	}
	if (n <= 128) {
		double r[8], res;
		size_t i;
		for (i = 0; i < 8; i++)
			r[i] = a[i];
		for (i = 8; i < n - (n % 8); i += 8)
			for (int j = 0; j < 8; j++)
				r[j] += a[i + j];
		res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
		for (; i < n; i++)
			res += a[i];
		return res;
	}
	size_t n2 = n / 2;
	n2 -= n2 % 8;
	return np_pairwise_sum(a, n2) + np_pairwise_sum(a + n2, n - n2);
}

void apple_lowpass_kernel(double k[15 * 15])
{
	const double sigma = 0.5;

	for (int y = -7; y <= 7; y++)
		for (int x = -7; x <= 7; x++) {
			double v = exp(-(double)(x * x) - (double)(y * y) / (2 * (sigma * sigma))) /
				   (sqrt(2 * M_PI) * sigma);
			k[(y + 7) * 15 + x + 7] = v < DBL_EPSILON ? 0.0 : v;
		}
	double sum = np_pairwise_sum(k, 225);
	for (int i = 0; i < 225; i++)
		k[i] /= sum;
}

void apple_preprocess(const apple_params_t *p, const apple_sizes_t *s, const float *micrograph,
		      int ny, int nx, double *im, float *out32, double *work)
{
	const int sidey = s->sidey, sidex = s->sidex, n_y = s->ny, n_x = s->nx;
	float *tmp = (float *)work;                       /* [sidey][n_x] */
	/* [n_y][n_x]: float32 values (Pillow's), held as doubles */
	double *res = work + ((size_t)sidey * n_x + 1) / 2;
	double *kkx = res + (size_t)n_y * n_x + 1;
	int32_t *bx = (int32_t *)(kkx + (size_t)apk_resample_ksize(sidex, n_x) * n_x);
	double *kky = kkx + (size_t)apk_resample_ksize(sidex, n_x) * n_x + n_x + 2;
	int32_t *by = (int32_t *)(kky + (size_t)apk_resample_ksize(sidey, n_y) * n_y);
	const float *src = micrograph + (size_t)p->margin_top * nx + p->margin_left;

	(void)ny;
	/* horizontal pass: every row inside the margins, columns sidex -> n_x */
	int kx = resample_coeffs(sidex, n_x, bx, kkx);
	for (int y = 0; y < sidey; y++) {
		const float *row = src + (size_t)y * nx;
		for (int xx = 0; xx < n_x; xx++) {
			const double *k = kkx + (size_t)xx * kx;
			int xmin = bx[2 * xx], xmax = bx[2 * xx + 1];
			double ss = 0.0;
			for (int x = 0; x < xmax; x++)
				ss += row[x + xmin] * k[x];
			tmp[(size_t)y * n_x + xx] = (float)ss;
		}
	}
	/* vertical pass: rows sidey -> n_y (a square's two axes share their
	 * coefficients, as Pillow's) */
	int ky = resample_coeffs(sidey, n_y, by, kky);
	for (int yy = 0; yy < n_y; yy++) {
		const double *k = kky + (size_t)yy * ky;
		int ymin = by[2 * yy], ymax = by[2 * yy + 1];
		for (int xx = 0; xx < n_x; xx++) {
			double ss = 0.0;
			for (int y = 0; y < ymax; y++)
				ss += tmp[(size_t)(y + ymin) * n_x + xx] * k[y];
			res[(size_t)yy * n_x + xx] = (float)ss; /* rounded to float32 */
		}
	}

	/* "same" correlation with the 15 x 15 low-pass kernel, zero outside */
	double kern[225];
	int ku[225], kv[225], nk = 0;
	double kval[225];
	apple_lowpass_kernel(kern);
	for (int u = 0; u < 15; u++)
		for (int v = 0; v < 15; v++)
			if (kern[u * 15 + v] != 0.0) {
				ku[nk] = u - 7;
				kv[nk] = v - 7;
				kval[nk++] = kern[u * 15 + v];
			}
	const apple_score_simd_t *v = apple_score_simd(sp_cpu_isa());
	for (int i = 0; i < n_y; i++)
		for (int j = 0; j < n_x; j++) {
			double acc = 0.0;
			if (i >= 7 && i < n_y - 7 && j >= 7 && j < n_x - 7) {
				/* the row's interior at once, in SIMD lanes */
				v->lowpass_row(res, n_x, i, j, n_x - 7, nk, ku, kv, kval, im, out32);
				j = n_x - 8;
				continue;
			} else {
				for (int t = 0; t < nk; t++) {
					int y = i + ku[t], x = j + kv[t];
					if (y >= 0 && y < n_y && x >= 0 && x < n_x)
						acc += kval[t] * res[(size_t)y * n_x + x];
				}
			}
			im[(size_t)i * n_x + j] = acc;
			if (out32 != NULL)
				out32[(size_t)i * n_x + j] = (float)acc;
		}
}

/* ---- step 2: moments --------------------------------------------------- */

void apple_moments(const double *im, int ny, int nx, int q, double *mean, double *std,
		   double *work)
{
	const int nw = nx - q + 1, nwy = ny - q + 1;
	double *rs = work, *rs2 = work + (size_t)ny * nw; /* [ny][nw] row sums of x, x^2 */
	const double inv = 1.0 / ((double)q * q);

	const apple_score_simd_t *v = apple_score_simd(sp_cpu_isa());
	for (int i = 0; i < ny; i++)
		v->window_sums(im + (size_t)i * nx, nw, q, rs + (size_t)i * nw, rs2 + (size_t)i * nw);
	for (int r = 0; r < nwy; r++)
		v->window_cols(rs, rs2, nw, r, q, inv, mean + (size_t)r * nw, std + (size_t)r * nw);
}

