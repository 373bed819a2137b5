/* Per-thread bodies of the APPLE CUDA kernels (preprocess, moments, references, fused score, morphology), plain C shared with a host emulation. */
#ifndef SP_APPLE_KERN_H
#define SP_APPLE_KERN_H

/*
 * DESIGN.  Each CUDA kernel of apple_cuda*.cu that is not a library call is
 * a grid-stride loop around one function here, called with its thread's
 * index; tests/test_apple_kern.c calls the same functions from host loops
 * (threads one after another, in shuffled order where the kernel's
 * threads race) and compares with the CPU code (apple_cpu.c, apple_score.c,
 * apple_svm.c, apple_morph.c), so the
 * kernels' arithmetic and indexing are checked on every build, GPU or
 * not.  Most functions are twins of apple_cpu.c's loops, written apart,
 * with the same operations in the same order: on the device every double
 * operation is an explicit round-to-nearest intrinsic (no FMA
 * contraction), on the host the project builds with -ffp-contract=off, so
 * both give the CPU code's bits.  Two are shared instead: the CPU code runs
 * the distance transform and the bicubic coefficients through these
 * bodies (they are checked independently there: erosion by definition,
 * ASPIRE's preprocessed image).
 *
 * Union-find (connected components): par[p] <= p always, a root is its
 * component's smallest pixel index; unions link the larger root under the
 * smaller with an atomic minimum and retry when another thread moved the
 * root first (Playne & Hawick, IEEE TPDS 29(6), 2018).  Non-member pixels
 * hold -1 and are never followed.
 */

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define APK_FN static __host__ __device__ inline
#else
#define APK_FN static inline
#endif

#ifdef __CUDA_ARCH__
#define APK_MUL(a, b) __dmul_rn((a), (b))
#define APK_ADD(a, b) __dadd_rn((a), (b))
#define APK_SUB(a, b) __dsub_rn((a), (b))
#define APK_DIV(a, b) __ddiv_rn((a), (b))
#define APK_LOAD(p) (*(volatile const int32_t *)(p))
#define APK_ATOMIC_MIN(p, v) atomicMin((int *)(p), (int)(v))
#else
#define APK_MUL(a, b) ((a) * (b))
#define APK_ADD(a, b) ((a) + (b))
#define APK_SUB(a, b) ((a) - (b))
#define APK_DIV(a, b) ((a) / (b))
#define APK_LOAD(p) (*(p))
#define APK_ATOMIC_MIN(p, v) apk_host_atomic_min((p), (v))
static inline int32_t apk_host_atomic_min(int32_t *p, int32_t v)
{
	int32_t old = *p;
	if (v < old)
		*p = v;
	return old;
}
#endif

/* ---- preprocess: Pillow's bicubic resize, then the 15 x 15 low-pass ---- */

APK_FN double apk_bicubic(double x)
{
	const double a = -0.5;

	if (x < 0.0)
		x = -x;
	if (x < 1.0) /* ((a + 2) x - (a + 3)) x x + 1 */
		return APK_ADD(APK_MUL(APK_MUL(APK_SUB(APK_MUL(a + 2.0, x), a + 3.0), x), x), 1.0);
	if (x < 2.0) /* (((x - 5) x + 8) x - 4) a */
		return APK_MUL(APK_SUB(APK_MUL(APK_ADD(APK_MUL(APK_SUB(x, 5.0), x), 8.0), x), 4.0), a);
	return 0.0;
}

/* Taps per output pixel of the resize from insize to outsize. */
APK_FN int apk_resample_ksize(int insize, int outsize)
{
	double scale = (double)insize / outsize;
	return (int)ceil(2.0 * (scale < 1.0 ? 1.0 : scale)) * 2 + 1;
}

/* Thread xx < outsize: its window bounds[2 xx] (first input), bounds[2 xx
 * + 1] (count) and normalised weights kk[xx][ksize] (zero-padded). */
APK_FN void apk_resample_coeffs(int xx, int insize, int outsize, int ksize, int32_t *bounds,
				double *kk)
{
	double scale = APK_DIV((double)insize, (double)outsize);
	double filterscale = scale < 1.0 ? 1.0 : scale;
	double support = APK_MUL(2.0, filterscale), ss = APK_DIV(1.0, filterscale);
	double center = APK_MUL((double)xx + 0.5, scale), ww = 0.0;
	int xmin = (int)APK_ADD(APK_SUB(center, support), 0.5);
	int xmax = (int)APK_ADD(APK_ADD(center, support), 0.5);
	double *k = kk + (size_t)xx * ksize;
	int x;

	if (xmin < 0)
		xmin = 0;
	if (xmax > insize)
		xmax = insize;
	xmax -= xmin;
	for (x = 0; x < xmax; x++) {
		double wv = apk_bicubic(APK_MUL(APK_ADD(APK_SUB((double)(x + xmin), center), 0.5), ss));
		k[x] = wv;
		ww = APK_ADD(ww, wv);
	}
	for (x = 0; x < xmax; x++)
		if (ww != 0.0)
			k[x] = APK_DIV(k[x], ww);
	for (; x < ksize; x++)
		k[x] = 0.0;
	bounds[2 * xx] = xmin;
	bounds[2 * xx + 1] = xmax;
}

/* One output of a resize pass: sum over the window of src[(first + i)
 * stride] k[i], rounded to float32 as Pillow stores it. */
APK_FN float apk_resample_dot(const float *src, size_t stride, const double *k, int first,
			      int count)
{
	double ss = 0.0;
	for (int i = 0; i < count; i++)
		ss = APK_ADD(ss, APK_MUL((double)src[(size_t)(first + i) * stride], k[i]));
	return (float)ss;
}

/* The nonzero taps of apple_lowpass_kernel() in row-major order: offsets
 * (du rows, dv columns) and values.  Passed by value to the kernel. */
typedef struct apk_taps {
	int nk;
	int8_t du[225], dv[225];
	double val[225];
} apk_taps_t;

/* The taps of the 15 x 15 kernel k (apple_lowpass_kernel()); host code. */
static inline void apk_taps_from(const double k[225], apk_taps_t *t)
{
	t->nk = 0;
	for (int u = 0; u < 15; u++)
		for (int v = 0; v < 15; v++)
			if (k[u * 15 + v] != 0.0) {
				t->du[t->nk] = (int8_t)(u - 7);
				t->dv[t->nk] = (int8_t)(v - 7);
				t->val[t->nk++] = k[u * 15 + v];
			}
}

/* Pixel (i, j) of the "same" correlation of res [ny][nx] with the taps,
 * zero outside the image, taps in order. */
APK_FN double apk_lowpass_px(const apk_taps_t *t, const float *res, int ny, int nx, int i, int j)
{
	double acc = 0.0;
	for (int k = 0; k < t->nk; k++) {
		int y = i + t->du[k], x = j + t->dv[k];
		if (y >= 0 && y < ny && x >= 0 && x < nx)
			acc = APK_ADD(acc, APK_MUL(t->val[k], (double)res[(size_t)y * nx + x]));
	}
	return acc;
}

/* ---- moments ------------------------------------------------------------- */

/* Thread (i, c), i < ny, c < nw = nx - q + 1: sums of x and x^2 over
 * im[i][c .. c + q) (im [ny][nx]). */
APK_FN void apk_rowsums(const double *im, int nx, int q, int nw, int i, int c, double *rs,
			double *rs2)
{
	const double *row = im + (size_t)i * nx + c;
	double a = 0.0, b = 0.0;
	for (int k = 0; k < q; k++) {
		double v = row[k];
		a = APK_ADD(a, v);
		b = APK_ADD(b, APK_MUL(v, v));
	}
	rs[(size_t)i * nw + c] = a;
	rs2[(size_t)i * nw + c] = b;
}

/* Thread r < nwy, c < nw: the window's mean and std from q row sums; inv =
 * 1 / q^2. */
APK_FN void apk_colsums(const double *rs, const double *rs2, int q, int nw, double inv, int r,
			int c, double *mean, double *std)
{
	double m = 0.0, sd = 0.0;
	for (int k = 0; k < q; k++) {
		m = APK_ADD(m, rs[(size_t)(r + k) * nw + c]);
		sd = APK_ADD(sd, rs2[(size_t)(r + k) * nw + c]);
	}
	double mu = APK_MUL(m, inv), var = APK_SUB(APK_MUL(sd, inv), APK_MUL(mu, mu));
	mean[(size_t)r * nw + c] = mu;
	std[(size_t)r * nw + c] = sqrt(var > 0.0 ? var : 0.0);
}

/* ---- references ---------------------------------------------------------- */

/* Search range of container (yc, xc): rows [*r0, *r1), columns [*c0, *c1)
 * of window positions (apple_refs_select()). */
APK_FN void apk_container_range(int ny, int nx, int q, int cs, int yc, int xc, int *r0, int *r1,
				int *c0, int *c1)
{
	int ye = (yc + 1) * cs, xe = (xc + 1) * cs;
	*r0 = yc * cs;
	*c0 = xc * cs;
	*r1 = (ny - 1 < ye ? ny - 1 : ye) - q + 1;
	*c1 = (nx - 1 < xe ? nx - 1 : xe) - q + 1;
}

/* Best so far of the four criteria (max mean, min mean, max std, min
 * std): value and position r nw + c (-1: none yet). */
typedef struct apk_best {
	double v[4];
	int32_t at[4];
} apk_best_t;

APK_FN void apk_best_init(apk_best_t *b)
{
	for (int t = 0; t < 4; t++) {
		b->v[t] = 0.0;
		b->at[t] = -1;
	}
}

/* Whether (v, at) beats (bv, bat) for criterion t: a better value, or the
 * same value at an earlier position (NumPy's first occurrence). */
APK_FN int apk_beats(int t, double v, int32_t at, double bv, int32_t bat)
{
	if (bat < 0)
		return 1;
	if (v == bv)
		return at < bat;
	return (t & 1) ? v < bv : v > bv;
}

APK_FN void apk_best_offer(apk_best_t *b, double m, double sd, int32_t at)
{
	double v[4] = { m, m, sd, sd };
	for (int t = 0; t < 4; t++)
		if (apk_beats(t, v[t], at, b->v[t], b->at[t])) {
			b->v[t] = v[t];
			b->at[t] = at;
		}
}

APK_FN void apk_best_merge(apk_best_t *b, const apk_best_t *o)
{
	for (int t = 0; t < 4; t++)
		if (o->at[t] >= 0 && apk_beats(t, o->v[t], o->at[t], b->v[t], b->at[t])) {
			b->v[t] = o->v[t];
			b->at[t] = o->at[t];
		}
}

/* Thread `lane` of `nlanes` scanning the container's range: positions
 * lane, lane + nlanes, ... of its raster order. */
APK_FN void apk_refs_scan(const double *mean, const double *std, int nw, int r0, int r1, int c0,
			  int c1, int lane, int nlanes, apk_best_t *b)
{
	int wc = c1 - c0;
	long long cnt = (r1 > r0 && wc > 0) ? (long long)(r1 - r0) * wc : 0;
	apk_best_init(b);
	for (long long u = lane; u < cnt; u += nlanes) {
		int r = r0 + (int)(u / wc), c = c0 + (int)(u % wc);
		int32_t at = r * nw + c;
		apk_best_offer(b, mean[at], std[at], at);
	}
}

/* Writes the container's four references (top-left pixels) to ref[4][2];
 * an empty range gives the container's top-left pixel. */
APK_FN void apk_refs_write(const apk_best_t *b, int nw, int r0, int c0, int32_t *ref)
{
	for (int t = 0; t < 4; t++) {
		ref[2 * t] = b->at[t] < 0 ? r0 : b->at[t] / nw;
		ref[2 * t + 1] = b->at[t] < 0 ? c0 : b->at[t] % nw;
	}
}

/* ---- union-find ---------------------------------------------------------- */

APK_FN int32_t apk_find(const int32_t *par, int32_t p)
{
	int32_t q;
	while ((q = APK_LOAD(par + p)) != p)
		p = q;
	return p;
}

APK_FN void apk_unite(int32_t *par, int32_t a, int32_t b)
{
	for (;;) {
		a = apk_find(par, a);
		b = apk_find(par, b);
		if (a == b)
			return;
		if (a > b) {
			int32_t t = a;
			a = b;
			b = t;
		}
		int32_t old = APK_ATOMIC_MIN(par + b, a);
		if (old == b)
			return; /* b was still a root: linked */
		b = old;        /* b moved under `old` meanwhile: unite a with it */
	}
}

/* Pixel p of [h][w] is a member when (mask[p] != 0) == want. */
APK_FN int apk_member(const uint8_t *mask, int want, int32_t p)
{
	return (mask[p] != 0) == (want != 0);
}

APK_FN void apk_ccl_init(const uint8_t *mask, int want, int32_t p, int32_t *par)
{
	par[p] = apk_member(mask, want, p) ? p : -1;
}

/* Unites member p with its member neighbours before it in raster order:
 * left and up (4-connectivity), plus up-left and up-right (8). */
APK_FN void apk_ccl_merge(const uint8_t *mask, int want, int h, int w, int conn8, int32_t p,
			  int32_t *par)
{
	int y = p / w, x = p % w;
	(void)h;
	if (!apk_member(mask, want, p))
		return;
	if (x > 0 && apk_member(mask, want, p - 1))
		apk_unite(par, p, p - 1);
	if (y > 0) {
		if (apk_member(mask, want, p - w))
			apk_unite(par, p, p - w);
		if (conn8 && x > 0 && apk_member(mask, want, p - w - 1))
			apk_unite(par, p, p - w - 1);
		if (conn8 && x + 1 < w && apk_member(mask, want, p - w + 1))
			apk_unite(par, p, p - w + 1);
	}
}

APK_FN void apk_ccl_compress(int32_t p, int32_t *par)
{
	if (par[p] >= 0)
		par[p] = apk_find(par, p);
}

/* ---- morphology ---------------------------------------------------------- */

/* Hole filling, after the background (want 0) was labelled 4-connected
 * and compressed: flag[root] = 1 for background pixels on the border
 * (flag zeroed before), then filled[p] = a[p] || !flag[root(p)]. */
APK_FN void apk_fill_mark(const uint8_t *a, int h, int w, int32_t p, const int32_t *par,
			  uint8_t *flag)
{
	int y = p / w, x = p % w;
	if (!a[p] && (y == 0 || x == 0 || y == h - 1 || x == w - 1))
		flag[par[p]] = 1;
}

APK_FN void apk_fill_out(const uint8_t *a, int32_t p, const int32_t *par, const uint8_t *flag,
			 uint8_t *filled)
{
	filled[p] = a[p] ? 1 : !flag[par[p]];
}

/* The copy apple_morphology() refills when a fill leaves no 0: seg with
 * its top-left 100 x 100 pixels cleared. */
APK_FN void apk_clear_corner(const uint8_t *seg, int w, int32_t p, uint8_t *out)
{
	int y = p / w, x = p % w;
	out[p] = (y < 100 && x < 100) ? 0 : seg[p];
}

/* Distance transform, phase 1, thread x < w + 2: g[y][x] of the image
 * padded by one zero pixel all round ([h + 2][w + 2]), the vertical
 * distance to the nearest 0 (apple_edt2()).  The value carried from one
 * row to the next stays in a register: on a GPU, where one thread per
 * column is all the parallelism there is (~2k threads for a 4k
 * micrograph), a load of what the thread has just stored was a full
 * memory latency per row. */
APK_FN void apk_edt_col(const uint8_t *a, int h, int w, int x, int32_t *g)
{
	const int H = h + 2, W = w + 2, inside = x >= 1 && x <= w;
	int32_t run = 0; /* g[y - 1][x], then g[y + 1][x] */
	g[x] = 0;
	for (int y = 1; y < H; y++) {
		int in = inside && y <= h && a[(size_t)(y - 1) * w + x - 1];
		run = in ? run + 1 : 0;
		g[(size_t)y * W + x] = run;
	}
	for (int y = H - 2; y >= 0; y--) {
		const int32_t v = g[(size_t)y * W + x];
		if (run < v) {
			run = run + 1;
			g[(size_t)y * W + x] = run;
		} else {
			run = v;
		}
	}
}

/* Phase 2 (Meijster), thread y in [1, h]: squared distances of row y - 1
 * of the image into d2 [h][w]; s and t: w + 2 int32 each, the thread's own.
 * The stack's top (s[k], t[k] and G[s[k]]^2) stays in registers, so that
 * comparing with it and pushing cost no load; only a pop reads the entry
 * below.  The same integers as the textbook form, so the same values. */
APK_FN void apk_edt_row(const int32_t *g, int h, int w, int y, int32_t *s, int32_t *t,
			int32_t *d2)
{
	const int W = w + 2;
	const int32_t *G = g + (size_t)y * W;
	int k = 0;
	int32_t sk = 0, tk = 0;                    /* s[k], t[k] */
	long long gk = (long long)G[0] * G[0];     /* G[s[k]]^2 */
	(void)h;
	s[0] = 0;
	t[0] = 0;
	/* f(x, i) = (x - i)^2 + G[i]^2, with G[i]^2 given */
#define APK_F(x, i, gi2) ((long long)((x) - (i)) * ((x) - (i)) + (gi2))
	for (int u = 1; u < W; u++) {
		const long long gu = (long long)G[u] * G[u];
		while (k >= 0 && APK_F(tk, sk, gk) > APK_F(tk, u, gu)) {
			if (--k >= 0) {
				sk = s[k];
				tk = t[k];
				gk = (long long)G[sk] * G[sk];
			}
		}
		if (k < 0) { /* t[0] is 0 for good */
			k = 0;
			s[0] = sk = u;
			tk = 0;
			gk = gu;
		} else {
			long long num = (long long)u * u - (long long)sk * sk + gu - gk;
			long long q = 2LL * (u - sk), wv = num / q;
			if (num % q != 0 && ((num < 0) != (q < 0)))
				wv--; /* floor division */
			wv += 1;
			if (wv < W) {
				k++;
				s[k] = sk = u;
				t[k] = tk = (int32_t)wv;
				gk = gu;
			}
		}
	}
	for (int u = W - 1; u >= 0; u--) {
		if (u >= 1 && u <= w)
			d2[(size_t)(y - 1) * w + u - 1] = (int32_t)APK_F(u, sk, gk);
		if (u == tk && --k >= 0) {
			sk = s[k];
			tk = t[k];
			gk = (long long)G[sk] * G[sk];
		}
	}
#undef APK_F
}

/* Erosion by the small disk: ero[p] = d2[p] > rmin. */
APK_FN void apk_erode(const int32_t *d2, long long rmin, int32_t p, uint8_t *ero)
{
	ero[p] = d2[p] > rmin;
}

/* After ero was labelled 8-connected and compressed: hit[root] = 1 where
 * the large disk's erosion (d2 > rmax) meets the component (hit zeroed
 * before); then out[p] = ero[p] && !hit[root(p)]. */
APK_FN void apk_hit_mark(const uint8_t *ero, const int32_t *d2, long long rmax, int32_t p,
			 const int32_t *par, uint8_t *hit)
{
	if (ero[p] && d2[p] > rmax)
		hit[par[p]] = 1;
}

APK_FN void apk_hit_out(const uint8_t *ero, int32_t p, const int32_t *par, const uint8_t *hit,
			uint8_t *out)
{
	out[p] = ero[p] && !hit[par[p]];
}

/* ---- score: the fused inverse transforms (q = 2m, m odd) ----------------
 * One block of the CUDA kernel takes one query and npair references
 * (apk_score_npair()); each (query, reference) pair's product
 * P = R conj(W), its 2-D inverse and the maximum never leave the block's
 * shared memory: per pair, Y = the column DFTs [q][ld] (real, then
 * imaginary plane, ld = apk_score_ld(m) >= m + 1), then q row maxima.
 * Three phases, barriers between them:
 *   1. thread (pair, column u, half): half 0 computes A = x1 + x2, half 1
 *      B = x1 - x2 of the Good-Thomas split (x1 = P[2 n2][u],
 *      x2 = P[(2 n2 + m) mod q][u]), then A's or B's DFT of odd length m
 *      into rows half m + k of Y;
 *   2. thread (pair, row t): the row's real inverse (Hermitian, length q)
 *      and its maximum;
 *   3. thread (pair): the maximum of the q row maxima, in row order, then
 *      (max - P[0]) inv.
 * Per value these are apple_score_simd.h's lane_body2() operations in its
 * order (one GPU thread doing what one SIMD lane does, with the table of
 * apple_score_lane_tab()), so the responses are the CPU lanes route's to
 * the bit for the same spectra; the maximum over rows, then over the row
 * maxima, keeps the first largest value in row order, as the lanes' one
 * running maximum does.  tab's layout is apple_score_simd.h's AS_TAB. */
#define APK_SCORE_MAXM 23 /* the largest m of the fused route */
#define APK_SCORE_H ((APK_SCORE_MAXM - 1) / 2)
#define APK_TAB_H 15 /* the table's layout: APPLE_LANE_H (apple.h) */
#define APK_TAB(t, c, j, k) \
	(t)[(c) * (APK_TAB_H + 1) * (APK_TAB_H + 1) + (j) * (APK_TAB_H + 1) + (k)]
#ifdef __CUDA_ARCH__ /* the device pass (the host compiler does not know it) */
#define APK_UNROLL _Pragma("unroll")
#else
#define APK_UNROLL
#endif
#define APK_MAX(x, m) ((x) > (m) ? (x) : (m)) /* the lanes' vmax(x, m) */

/* m where the fused route covers q (q = 2m, m odd, 3 <= m <= 23), else 0. */
APK_FN int apk_score_fused_m(int q)
{
	const int m = q / 2;
	return q % 2 == 0 && m % 2 == 1 && m >= 3 && m <= APK_SCORE_MAXM ? m : 0;
}

/* The row pitch of Y: m + 1 rounded up to odd (conflict-free rows and
 * columns in shared memory banks). */
APK_FN int apk_score_ld(int m)
{
	return (m + 1) | 1;
}

/* Doubles of shared memory per pair: Y's two planes and the row maxima. */
APK_FN int apk_score_pair_doubles(int m)
{
	return 2 * (2 * m) * apk_score_ld(m) + 2 * m;
}

/* Pairs per block: up to 8, within 6144 doubles (48 KiB) of shared memory. */
APK_FN int apk_score_npair(int m)
{
	int n = 6144 / apk_score_pair_doubles(m);
	return n < 1 ? 1 : n > 8 ? 8 : n;
}

/* Threads per pair: the larger of phase 1's 2 (m + 1) and phase 2's q. */
APK_FN int apk_score_pair_threads(int m)
{
	return 2 * (m + 1);
}

/* Input n2 of the odd DFT of phase 1: half 0 x1 + x2, half 1 x1 - x2, with
 * x1 = P[2 n2][u], x2 = P[(2 n2 + m) mod q][u] and P = R conj(W)
 * (re = a c + b d, im = b c - a d: the lanes' product). */
APK_FN void apk_score_half(const int m, const double *R, const double *W, int u, int n2, int half,
			   double *re, double *im)
{
	const int q = 2 * m, nh = m + 1;
	const int o1 = 2 * n2 * nh + u, o2 = ((2 * n2 + m) % q) * nh + u;
	const double r1 = R[2 * o1], i1 = R[2 * o1 + 1], c1 = W[2 * o1], d1 = W[2 * o1 + 1];
	const double r2 = R[2 * o2], i2 = R[2 * o2 + 1], c2 = W[2 * o2], d2 = W[2 * o2 + 1];
	const double x1r = APK_ADD(APK_MUL(r1, c1), APK_MUL(i1, d1));
	const double x1i = APK_SUB(APK_MUL(i1, c1), APK_MUL(r1, d1));
	const double x2r = APK_ADD(APK_MUL(r2, c2), APK_MUL(i2, d2));
	const double x2i = APK_SUB(APK_MUL(i2, c2), APK_MUL(r2, d2));
	*re = half ? APK_SUB(x1r, x2r) : APK_ADD(x1r, x2r);
	*im = half ? APK_SUB(x1i, x2i) : APK_ADD(x1i, x2i);
}

/* Phase 1 for one (column u, half) of one pair: R, W [q][m + 1] complex
 * (interleaved re, im), Y's planes yr, yi with pitch ld. */
APK_FN void apk_score_col(const int m, const double *tab, const double *R, const double *W, int u,
			  int half, double *yr, double *yi, int ld)
{
	const int h = (m - 1) / 2;
	double pr[APK_SCORE_H + 1], pi[APK_SCORE_H + 1], dr[APK_SCORE_H + 1], di[APK_SCORE_H + 1];
	double a0r, a0i;

	/* the inputs j and m - j are formed together and paired at once (the
	 * lanes form all m first: the same values, fewer live registers) */
	apk_score_half(m, R, W, u, 0, half, &a0r, &a0i);
	double s0r = a0r, s0i = a0i;
	APK_UNROLL
	for (int j = 1; j <= h; j++) {
		double ajr, aji, bjr, bji;
		apk_score_half(m, R, W, u, j, half, &ajr, &aji);
		apk_score_half(m, R, W, u, m - j, half, &bjr, &bji);
		pr[j] = APK_ADD(ajr, bjr);
		pi[j] = APK_ADD(aji, bji);
		dr[j] = APK_SUB(ajr, bjr);
		di[j] = APK_SUB(aji, bji);
		s0r = APK_ADD(s0r, pr[j]);
		s0i = APK_ADD(s0i, pi[j]);
	}
	double *yrh = yr + (size_t)half * m * ld + u, *yih = yi + (size_t)half * m * ld + u;
	yrh[0] = s0r;
	yih[0] = s0i;
	APK_UNROLL
	for (int k = 1; k <= h; k++) {
		double cr = a0r, ci = a0i;
		double sr = APK_MUL(dr[1], APK_TAB(tab, 1, 1, k)), si = APK_MUL(di[1], APK_TAB(tab, 1, 1, k));
		cr = APK_ADD(cr, APK_MUL(pr[1], APK_TAB(tab, 0, 1, k)));
		ci = APK_ADD(ci, APK_MUL(pi[1], APK_TAB(tab, 0, 1, k)));
		APK_UNROLL
		for (int j = 2; j <= h; j++) {
			cr = APK_ADD(cr, APK_MUL(pr[j], APK_TAB(tab, 0, j, k)));
			ci = APK_ADD(ci, APK_MUL(pi[j], APK_TAB(tab, 0, j, k)));
			sr = APK_ADD(sr, APK_MUL(dr[j], APK_TAB(tab, 1, j, k)));
			si = APK_ADD(si, APK_MUL(di[j], APK_TAB(tab, 1, j, k)));
		}
		yrh[(size_t)k * ld] = APK_SUB(cr, si); /* C + i (i d sin) */
		yih[(size_t)k * ld] = APK_ADD(ci, sr);
		yrh[(size_t)(m - k) * ld] = APK_ADD(cr, si);
		yih[(size_t)(m - k) * ld] = APK_SUB(ci, sr);
	}
}

/* mx and the real DFT of odd length m of the Hermitian sequence a0 (real),
 * a[1..(m - 1)/2] (lane_rdft_max()). */
APK_FN double apk_score_rdft_max(const int m, const double *tab, double a0, const double *ar,
				 const double *ai, double mx)
{
	const int h = (m - 1) / 2;
	double s = ar[1];

	APK_UNROLL
	for (int j = 2; j <= h; j++)
		s = APK_ADD(s, ar[j]);
	double v = APK_ADD(a0, APK_MUL(s, 2.0));
	mx = APK_MAX(v, mx);
	APK_UNROLL
	for (int k = 1; k <= h; k++) {
		double c = APK_ADD(a0, APK_MUL(ar[1], APK_TAB(tab, 2, 1, k)));
		double sv = APK_MUL(ai[1], APK_TAB(tab, 3, 1, k));
		APK_UNROLL
		for (int j = 2; j <= h; j++) {
			c = APK_ADD(c, APK_MUL(ar[j], APK_TAB(tab, 2, j, k)));
			sv = APK_ADD(sv, APK_MUL(ai[j], APK_TAB(tab, 3, j, k)));
		}
		v = APK_SUB(c, sv);
		mx = APK_MAX(v, mx);
		v = APK_ADD(c, sv);
		mx = APK_MAX(v, mx);
	}
	return mx;
}

/* Phase 2 for one row (yr, yi: the row of Y's planes): the maximum of its
 * q real outputs (from -inf). */
APK_FN double apk_score_row(const int m, const double *tab, const double *yr, const double *yi)
{
	const int h = (m - 1) / 2;
	double pr[APK_SCORE_H + 1], pi[APK_SCORE_H + 1], qr[APK_SCORE_H + 1], qi[APK_SCORE_H + 1];

	APK_UNROLL
	for (int j = 1; j <= h; j++) {
		pr[j] = APK_ADD(yr[2 * j], yr[m - 2 * j]);
		pi[j] = APK_SUB(yi[2 * j], yi[m - 2 * j]);
		qr[j] = APK_SUB(yr[2 * j], yr[m - 2 * j]);
		qi[j] = APK_ADD(yi[2 * j], yi[m - 2 * j]);
	}
	double mx = -(double)INFINITY;
	mx = apk_score_rdft_max(m, tab, APK_ADD(yr[0], yr[m]), pr, pi, mx);
	return apk_score_rdft_max(m, tab, APK_SUB(yr[0], yr[m]), qr, qi, mx);
}

/* Phase 3: the response of a pair from its q row maxima. */
APK_FN double apk_score_finish(int q, const double *rowmax, const double *R, const double *W,
			       double inv)
{
	double mx = -(double)INFINITY;
	for (int t = 0; t < q; t++)
		mx = APK_MAX(rowmax[t], mx);
	const double p0 = APK_ADD(APK_MUL(R[0], W[0]), APK_MUL(R[1], W[1]));
	return APK_MUL(APK_SUB(mx, p0), inv);
}

/* Thread tid of a block (query spectrum W, references r0 .. r0 + npv - 1
 * of spec [nref][ns] complex, shared memory sm of npair pairs) in phase
 * 1, 2 or 3; a thread beyond its phase's work does nothing.  Phase 3
 * writes resp[r0 + pair] (resp: the query's row of responses). */
APK_FN void apk_score_phase1(const int m, const double *tab, const double *spec, const double *W,
			     int r0, int npv, int tid, double *sm)
{
	const int q = 2 * m, per = apk_score_pair_threads(m), pair = tid / per, ld = apk_score_ld(m);
	if (pair >= npv)
		return;
	const int u = (tid % per) >> 1, half = (tid % per) & 1;
	double *yr = sm + (size_t)pair * apk_score_pair_doubles(m);
	apk_score_col(m, tab, spec + (size_t)2 * q * (m + 1) * (r0 + pair), W, u, half, yr,
		      yr + (size_t)q * ld, ld);
}

APK_FN void apk_score_phase2(const int m, const double *tab, int npv, int tid, double *sm)
{
	const int q = 2 * m, pair = tid / q, t = tid % q, ld = apk_score_ld(m);
	if (pair >= npv)
		return;
	double *y = sm + (size_t)pair * apk_score_pair_doubles(m);
	y[(size_t)2 * q * ld + t] = apk_score_row(m, tab, y + (size_t)t * ld, y + (size_t)(q + t) * ld);
}

APK_FN void apk_score_phase3(const int m, const double *spec, const double *W, int r0, int npv,
			     int tid, const double *sm, double inv, double *resp)
{
	const int q = 2 * m, ld = apk_score_ld(m);
	if (tid >= npv)
		return;
	const double *rowmax = sm + (size_t)tid * apk_score_pair_doubles(m) + (size_t)2 * q * ld;
	resp[r0 + tid] = apk_score_finish(q, rowmax, spec + (size_t)2 * q * (m + 1) * (r0 + tid), W, inv);
}

#endif /* SP_APPLE_KERN_H */
