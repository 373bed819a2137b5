/* APPLE-Picker CPU kernels: parameters, preprocessing, moments, FFT query score, SVM, morphology, picking. */
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

#include <fftw3.h>
#include <libsvm/svm.h>

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
 *
 * One q x q inverse per (query, reference) pair is most of the score's
 * time.  Where apple_score_lane_m(q) gives q = P m with P = 2, 4, 8 or 16
 * and m odd (every even q from 6 to 56 but 8, 16, 32, 50, 54, and 58 and
 * 62, where FFTW runs Rader's algorithm; q = 26 for
 * ASPIRE's default particle size 78) it runs as hand-written DFTs in SIMD
 * lanes, one reference per lane (apple_score_simd.h: Good-Thomas indexing,
 * so no twiddle factors between P and m; the odd-length DFTs pair their
 * inputs j, m - j; the product, the Hermitian rows and the maximum fused
 * in): at q = 26, 0.53 us per pair instead of 1.14 with FFTW's AVX codelets (Debian's FFTW has AVX but
 * no FMA or AVX2 codelets, and its 26-point DFT is 2 x 13 with twiddles),
 * a 4k micrograph's score tasks 6.4 -> 3.0 core-s.  The lanes route
 * differs from FFTW's by rounding (~3e-15 of the largest response,
 * test_score_variants, against FFTW's 2-D c2r).
 *
 * Other q take FFTW's route.  Its transforms are FFTW_ESTIMATE plans: the
 * same algorithm, hence the same bits, on every run and machine
 * (FFTW_MEASURE chooses by timing).  The inverse runs as two FFTW passes: the column DFTs out of place into a
 * second buffer (FFTW's 2-D plan buffers and copies the strided columns,
 * `fftw_cpy2d`), then the rows.  Two references' responses to one query
 * share the row pass: their rows, packed as one complex row Z = Y1 + i Y2
 * (both real after the inverse), go through one complex DFT each, which
 * costs about what one product's c2r rows did (FFTW's c2r row codelets are
 * scalar; its complex ones are AVX).  One 26 x 26 inverse took 1.63 us as
 * a 2-D plan, 1.32 us as two passes; with the shared rows a 4k
 * micrograph's score tasks take 1.14 us per pair, all included, against
 * 1.55 us before (doc/profiling.md).
 * The packed responses differ from a c2r's by rounding (~1e-16 relative,
 * test_score_variants); an odd last reference goes alone through the c2r.
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
	const apple_score_simd_t *v = score_simd[sp_cpu_isa()];
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

	const apple_score_simd_t *v = score_simd[sp_cpu_isa()];
	for (int i = 0; i < ny; i++)
		v->window_sums(im + (size_t)i * nx, nw, q, rs + (size_t)i * nw, rs2 + (size_t)i * nw);
	for (int r = 0; r < nwy; r++)
		v->window_cols(rs, rs2, nw, r, q, inv, mean + (size_t)r * nw, std + (size_t)r * nw);
}

/* ---- step 3: query score ----------------------------------------------- */

void apple_refs_select(const apple_sizes_t *s, const double *mean, const double *std,
		       int32_t *ref)
{
	const int q = s->query, cs = s->container, nw = s->nwx;
	int k = 0;

	for (int yc = 0; yc < s->ncy; yc++)
		for (int xc = 0; xc < s->ncx; xc++) {
			/* ASPIRE's range over its padded moments, shifted to top-left indexing */
			int r0, r1, c0, c1;
			apk_container_range(s->ny, s->nx, q, cs, yc, xc, &r0, &r1, &c0, &c1);
			int best[4][2];
			double val[4];
			for (int t = 0; t < 4; t++) {
				best[t][0] = r0;
				best[t][1] = c0;
				val[t] = NAN;
			}
			for (int r = r0; r < r1; r++)
				for (int c = c0; c < c1; c++) {
					double m = mean[(size_t)r * nw + c], sd = std[(size_t)r * nw + c];
					int first = r == r0 && c == c0;
					if (first || m > val[0]) {
						val[0] = m;
						best[0][0] = r;
						best[0][1] = c;
					}
					if (first || m < val[1]) {
						val[1] = m;
						best[1][0] = r;
						best[1][1] = c;
					}
					if (first || sd > val[2]) {
						val[2] = sd;
						best[2][0] = r;
						best[2][1] = c;
					}
					if (first || sd < val[3]) {
						val[3] = sd;
						best[3][0] = r;
						best[3][1] = c;
					}
				}
			for (int t = 0; t < 4; t++, k++) {
				ref[2 * k] = best[t][0];
				ref[2 * k + 1] = best[t][1];
			}
		}
}

/* Queries whose spectra apple_score_responses() holds at once: it runs
 * every reference against a block of them, so that the references'
 * spectra (nref q (q/2 + 1) complex values: 1.5 MB for a 4k micrograph's
 * 256 references, more than a core's L2) are read once per block instead
 * of once per query.  32 spectra of a 26 x 26 window are 186 kB. */
#define APPLE_QBLOCK 32

struct apple_score_fft {
	int q, nh;            /* q, q/2 + 1 */
	double *real;         /* [q][q] */
	fftw_complex *spec;   /* [2][q][nh] one or two products R conj(W) */
	fftw_complex *cols;   /* [2][q][nh] spec after the inverse's column pass */
	fftw_complex *z;      /* [q][q] two products' rows packed as one complex row */
	fftw_complex *zout;   /* [q][q] their inverse: real part, imaginary part */
	fftw_complex *wspec;  /* [APPLE_QBLOCK][q][nh] a block of queries' spectra */
	fftw_plan fwd;        /* real -> spec, r2c */
	fftw_plan inv_cols;   /* spec -> cols, the nh column DFTs (backward) */
	fftw_plan inv_rows;   /* cols -> real, the q row c2r's */
	fftw_plan inv_cols2;  /* the column DFTs of two products at once */
	fftw_plan inv_rowsz;  /* z -> zout, q complex row DFTs (backward) */
	/* the lanes route (apple_score_lane_m(q), else lm = 0) */
	int lm, lanes;        /* lanes: the route is on */
	double tab[APPLE_LANE_TAB]; /* apple_score_lane_tab(lm) */
	double *rl;           /* [ngroups][2][ns][width] the references in lanes */
	size_t rl_cap;        /* doubles allocated at rl */
	double *wl;           /* [APPLE_QBLOCK][2][ns] queries' spectra, re then im */
	double *y;            /* [2][ns][4] the column pass's output */
};

size_t apple_score_spec_size(int q)
{
	return (size_t)q * (size_t)(q / 2 + 1);
}

apple_score_fft_t *apple_score_fft_init(int q)
{
	apple_score_fft_t *f = calloc(1, sizeof *f);
	size_t ns = apple_score_spec_size(q);

	if (f == NULL)
		return NULL;
	f->q = q;
	f->nh = q / 2 + 1;
	f->real = fftw_malloc(sizeof(double) * (size_t)q * q);
	f->spec = fftw_malloc(sizeof(fftw_complex) * ns * 2);
	f->cols = fftw_malloc(sizeof(fftw_complex) * ns * 2);
	f->z = fftw_malloc(sizeof(fftw_complex) * (size_t)q * q);
	f->zout = fftw_malloc(sizeof(fftw_complex) * (size_t)q * q);
	f->wspec = fftw_malloc(sizeof(fftw_complex) * ns * APPLE_QBLOCK);
	f->wl = fftw_malloc(sizeof(double) * 2 * ns * APPLE_QBLOCK);
	f->y = fftw_malloc(sizeof(double) * 2 * ns * 4);
	if (f->real == NULL || f->spec == NULL || f->cols == NULL || f->z == NULL ||
	    f->zout == NULL || f->wspec == NULL || f->wl == NULL || f->y == NULL) {
		apple_score_fft_free(&f);
		return NULL;
	}
	f->fwd = fftw_plan_dft_r2c_2d(q, q, f->real, f->spec, FFTW_ESTIMATE);
	/* the 2-D c2r in two passes (DESIGN): nh columns of length q at stride
	 * nh, then q rows of nh complex -> q real */
	int n[1] = { q };
	f->inv_cols = fftw_plan_many_dft(1, n, f->nh, f->spec, NULL, f->nh, 1, f->cols, NULL,
					 f->nh, 1, FFTW_BACKWARD, FFTW_ESTIMATE);
	f->inv_rows = fftw_plan_many_dft_c2r(1, n, q, f->cols, NULL, 1, f->nh, f->real, NULL, 1,
					     q, FFTW_ESTIMATE | FFTW_DESTROY_INPUT);
	/* two products: the same column DFTs over [2][q][nh]; then their rows
	 * packed as one complex row each (apple_score_responses()) */
	fftw_iodim col = { q, f->nh, f->nh };
	fftw_iodim two[2] = { { 2, (int)ns, (int)ns }, { f->nh, 1, 1 } };
	f->inv_cols2 = fftw_plan_guru_dft(1, &col, 2, two, f->spec, f->cols, FFTW_BACKWARD,
					  FFTW_ESTIMATE);
	f->inv_rowsz = fftw_plan_many_dft(1, n, q, f->z, NULL, 1, q, f->zout, NULL, 1, q,
					  FFTW_BACKWARD, FFTW_ESTIMATE);
	if (f->fwd == NULL || f->inv_cols == NULL || f->inv_rows == NULL || f->inv_cols2 == NULL ||
	    f->inv_rowsz == NULL) {
		apple_score_fft_free(&f);
		return NULL;
	}
	f->lm = apple_score_lane_m(q);
	if (f->lm > 0)
		apple_score_lane_tab(f->lm, f->tab);
	apple_score_fft_set_lanes(f, !apple_score_library_route());
	return f;
}

_Static_assert(APK_TAB_H == APPLE_LANE_H, "apple_kern.h reads apple_score_lane_tab()'s layout");

int apple_score_library_route(void)
{
	const char *route = getenv("STARPIPE_APPLE_SCORE");
	return route != NULL && strcmp(route, "fftw") == 0;
}

int apple_score_lane_m(int q)
{
	switch (q) {
#define AS_ROUTE_M(P, M) \
	case (P) * (M):  \
		return (M);
		AS_LANE_ROUTES(AS_ROUTE_M)
#undef AS_ROUTE_M
	default:
		return 0;
	}
}

void apple_score_lane_tab(int m, double tab[APPLE_LANE_TAB])
{
	memset(tab, 0, sizeof(double) * APPLE_LANE_TAB);
	for (int j = 1; j <= (m - 1) / 2; j++)
		for (int k = 1; k <= (m - 1) / 2; k++) {
			/* j k mod m: the angle as the exact multiple of 2 pi / m */
			double c = cos(2.0 * M_PI * (double)(j * k % m) / m);
			double sn = sin(2.0 * M_PI * (double)(j * k % m) / m);
			AS_TAB(tab, 0, j, k) = c;
			AS_TAB(tab, 1, j, k) = sn;
			AS_TAB(tab, 2, j, k) = 2.0 * c;
			AS_TAB(tab, 3, j, k) = 2.0 * sn;
		}
}

int apple_score_fft_lanes(const apple_score_fft_t *f)
{
	return f->lanes;
}

void apple_score_fft_set_lanes(apple_score_fft_t *f, int on)
{
	f->lanes = on && f->lm > 0 && score_simd[sp_cpu_isa()]->lane_pairs != NULL;
}

void apple_score_fft_free(apple_score_fft_t **fp)
{
	apple_score_fft_t *f = *fp;

	if (f == NULL)
		return;
	if (f->fwd != NULL)
		fftw_destroy_plan(f->fwd);
	if (f->inv_cols != NULL)
		fftw_destroy_plan(f->inv_cols);
	if (f->inv_rows != NULL)
		fftw_destroy_plan(f->inv_rows);
	if (f->inv_cols2 != NULL)
		fftw_destroy_plan(f->inv_cols2);
	if (f->inv_rowsz != NULL)
		fftw_destroy_plan(f->inv_rowsz);

	fftw_free(f->real);
	fftw_free(f->spec);
	fftw_free(f->cols);
	fftw_free(f->z);
	fftw_free(f->zout);
	fftw_free(f->wspec);
	fftw_free(f->wl);
	fftw_free(f->y);
	free(f->rl);
	free(f);
	*fp = NULL;
}

static void window_fft(apple_score_fft_t *f, const double *im, int nx, int r, int c)
{
	const int q = f->q;

	for (int i = 0; i < q; i++)
		memcpy(f->real + (size_t)i * q, im + (size_t)(r + i) * nx + c, sizeof(double) * (size_t)q);
	fftw_execute(f->fwd);
}

void apple_score_refs_fft(apple_score_fft_t *f, const double *im, int nx, int q,
			  const int32_t *ref, int nref, double *spec)
{
	size_t ns = apple_score_spec_size(q);

	for (int k = 0; k < nref; k++) {
		if ((k & 63) == 0 && sp_cancel_requested())
			return; /* a stop: the spectra are dropped (cancel.h) */
		window_fft(f, im, nx, ref[2 * k], ref[2 * k + 1]);
		memcpy(spec + 2 * ns * (size_t)k, f->spec, sizeof(fftw_complex) * ns);
	}
}

/* The column-transformed half rows Y1 = cols[0][t], Y2 = cols[1][t]
 * (t < q) of two products as full complex rows Z = Y1 + i Y2 (the
 * variant's pack_row()). */
static void pack_rows(apple_score_fft_t *f, const apple_score_simd_t *v)
{
	const int q = f->q, nh = f->nh;
	const size_t ns = (size_t)q * nh;

	for (int t = 0; t < q; t++)
		v->pack_row((const double *)(f->cols + (size_t)t * nh),
			    (const double *)(f->cols + ns + (size_t)t * nh), (double *)(f->z + (size_t)t * q), q);
}

/* apple_score_responses()'s lanes route: the references in lanes of the
 * variant's width (zeros past nref; those lanes' results are dropped),
 * then per block of queries their spectra (re, im apart) and every
 * (reference group, query) pair. */
static int responses_lanes(apple_score_fft_t *f, const double *im, int nx, int q, int gx,
			   const double *spec, int nref, int qbegin, int qend, double *resp)
{
	const apple_score_simd_t *v = score_simd[sp_cpu_isa()];
	const int w = v->width, ng = (nref + w - 1) / w, h = q / 2;
	const size_t ns = apple_score_spec_size(q), gsz = 2 * ns * (size_t)w;
	const double inv = 1.0 / ((double)q * q);

	if ((size_t)ng * gsz > f->rl_cap) {
		double *rl = realloc(f->rl, sizeof(double) * (size_t)ng * gsz);
		if (rl == NULL)
			return -1;
		f->rl = rl;
		f->rl_cap = (size_t)ng * gsz;
	}
	for (int g = 0; g < ng; g++)
		for (int l = 0; l < w; l++) {
			const int r = g * w + l;
			double *dst = f->rl + (size_t)g * gsz + l;
			for (size_t e = 0; e < ns; e++) {
				dst[e * w] = r < nref ? spec[2 * ns * (size_t)r + 2 * e] : 0.0;
				dst[(ns + e) * w] = r < nref ? spec[2 * ns * (size_t)r + 2 * e + 1] : 0.0;
			}
		}
	for (int k0 = qbegin; k0 < qend; k0 += APPLE_QBLOCK) {
		if (sp_cancel_requested())
			return 0; /* a stop: the responses are dropped (cancel.h) */
		const int k1 = qend - k0 < APPLE_QBLOCK ? qend : k0 + APPLE_QBLOCK;
		for (int k = k0; k < k1; k++) {
			window_fft(f, im, nx, (k / gx) * h, (k % gx) * h);
			double *wr = f->wl + 2 * ns * (size_t)(k - k0), *wi = wr + ns;
			const double *sp = (const double *)f->spec;
			for (size_t e = 0; e < ns; e++) {
				wr[e] = sp[2 * e];
				wi[e] = sp[2 * e + 1];
			}
		}
		for (int g = 0; g < ng; g++)
			for (int k = k0; k < k1; k++) {
				const double *wr = f->wl + 2 * ns * (size_t)(k - k0);
				double out[4];
				if (v->lane_pairs(q, f->tab, f->rl + (size_t)g * gsz, wr, wr + ns, f->y,
						  inv, out) != 0)
					return -1; /* not a q of the route: FFTW's recomputes all */
				double *dst = resp + (size_t)(k - qbegin) * nref + (size_t)g * w;
				for (int l = 0; l < w && g * w + l < nref; l++)
					dst[l] = out[l];
			}
	}
	return 0;
}

void apple_score_responses(apple_score_fft_t *f, const double *im, int nx, int q, int gx,
			   const double *spec, int nref, int qbegin, int qend, double *resp)
{
	if (f->lanes && q == f->q &&
	    responses_lanes(f, im, nx, q, gx, spec, nref, qbegin, qend, resp) == 0)
		return;
	/* FFTW's route (also when the references' lane copy cannot be
	 * allocated) */
	const size_t ns = apple_score_spec_size(q), nn = (size_t)q * q;
	const double inv = 1.0 / (double)nn;
	const int h = q / 2;
	const apple_score_simd_t *v = score_simd[sp_cpu_isa()];

	for (int k0 = qbegin; k0 < qend; k0 += APPLE_QBLOCK) {
		if (sp_cancel_requested())
			return; /* a stop: the responses are dropped (cancel.h) */
		const int k1 = qend - k0 < APPLE_QBLOCK ? qend : k0 + APPLE_QBLOCK;
		for (int k = k0; k < k1; k++) {
			window_fft(f, im, nx, (k / gx) * h, (k % gx) * h);
			memcpy(f->wspec + ns * (size_t)(k - k0), f->spec, sizeof(fftw_complex) * ns);
		}
		/* every (query, reference) pair gets the same operations as one
		 * query at a time would: only the order of the pairs differs.
		 * References 2i and 2i + 1 go through one inverse: their products'
		 * column DFTs, then each row of the two as one complex row
		 * Z = Y1 + i Y2 (full length q, from the half rows by Hermitian
		 * symmetry), whose inverse is cc1 + i cc2, both real.  The rows
		 * of q/2 + 1 products cost about what the c2r rows of one do.
		 * An odd last reference goes alone, through the c2r rows. */
		for (int r = 0; r < nref; r += 2) {
			const double *R1 = spec + 2 * ns * (size_t)r, *R2 = R1 + 2 * ns;
			const int two = r + 1 < nref;
			for (int k = k0; k < k1; k++) {
				const double *W = (const double *)(f->wspec + ns * (size_t)(k - k0));
				double *P = (double *)f->spec;
				double *out = resp + (size_t)(k - qbegin) * nref + r;
				/* mean(cc) = P[0] / q^2: the sum of a circular
				 * correlation is the product of the sums */
				v->product(R1, two ? R2 : NULL, W, P, P + 2 * ns, ns); /* R conj(W) */
				if (!two) {
					double p0 = P[0];
					fftw_execute(f->inv_cols);
					fftw_execute(f->inv_rows);
					out[0] = (v->max_of(f->real, nn) - p0) * inv;
					continue;
				}
				double p1 = P[0], p2 = P[2 * ns], m[2];
				fftw_execute(f->inv_cols2);
				pack_rows(f, v);
				fftw_execute(f->inv_rowsz);
				v->max2_of((const double *)f->zout, nn, m);
				out[0] = (m[0] - p1) * inv;
				out[1] = (m[1] - p2) * inv;
			}
		}
	}
}

void apple_score_finish(const double *resp, int nquery, int nref, int32_t *score)
{
	size_t total = (size_t)nquery * nref;
	double mn = resp[0], mx = resp[0];

	for (size_t t = 1; t < total; t++) {
		if (resp[t] < mn)
			mn = resp[t];
		if (resp[t] > mx)
			mx = resp[t];
	}
	double thr = mn + (mx - mn) / 20;
	for (int k = 0; k < nquery; k++) {
		int cnt = 0;
		for (int r = 0; r < nref; r++)
			cnt += resp[(size_t)k * nref + r] >= thr;
		score[k] = cnt;
	}
}

/* ---- steps 4-5: training set, SVM -------------------------------------- */

typedef struct { int32_t score; int32_t idx; } scored_t;

static int scored_cmp(const void *a, const void *b)
{
	const scored_t *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return (x->idx > y->idx) - (x->idx < y->idx);
}

int apple_training_set(const apple_sizes_t *s, const double *im, const int32_t *score, int tau1,
		       int tau2, double *feat, int *npos, int *nneg, unsigned char *work)
{
	const int ny = s->ny, nx = s->nx, q = s->query, h = q / 2, g = s->gy, nq = s->gy * s->gx;
	unsigned char *mp = work, *mn = work + (size_t)ny * nx;
	scored_t *ord = malloc(sizeof *ord * (size_t)nq);

	*npos = *nneg = 0;
	if (ord == NULL)
		return SP_ENOMEM;
	memset(work, 0, 2 * (size_t)ny * nx);
	/* ASPIRE flattens the score in Fortran order (row index fastest) */
	for (int j = 0; j < s->gx; j++)
		for (int i = 0; i < g; i++) {
			ord[j * g + i].score = score[(size_t)i * s->gx + j];
			ord[j * g + i].idx = j * g + i;
		}
	qsort(ord, (size_t)nq, sizeof *ord, scored_cmp);
	for (int t = 0; t < tau2 && t < nq; t++) {
		int i = ord[t].idx % g, j = ord[t].idx / g;
		int r0 = i * h, c0 = j * h, r1 = r0 + q < ny ? r0 + q : ny;
		int c1 = c0 + q < nx ? c0 + q : nx;
		for (int r = r0; r < r1; r++) {
			if (t < tau1)
				memset(mp + (size_t)r * nx + c0, 1, (size_t)(c1 - c0));
			memset(mn + (size_t)r * nx + c0, 1, (size_t)(c1 - c0));
		}
	}
	free(ord);

	const int nby = ny / q, nbx = nx / q;
	int np_ = 0, nn_ = 0;
	double *pos = feat;
	/* count positives first so that negatives follow them; blocks in
	 * column-major order (block row b fastest), as ASPIRE's */
	for (int pass = 0; pass < 2; pass++)
		for (int d = 0; d < nbx; d++)
			for (int b = 0; b < nby; b++) {
				int allp = 1, none = 1;
				for (int c = 0; c < q && (allp || none); c++)
					for (int a = 0; a < q; a++) {
						size_t o = (size_t)(b * q + a) * nx + d * q + c;
						allp &= mp[o] != 0;
						none &= mn[o] == 0;
					}
				if ((pass == 0 && !allp) || (pass == 1 && !none))
					continue;
				double sum = 0.0, ss = 0.0;
				for (int c = 0; c < q; c++)
					for (int a = 0; a < q; a++)
						sum += im[(size_t)(b * q + a) * nx + d * q + c];
				double mu = sum / ((double)q * q);
				for (int c = 0; c < q; c++)
					for (int a = 0; a < q; a++) {
						double e = im[(size_t)(b * q + a) * nx + d * q + c] - mu;
						ss += e * e;
					}
				double *o = pos + 2 * (size_t)(np_ + nn_);
				o[0] = mu;
				o[1] = sqrt(ss / ((double)q * q));
				if (pass == 0)
					np_++;
				else
					nn_++;
			}
	*npos = np_;
	*nneg = nn_;
	return 0;
}

static void svm_quiet(const char *s)
{
	(void)s;
}

apple_svm_t *apple_svm_new(const double *feat, int npos, int nneg)
{
	const int l = npos + nneg;
	apple_svm_t *m;
	struct svm_node *nodes;
	struct svm_node **xs;
	double *y;

	if (npos <= 0 || nneg <= 0)
		return NULL;
	m = calloc(1, sizeof *m);
	nodes = malloc(sizeof *nodes * 3 * (size_t)l);
	xs = malloc(sizeof *xs * (size_t)l);
	y = malloc(sizeof *y * (size_t)l);
	if (m == NULL || nodes == NULL || xs == NULL || y == NULL)
		goto fail;

	/* StandardScaler: population mean and std over the training set */
	for (int f = 0; f < 2; f++) {
		double sum = 0.0, ss = 0.0;
		for (int i = 0; i < l; i++)
			sum += feat[2 * i + f];
		double mu = sum / l;
		for (int i = 0; i < l; i++)
			ss += (feat[2 * i + f] - mu) * (feat[2 * i + f] - mu);
		double sd = sqrt(ss / l);
		m->mu[f] = mu;
		m->scale[f] = sd > 0.0 ? sd : 1.0;
	}
	/* label-0 (negative) rows first: libsvm orders classes by first
	 * appearance, scikit-learn's copy by label value */
	for (int i = 0; i < l; i++) {
		int src = i < nneg ? npos + i : i - nneg;
		struct svm_node *x = nodes + 3 * (size_t)i;
		x[0].index = 1;
		x[0].value = (feat[2 * src] - m->mu[0]) / m->scale[0];
		x[1].index = 2;
		x[1].value = (feat[2 * src + 1] - m->mu[1]) / m->scale[1];
		x[2].index = -1;
		x[2].value = 0.0;
		xs[i] = x;
		y[i] = i < nneg ? 0.0 : 1.0;
	}

	int wl[2] = {0, 1};
	double wt[2] = {(double)l / (2.0 * nneg), (double)l / (2.0 * npos)};
	struct svm_parameter par = {
		.svm_type = C_SVC, .kernel_type = RBF, .degree = 3, .gamma = 0.5, .coef0 = 0.0,
		.cache_size = 200, .eps = 1e-3, .C = 1.0, .nr_weight = 2, .weight_label = wl,
		.weight = wt, .nu = 0.5, .p = 0.1, .shrinking = 1, .probability = 0,
	};
	struct svm_problem prob = {.l = l, .y = y, .x = xs};
	if (svm_check_parameter(&prob, &par) != NULL)
		goto fail;
	svm_set_print_string_function(svm_quiet);
	struct svm_model *model = svm_train(&prob, &par);
	if (model == NULL)
		goto fail;

	m->gamma = par.gamma;
	m->rho = model->rho[0];
	m->nsv = model->l;
	m->label_pos = model->label[0]; /* decision > 0 votes for the first class */
	m->npos = npos;
	m->nneg = nneg;
	m->sv = malloc(sizeof *m->sv * 2 * (size_t)(m->nsv > 0 ? m->nsv : 1));
	m->coef = malloc(sizeof *m->coef * (size_t)(m->nsv > 0 ? m->nsv : 1));
	if (m->sv == NULL || m->coef == NULL) {
		svm_free_and_destroy_model(&model);
		goto fail;
	}
	for (int i = 0; i < m->nsv; i++) {
		const struct svm_node *x = model->SV[i];
		m->sv[2 * i] = 0.0;
		m->sv[2 * i + 1] = 0.0;
		for (; x->index != -1; x++)
			m->sv[2 * i + (x->index - 1)] = x->value;
		m->coef[i] = model->sv_coef[0][i];
	}
	svm_free_and_destroy_model(&model);
	free(nodes);
	free(xs);
	free(y);
	return m;
fail:
	free(nodes);
	free(xs);
	free(y);
	apple_svm_free(&m);
	return NULL;
}

void apple_svm_free(apple_svm_t **mp)
{
	apple_svm_t *m = *mp;

	if (m == NULL)
		return;
	free(m->sv);
	free(m->coef);
	free(m);
	*mp = NULL;
}

double apple_svm_decision(const apple_svm_t *m, double f0, double f1)
{
	/* libsvm: k = exp(-gamma sum (x - sv)^2), sum_k coef_k k - rho, in SV order */
	double sum = 0.0;

	for (int i = 0; i < m->nsv; i++) {
		double d0 = f0 - m->sv[2 * i], d1 = f1 - m->sv[2 * i + 1];
		double d2 = 0.0;
		d2 += d0 * d0;
		d2 += d1 * d1;
		sum += m->coef[i] * exp(-m->gamma * d2);
	}
	return sum - m->rho;
}

/* The SVM's decision value for a window's moments, standardised as in
 * training. */
static double window_decision(const apple_svm_t *m, double mean, double std)
{
	return apple_svm_decision(m, (mean - m->mu[0]) / m->scale[0], (std - m->mu[1]) / m->scale[1]);
}

void apple_classify_rows(const apple_svm_t *m, const double *mean, const double *std, int nw,
			 int r0, int r1, uint8_t *seg)
{
	const apple_score_simd_t *v = score_simd[sp_cpu_isa()];
	enum { CHUNK = 256 };
	double d[CHUNK];

	for (int r = r0; r < r1; r++) {
		if (sp_cancel_requested())
			return; /* a stop: the segmentation is dropped (cancel.h) */
		for (int c0 = 0; c0 < nw; c0 += CHUNK) {
			const int n = nw - c0 < CHUNK ? nw - c0 : CHUNK;
			const size_t o = (size_t)r * nw + c0;
			v->decisions(m, mean + o, std + o, n, d);
			for (int c = 0; c < n; c++) {
				int label = d[c] > 0 ? m->label_pos : 1 - m->label_pos;
				seg[(size_t)(r - r0) * nw + c0 + c] = (uint8_t)(label == 1);
			}
		}
	}
}

void apple_pick_scores(const apple_params_t *p, const apple_sizes_t *s, const apple_svm_t *m,
		       const double *mean, const double *std, const int *xy, int n, double *score)
{
	const int nwy = s->nwy, nwx = s->nwx, lo = s->query / 2 - 1;
	for (int k = 0; k < n; k++) {
		/* apple_pick(): x = 2 (cx + 2 lo + 1) + margin_left, window column cx + lo */
		int c = (xy[2 * k] - p->margin_left) / 2 - lo - 1;
		int r = (xy[2 * k + 1] - p->margin_top) / 2 - lo - 1;
		c = c < 0 ? 0 : c >= nwx ? nwx - 1 : c;
		r = r < 0 ? 0 : r >= nwy ? nwy - 1 : r;
		size_t o = (size_t)r * nwx + c;
		double d = window_decision(m, mean[o], std[o]);
		score[k] = m->label_pos == 1 ? d : -d;
	}
}

size_t apple_svm_cuda_size(const apple_svm_t *m)
{
	return (size_t)m->nsv * 3;
}

void apple_svm_cuda_pack(const apple_svm_t *m, double *svc)
{
	for (int i = 0; i < m->nsv; i++) {
		svc[3 * i] = m->sv[2 * i];
		svc[3 * i + 1] = m->sv[2 * i + 1];
		svc[3 * i + 2] = m->coef[i];
	}
}

int apple_seg_uniform(const uint8_t *seg, size_t n)
{
	size_t ones = 0;

	for (size_t i = 0; i < n; i++)
		ones += seg[i] != 0;
	return ones == n ? 1 : ones == 0 ? -1 : 0;
}

/* ---- step 6: morphology ------------------------------------------------ */

void apple_edt2(const uint8_t *a, int h, int w, int32_t *d2, int32_t *work)
{
	const int W = w + 2;
	int32_t *g = work, *st = work + (size_t)(h + 2) * W;

	/* the CUDA kernels' bodies, one column, then one row, at a time; the
	 * definition is checked independently (test_apple_cpu: erosion by
	 * definition) */
	for (int x = 0; x < W; x++)
		apk_edt_col(a, h, w, x, g);
	for (int y = 1; y <= h; y++)
		apk_edt_row(g, h, w, y, st, st + W, d2);
}

static inline int32_t uf_find(int32_t *par, int32_t p)
{
	while (par[p] != p) {
		par[p] = par[par[p]];
		p = par[p];
	}
	return p;
}

static inline void uf_union(int32_t *par, int32_t a, int32_t b)
{
	a = uf_find(par, a);
	b = uf_find(par, b);
	if (a < b)
		par[b] = a;
	else if (b < a)
		par[a] = b;
}

int apple_label8(const uint8_t *a, int h, int w, int32_t *lab, int32_t *par)
{
	int nlab = 0;

	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			int32_t p = y * w + x;
			if (!a[p])
				continue;
			par[p] = p;
			if (x > 0 && a[p - 1])
				uf_union(par, p, p - 1);
			if (y > 0) {
				if (x > 0 && a[p - w - 1])
					uf_union(par, p, p - w - 1);
				if (a[p - w])
					uf_union(par, p, p - w);
				if (x + 1 < w && a[p - w + 1])
					uf_union(par, p, p - w + 1);
			}
		}
	/* roots are the smallest pixel index of their component: raster order */
	for (int32_t p = 0; p < h * w; p++) {
		if (!a[p]) {
			lab[p] = 0;
			continue;
		}
		int32_t r = uf_find(par, p);
		lab[p] = r == p ? ++nlab : lab[r];
	}
	return nlab;
}

size_t apple_morphology_work_size(int nwy, int nwx)
{
	size_t n2 = (size_t)nwy * nwx, m = (size_t)(nwy > nwx ? nwy : nwx);
	return 3 * n2 + n2 + 1 + (size_t)(nwy + 2) * (nwx + 2) + 2 * (m + 2) + 16;
}

/* filled = a with the 4-connected background components that do not reach
 * the border set to 1 (scipy.ndimage.binary_fill_holes). */
static void fill_holes(const uint8_t *a, int h, int w, uint8_t *filled, int32_t *stack)
{
	size_t n = (size_t)h * w, sp = 0;

	for (size_t p = 0; p < n; p++)
		filled[p] = 1; /* 1 = object or hole until the border flood reaches it */
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			int32_t p = y * w + x;
			if ((y == 0 || x == 0 || y == h - 1 || x == w - 1) && !a[p] && filled[p]) {
				filled[p] = 0;
				stack[sp++] = p;
			}
		}
	while (sp > 0) {
		int32_t p = stack[--sp];
		int y = p / w, x = p % w;
		int32_t nb[4] = {x > 0 ? p - 1 : -1, x + 1 < w ? p + 1 : -1, y > 0 ? p - w : -1,
				 y + 1 < h ? p + w : -1};
		for (int k = 0; k < 4; k++)
			if (nb[k] >= 0 && !a[nb[k]] && filled[nb[k]]) {
				filled[nb[k]] = 0;
				stack[sp++] = nb[k];
			}
	}
}

void apple_morphology(const apple_sizes_t *s, const uint8_t *seg, uint8_t *out, uint8_t *work8,
		      int32_t *work32)
{
	const int nwy = s->nwy, nwx = s->nwx;
	const size_t n2 = (size_t)nwy * nwx;
	int32_t *d2 = work32, *lab = work32 + n2, *par = lab + n2, *edtw = par + n2;
	uint8_t *filled = work8;
	size_t p;

	fill_holes(seg, nwy, nwx, filled, par);
	for (p = 0; p < n2 && filled[p]; p++)
		;
	if (p == n2) {
		memcpy(out, seg, n2);
		for (int y = 0; y < 100 && y < nwy; y++)
			memset(out + (size_t)y * nwx, 0, (size_t)(nwx < 100 ? nwx : 100));
		fill_holes(out, nwy, nwx, filled, par);
	}
	apple_edt2(filled, nwy, nwx, d2, edtw);
	const long long rmin = (long long)s->min_size * s->min_size,
			rmax = (long long)s->max_size * s->max_size;
	for (p = 0; p < n2; p++)
		out[p] = d2[p] > rmin;
	int nl = apple_label8(out, nwy, nwx, lab, par);
	uint8_t *hit = (uint8_t *)par; /* parents are no longer needed */
	memset(hit, 0, (size_t)nl + 1);
	for (p = 0; p < n2; p++)
		if (d2[p] > rmax)
			hit[lab[p]] = 1;
	for (p = 0; p < n2; p++)
		if (out[p] && hit[lab[p]])
			out[p] = 0;
}

/* ---- step 7: pick ------------------------------------------------------ */

/* The trimmed grid apple_pick() works on: my x mx. */
static size_t pick_grid(const apple_sizes_t *s, int *my, int *mx)
{
	const int q = s->query, lo = q / 2 - 1, hi = q / 2;
	*my = s->nwy - lo - hi;
	*mx = s->nwx - lo - hi;
	return *my > 0 && *mx > 0 ? (size_t)*my * (size_t)*mx : 0;
}

size_t apple_pick_work_size(const apple_sizes_t *s)
{
	int my, mx;
	const size_t mm = pick_grid(s, &my, &mx);
	return 2 * sizeof(int32_t) * (mm + 1) + 2 * mm;
}

int apple_pick(const apple_params_t *p, const apple_sizes_t *s, const uint8_t *seg, int *xy,
	       int maxpick, void *work)
{
	const int q = s->query, lo = q / 2 - 1;
	int my, mx;
	const size_t mm = pick_grid(s, &my, &mx);
	const int moa = s->moa;
	/* the int32 arrays first: work is malloc-aligned */
	int32_t *lab = work, *par = lab + mm + 1;
	uint8_t *t = (uint8_t *)(par + mm + 1), *img = t + mm;
	long long *cnt = NULL, *sr = NULL, *sc = NULL;
	int32_t *cy = NULL, *cx = NULL, *ccount = NULL;
	int npick = 0, ret = SP_ENOMEM;

	if (mm == 0)
		return 0;
	for (int y = 0; y < my; y++)
		memcpy(t + (size_t)y * mx, seg + (size_t)(y + lo) * s->nwx + lo, (size_t)mx);

	/* Drop components larger than max_size^2.  The reference labels the
	 * image again without them; here their labels are dropped and the
	 * others renumbered in order, which is the same labelling: the
	 * components left are unchanged, and so are their first pixels in
	 * raster order, which number them (apple_label8). */
	int nl = apple_label8(t, my, mx, lab, par);
	cnt = calloc((size_t)nl + 1, sizeof *cnt);
	if (cnt == NULL)
		goto out;
	for (size_t i = 0; i < mm; i++)
		cnt[lab[i]]++;
	int32_t *keep = par; /* the parents are no longer needed; nl <= mm */
	int nk = 0;
	keep[0] = 0;
	for (int l = 1; l <= nl; l++)
		keep[l] = cnt[l] > (long long)s->max_size * s->max_size ? 0 : ++nk;
	for (size_t i = 0; i < mm; i++)
		lab[i] = keep[lab[i]];
	nl = nk;

	/* centres of mass, rounded half to even (np.rint) */
	int ncent = p->fix_quirks ? nl : (nl > 1 ? nl - 1 : 0);
	sr = calloc((size_t)nl + 1, sizeof *sr);
	sc = calloc((size_t)nl + 1, sizeof *sc);
	free(cnt);
	cnt = calloc((size_t)nl + 1, sizeof *cnt);
	cy = malloc(sizeof *cy * (size_t)(ncent + 1));
	cx = malloc(sizeof *cx * (size_t)(ncent + 1));
	if (sr == NULL || sc == NULL || cnt == NULL || cy == NULL || cx == NULL)
		goto out;
	for (int y = 0; y < my; y++)
		for (int x = 0; x < mx; x++) {
			int32_t l = lab[(size_t)y * mx + x];
			sr[l] += y;
			sc[l] += x;
			cnt[l]++;
		}
	for (int i = 0; i < ncent; i++) {
		cy[i] = (int32_t)rint((double)sr[i + 1] / (double)cnt[i + 1]);
		cx[i] = (int32_t)rint((double)sc[i + 1] / (double)cnt[i + 1]);
	}

	/* isolation: dilate the centres by a disk of radius moa */
	int area = 0;
	for (int dy = -moa; dy <= moa; dy++)
		for (int dx = -moa; dx <= moa; dx++)
			area += dx * dx + dy * dy <= moa * moa;
	memset(img, 0, mm);
	for (int i = 0; i < ncent; i++)
		for (int dy = -moa; dy <= moa; dy++)
			for (int dx = -moa; dx <= moa; dx++) {
				int y = cy[i] + dy, x = cx[i] + dx;
				if (dx * dx + dy * dy <= moa * moa && y >= 0 && y < my && x >= 0 &&
				    x < mx)
					img[(size_t)y * mx + x] = 1;
			}
	int nd = apple_label8(img, my, mx, lab, par);
	free(cnt);
	cnt = calloc((size_t)nd + 1, sizeof *cnt);
	ccount = calloc((size_t)nd + 1, sizeof *ccount);
	if (cnt == NULL || ccount == NULL)
		goto out;
	for (size_t i = 0; i < mm; i++)
		cnt[lab[i]]++;

	for (int k = 0; k < ncent; k++)
		ccount[lab[(size_t)cy[k] * mx + cx[k]]]++;
	for (int v = 0; v <= (p->fix_quirks ? ncent - 1 : nd); v++) {
		int k = v;
		if (p->fix_quirks) {
			/* centre v: kept when alone in a component of the disk's area */
			int32_t l = lab[(size_t)cy[v] * mx + cx[v]];
			if (cnt[l] != area || ccount[l] != 1)
				continue;
		} else {
			/* the reference: component label v of the disk's area -> centre v - 1 */
			if (cnt[v] != area)
				continue;
			k = v - 1;
			if (k < 0)
				k += ncent; /* NumPy's index -1 */
			if (k < 0 || k >= ncent)
				continue; /* the reference raises IndexError here */
		}
		if (npick < maxpick) {
			xy[2 * npick] = 2 * (cx[k] + 2 * lo + 1) + p->margin_left;
			xy[2 * npick + 1] = 2 * (cy[k] + 2 * lo + 1) + p->margin_top;
		}
		npick++;
	}
	ret = npick;
out:
	free(cnt);
	free(sr);
	free(sc);
	free(cy);
	free(cx);
	free(ccount);
	return ret;
}
