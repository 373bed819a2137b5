/* APPLE-Picker CPU kernels, step 3: the reference windows and the FFT query
 * score (one q x q inverse per query and reference pair), by hand-written
 * DFTs in SIMD lanes or by FFTW. */
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

/*
 * DESIGN.  One q x q inverse per (query, reference) pair is most of the
 * score's time.  Where apple_score_lane_m(q) gives q = P m with P = 2, 4, 8
 * or 16 and m odd (every even q from 6 to 56 but 8, 16, 32, 50, 54, and 58
 * and 62, where FFTW runs Rader's algorithm; q = 26 for ASPIRE's default
 * particle size 78) it runs as hand-written DFTs in SIMD lanes, one
 * reference per lane (apple_score_simd.h: Good-Thomas indexing, so no
 * twiddle factors between P and m; the odd-length DFTs pair their inputs
 * j, m - j; the product, the Hermitian rows and the maximum fused in).
 * They beat FFTW here because Debian's FFTW has AVX but no FMA or AVX2
 * codelets, and its 26-point DFT is 2 x 13 with twiddles (the gain per pair:
 * doc/apple.md, doc/profiling.md).  The lanes route differs from FFTW's by rounding
 * (~3e-15 of the largest response, test_score_variants, against FFTW's
 * 2-D c2r).
 *
 * Other q take FFTW's route.  Its transforms are FFTW_ESTIMATE plans: the
 * same algorithm, hence the same bits, on every run and machine
 * (FFTW_MEASURE chooses by timing).  The inverse runs as two FFTW passes:
 * the column DFTs out of place into a second buffer (FFTW's 2-D plan
 * buffers and copies the strided columns, `fftw_cpy2d`), then the rows.
 * Two references' responses to one query share the row pass: their rows,
 * packed as one complex row Z = Y1 + i Y2 (both real after the inverse),
 * go through one complex DFT each, which costs about what one product's
 * c2r rows did (FFTW's c2r row codelets are scalar; its complex ones are
 * AVX).  The packed responses differ from a c2r's by rounding (~1e-16
 * relative, test_score_variants); an odd last reference goes alone
 * through the c2r.
 */

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
	f->lanes = on && f->lm > 0 && apple_score_simd(sp_cpu_isa())->lane_pairs != NULL;
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
	const apple_score_simd_t *v = apple_score_simd(sp_cpu_isa());
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
	const apple_score_simd_t *v = apple_score_simd(sp_cpu_isa());

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
