/* APPLE's per-pixel and per-pair loops in one SIMD variant, included once by each variant's file (apple_score_base.c, apple_score_avx2.c). */
/* No include guard: included once per variant of src/base/cpuisa.h, after
 * apple_score_isa.h and after defining AS_W (doubles per vector: 2 for
 * SSE2, 4 for AVX2) and AS_FN(name) (the variant's names); it defines the
 * variant's vector types, its functions (static) and its table,
 * AS_FN(apple_score_simd_tab), and undefines both macros at its end. */

typedef double AS_FN(vd) __attribute__((vector_size(8 * AS_W)));
typedef int64_t AS_FN(vl) __attribute__((vector_size(8 * AS_W)));
#define AS_VD AS_FN(vd)
#define AS_VL AS_FN(vl)

static inline AS_VD AS_FN(vsqrt)(AS_VD a)
{
#if defined(__x86_64__) && AS_W == 4
	return (AS_VD)_mm256_sqrt_pd((__m256d)a);
#elif defined(__x86_64__) && AS_W == 2
	return (AS_VD)_mm_sqrt_pd((__m128d)a);
#else
	AS_VD r;
	for (int l = 0; l < AS_W; l++)
		r[l] = sqrt(a[l]);
	return r;
#endif
}

/* P1 = R1 conj(W) and P2 = R2 conj(W) over ns interleaved complex values
 * (R2 == NULL: P1 only), in lanes: with R = (a, b) and W = (c, d) per
 * value, P = R (c, c) + (b, a) (d, -d), that is re = a c + b d and
 * im = b c + a (-d), the scalar code's b c - a d to the bit (negation is
 * exact, and x - y is x + (-y) in IEEE arithmetic).  W's two shuffles
 * serve both products. */
static void AS_FN(product)(const double *R1, const double *R2, const double *W, double *P1,
			   double *P2, size_t ns)
{
#if AS_W == 4
	const AS_VL swap = { 1, 0, 3, 2 }, re = { 0, 0, 2, 2 }, im = { 1, 1, 3, 3 };
	const AS_VL neg = { 0, INT64_MIN, 0, INT64_MIN };
#else
	const AS_VL swap = { 1, 0 }, re = { 0, 0 }, im = { 1, 1 };
	const AS_VL neg = { 0, INT64_MIN };
#endif
	size_t t = 0, n = 2 * ns;

	for (; t + AS_W <= n; t += AS_W) {
		AS_VD w, r1;
		memcpy(&w, W + t, sizeof w);
		memcpy(&r1, R1 + t, sizeof r1);
		AS_VD cc = __builtin_shuffle(w, re);
		AS_VD dd = (AS_VD)((AS_VL)__builtin_shuffle(w, im) ^ neg); /* (d, -d) */
		AS_VD p1 = r1 * cc + __builtin_shuffle(r1, swap) * dd;
		memcpy(P1 + t, &p1, sizeof p1);
		if (R2 != NULL) {
			AS_VD r2;
			memcpy(&r2, R2 + t, sizeof r2);
			AS_VD p2 = r2 * cc + __builtin_shuffle(r2, swap) * dd;
			memcpy(P2 + t, &p2, sizeof p2);
		}
	}
	for (; t < n; t += 2) {
		double c = W[t], d = W[t + 1];
		P1[t] = R1[t] * c + R1[t + 1] * d;
		P1[t + 1] = R1[t + 1] * c - R1[t] * d;
		if (R2 != NULL) {
			P2[t] = R2[t] * c + R2[t + 1] * d;
			P2[t + 1] = R2[t + 1] * c - R2[t] * d;
		}
	}
}

/* The maximum of a[0..n) (n >= 1), in two vectors of lanes (the maximum
 * does not depend on the order; a NaN is kept only where a[0] is one, as
 * in a scalar `x > m ? x : m` loop). */
static double AS_FN(max_of)(const double *a, size_t n)
{
	AS_VD m0, m1;
	size_t t = 0;

	for (int l = 0; l < AS_W; l++)
		m0[l] = m1[l] = a[0];
	for (; t + 2 * AS_W <= n; t += 2 * AS_W) {
		AS_VD x0, x1;
		memcpy(&x0, a + t, sizeof x0);
		memcpy(&x1, a + t + AS_W, sizeof x1);
		AS_VL g0 = x0 > m0, g1 = x1 > m1;
		m0 = (AS_VD)(((AS_VL)x0 & g0) | ((AS_VL)m0 & ~g0));
		m1 = (AS_VD)(((AS_VL)x1 & g1) | ((AS_VL)m1 & ~g1));
	}
	double m = a[0];
	for (int l = 0; l < AS_W; l++) {
		m = m0[l] > m ? m0[l] : m;
		m = m1[l] > m ? m1[l] : m;
	}
	for (; t < n; t++)
		m = a[t] > m ? a[t] : m;
	return m;
}

/* The maxima of the real parts (m[0]) and of the imaginary parts (m[1])
 * of n >= 1 interleaved complex values a, in four vectors of lanes that
 * alternate real and imaginary (independent chains; the same bits as two
 * scalar loops, as max_of). */
static void AS_FN(max2_of)(const double *a, size_t n, double m[2])
{
	AS_VD m0, m1, m2, m3;
	size_t t = 0, nd = 2 * n;

	for (int l = 0; l < AS_W; l++)
		m0[l] = m1[l] = m2[l] = m3[l] = a[l % 2];
#define AS_MAX(acc, x)                                                                   \
	do {                                                                             \
		AS_VL g_ = (x) > (acc);                                                  \
		(acc) = (AS_VD)(((AS_VL)(x) & g_) | ((AS_VL)(acc) & ~g_));               \
	} while (0)
	for (; t + 4 * AS_W <= nd; t += 4 * AS_W) {
		AS_VD x0, x1, x2, x3;
		memcpy(&x0, a + t, sizeof x0);
		memcpy(&x1, a + t + AS_W, sizeof x1);
		memcpy(&x2, a + t + 2 * AS_W, sizeof x2);
		memcpy(&x3, a + t + 3 * AS_W, sizeof x3);
		AS_MAX(m0, x0);
		AS_MAX(m1, x1);
		AS_MAX(m2, x2);
		AS_MAX(m3, x3);
	}
	for (; t + AS_W <= nd; t += AS_W) {
		AS_VD x;
		memcpy(&x, a + t, sizeof x);
		AS_MAX(m0, x);
	}
	AS_MAX(m0, m1);
	AS_MAX(m2, m3);
	AS_MAX(m0, m2);
#undef AS_MAX
	m[0] = a[0];
	m[1] = a[1];
	for (int l = 0; l < AS_W; l++)
		m[l % 2] = m0[l] > m[l % 2] ? m0[l] : m[l % 2];
	for (; t < nd; t++)
		m[t % 2] = a[t] > m[t % 2] ? a[t] : m[t % 2];
}

/* Two real-output rows as one complex row (apple_score.c, pack_rows()): the
 * half rows y1, y2 (q/2 + 1 complex) to z (q complex) with, for
 * 0 < k < q/2, z[k] = y1[k] + i y2[k] = (a - d, b + c) and
 * z[q - k] = conj(y1[k]) + i conj(y2[k]) = (a + d, c - b), where
 * y1[k] = (a, b), y2[k] = (c, d); z[0] and (q even) z[q/2] take the real
 * parts of y1's and y2's.  In lanes: x - y as x + (-y), exact, so the same
 * bits as the scalar loop. */
static void AS_FN(pack_row)(const double *y1, const double *y2, double *z, int q)
{
#if AS_W == 4
	const AS_VL swap = { 1, 0, 3, 2 }, pairs = { 2, 3, 0, 1 };
	const AS_VL neg_re = { INT64_MIN, 0, INT64_MIN, 0 }, neg_im = { 0, INT64_MIN, 0, INT64_MIN };
#else
	const AS_VL swap = { 1, 0 };
	const AS_VL neg_re = { INT64_MIN, 0 }, neg_im = { 0, INT64_MIN };
#endif
	const int cw = AS_W / 2; /* complex values per vector */
	int k = 1;

	z[0] = y1[0];
	z[1] = y2[0];
	if (q % 2 == 0) {
		z[q] = y1[q];
		z[q + 1] = y2[q];
	}
	for (; 2 * (k + cw - 1) < q; k += cw) {
		AS_VD a, c;
		memcpy(&a, y1 + 2 * k, sizeof a);
		memcpy(&c, y2 + 2 * k, sizeof c);
		AS_VD dc = __builtin_shuffle(c, swap);          /* (d, c) */
		AS_VD fwd = a + (AS_VD)((AS_VL)dc ^ neg_re);     /* (a - d, b + c) */
		AS_VD rev = dc + (AS_VD)((AS_VL)a ^ neg_im);     /* (d + a, c - b) */
#if AS_W == 4
		rev = __builtin_shuffle(rev, pairs);
#endif
		memcpy(z + 2 * k, &fwd, sizeof fwd);
		memcpy(z + 2 * (q - k - cw + 1), &rev, sizeof rev);
	}
	for (; 2 * k < q; k++) {
		double a = y1[2 * k], b = y1[2 * k + 1], c = y2[2 * k], d = y2[2 * k + 1];
		z[2 * k] = a - d;
		z[2 * k + 1] = b + c;
		z[2 * (q - k)] = d + a;
		z[2 * (q - k) + 1] = c - b;
	}
}

/* The preprocessing's low-pass correlation at row i of the image, for
 * columns [j0, j1) whose taps all lie inside it: im[i][j] = sum over t of
 * kval[t] res[i + ku[t]][j + kv[t]] (res: float32 values as doubles, the
 * sum in double, t in order).  AS_W neighbouring columns are AS_W lanes, each with the same
 * adds in the same order as the scalar loop; the columns past the last
 * whole vector are summed one by one. */
static void AS_FN(lowpass_row)(const double *res, int n_x, int i, int j0, int j1, int nk,
			       const int *ku, const int *kv, const double *kval, double *im,
			       float *out32)
{
	typedef float vf __attribute__((vector_size(4 * AS_W)));
	int j = j0;
	/* four vectors at once: four independent chains of adds (one chain
	 * of nk adds was the loop's bound) */
	for (; j + 4 * AS_W <= j1; j += 4 * AS_W) {
		AS_VD acc[4] = { { 0 }, { 0 }, { 0 }, { 0 } };
		for (int t = 0; t < nk; t++) {
			const double *src = res + (size_t)(i + ku[t]) * n_x + j + kv[t];
			for (int u = 0; u < 4; u++) {
				AS_VD r;
				memcpy(&r, src + u * AS_W, sizeof r);
				acc[u] += kval[t] * r;
			}
		}
		for (int u = 0; u < 4; u++) {
			memcpy(im + (size_t)i * n_x + j + u * AS_W, &acc[u], sizeof acc[u]);
			if (out32 != NULL) {
				vf o = __builtin_convertvector(acc[u], vf);
				memcpy(out32 + (size_t)i * n_x + j + u * AS_W, &o, sizeof o);
			}
		}
	}
	for (; j + AS_W <= j1; j += AS_W) {
		AS_VD acc = { 0 };
		for (int t = 0; t < nk; t++) {
			AS_VD r;
			memcpy(&r, res + (size_t)(i + ku[t]) * n_x + j + kv[t], sizeof r);
			acc += kval[t] * r;
		}
		memcpy(im + (size_t)i * n_x + j, &acc, sizeof acc);
		if (out32 != NULL) {
			vf o = __builtin_convertvector(acc, vf);
			memcpy(out32 + (size_t)i * n_x + j, &o, sizeof o);
		}
	}
	for (; j < j1; j++) {
		double acc = 0.0;
		for (int t = 0; t < nk; t++)
			acc += kval[t] * res[(size_t)(i + ku[t]) * n_x + j + kv[t]];
		im[(size_t)i * n_x + j] = acc;
		if (out32 != NULL)
			out32[(size_t)i * n_x + j] = (float)acc;
	}
}

/* The moments' row sums: a[c] = sum of row[c + k], b[c] = sum of
 * row[c + k]^2, k = 0 .. q-1 in order, for c in [0, nw); AS_W windows are
 * AS_W lanes (the scalar loop's sums, to the bit). */
static void AS_FN(window_sums)(const double *row, int nw, int q, double *a, double *b)
{
	int c = 0;
	for (; c + 2 * AS_W <= nw; c += 2 * AS_W) { /* two vectors: four chains */
		AS_VD sa0 = { 0 }, sb0 = { 0 }, sa1 = { 0 }, sb1 = { 0 };
		for (int k = 0; k < q; k++) {
			AS_VD v0, v1;
			memcpy(&v0, row + c + k, sizeof v0);
			memcpy(&v1, row + c + AS_W + k, sizeof v1);
			sa0 += v0;
			sb0 += v0 * v0;
			sa1 += v1;
			sb1 += v1 * v1;
		}
		memcpy(a + c, &sa0, sizeof sa0);
		memcpy(b + c, &sb0, sizeof sb0);
		memcpy(a + c + AS_W, &sa1, sizeof sa1);
		memcpy(b + c + AS_W, &sb1, sizeof sb1);
	}
	for (; c + AS_W <= nw; c += AS_W) {
		AS_VD sa = { 0 }, sb = { 0 };
		for (int k = 0; k < q; k++) {
			AS_VD v;
			memcpy(&v, row + c + k, sizeof v);
			sa += v;
			sb += v * v;
		}
		memcpy(a + c, &sa, sizeof sa);
		memcpy(b + c, &sb, sizeof sb);
	}
	for (; c < nw; c++) {
		double sa = 0.0, sb = 0.0;
		for (int k = 0; k < q; k++) {
			double v = row[c + k];
			sa += v;
			sb += v * v;
		}
		a[c] = sa;
		b[c] = sb;
	}
}

/* The moments' column pass for output row r: over the row sums a, b
 * ([.][nw], rows r .. r+q-1 in order) the window sums, then mean = sum_a
 * inv and std = sqrt(max(0, sum_b inv - mean^2)), for c in [0, nw); AS_W
 * windows are AS_W lanes, the sums kept in registers (the scalar loop's
 * bits). */
static void AS_FN(window_cols)(const double *a, const double *b, int nw, int r, int q,
			       double inv, double *mean, double *std)
{
	int c = 0;
	const AS_VD zero = { 0 };
	for (; c + 2 * AS_W <= nw; c += 2 * AS_W) { /* two vectors: four chains */
		AS_VD sa[2] = { zero, zero }, sb[2] = { zero, zero };
		for (int k = 0; k < q; k++)
			for (int u = 0; u < 2; u++) {
				AS_VD va, vb;
				memcpy(&va, a + (size_t)(r + k) * nw + c + u * AS_W, sizeof va);
				memcpy(&vb, b + (size_t)(r + k) * nw + c + u * AS_W, sizeof vb);
				sa[u] += va;
				sb[u] += vb;
			}
		for (int u = 0; u < 2; u++) {
			const AS_VD mu = sa[u] * inv, var = sb[u] * inv - mu * mu;
			const AS_VD sd = AS_FN(vsqrt)((AS_VD)((AS_VL)var & (AS_VL)(var > zero)));
			memcpy(mean + c + u * AS_W, &mu, sizeof mu);
			memcpy(std + c + u * AS_W, &sd, sizeof sd);
		}
	}
	for (; c + AS_W <= nw; c += AS_W) {
		AS_VD sa = zero, sb = zero;
		for (int k = 0; k < q; k++) {
			AS_VD va, vb;
			memcpy(&va, a + (size_t)(r + k) * nw + c, sizeof va);
			memcpy(&vb, b + (size_t)(r + k) * nw + c, sizeof vb);
			sa += va;
			sb += vb;
		}
		const AS_VD mu = sa * inv, var = sb * inv - mu * mu;
		const AS_VD sd = AS_FN(vsqrt)((AS_VD)((AS_VL)var & (AS_VL)(var > zero)));
		memcpy(mean + c, &mu, sizeof mu);
		memcpy(std + c, &sd, sizeof sd);
	}
	for (; c < nw; c++) {
		double sa = 0.0, sb = 0.0;
		for (int k = 0; k < q; k++) {
			sa += a[(size_t)(r + k) * nw + c];
			sb += b[(size_t)(r + k) * nw + c];
		}
		const double mu = sa * inv, var = sb * inv - mu * mu;
		mean[c] = mu;
		std[c] = sqrt(var > 0.0 ? var : 0.0);
	}
}

/* exp() of every lane: glibc's libmvec two lanes at a time where the
 * build has it (AS_MVEC_EXP), the same 2-wide call in every variant so
 * that the variants agree to the bit; scalar exp() otherwise. */
static inline AS_VD AS_FN(vexp)(AS_VD x)
{
	AS_VD r;
#ifdef AS_MVEC_EXP
	for (int l = 0; l < AS_W; l += 2) {
		as_v2d_t h = { x[l], x[l + 1] }, e = _ZGVbN2v_exp(h);
		r[l] = e[0];
		r[l + 1] = e[1];
	}
#else
	for (int l = 0; l < AS_W; l++)
		r[l] = exp(x[l]);
#endif
	return r;
}

/* The SVM's decision values d[c] of n windows (features mean[c], std[c],
 * standardised as in training), AS_W windows as lanes: per lane
 * apple_svm_decision()'s operations in its order, with vexp() for exp();
 * the last lanes of a short tail repeat window n - 1. */
static void AS_FN(decisions)(const apple_svm_t *m, const double *mean, const double *std, int n,
			     double *d)
{
	const double mu0 = m->mu[0], mu1 = m->mu[1], s0 = m->scale[0], s1 = m->scale[1];
	const double ng = -m->gamma;
	const AS_VD zero = { 0 };

	for (int c = 0; c < n; c += AS_W) {
		AS_VD f0, f1, sum = zero;
		for (int l = 0; l < AS_W; l++) {
			int w = c + l < n ? c + l : n - 1;
			f0[l] = mean[w];
			f1[l] = std[w];
		}
		f0 = (f0 - mu0) / s0;
		f1 = (f1 - mu1) / s1;
		for (int i = 0; i < m->nsv; i++) {
			AS_VD d0 = f0 - m->sv[2 * i], d1 = f1 - m->sv[2 * i + 1];
			AS_VD d2 = zero;
			d2 += d0 * d0;
			d2 += d1 * d1;
			sum += m->coef[i] * AS_FN(vexp)(ng * d2); /* -(g) d2 = -(g d2) exactly */
		}
		sum -= m->rho;
		for (int l = 0; l < AS_W && c + l < n; l++)
			d[c + l] = sum[l];
	}
}

/* ---- the score's inverse transforms in lanes (q = 2m, m odd) ----------
 * AS_W references are AS_W lanes; one query's spectrum W is broadcast.
 * Per lane, the same operations as a scalar loop would do, so every
 * variant computes the same bits (no FMA, no horizontal operation).
 *
 * The 2-D inverse of P = R conj(W) ([q][m + 1] half spectrum) is its
 * column DFTs (length q, complex), then the rows' real inverses (length q,
 * Hermitian input).  Both use q = 2 m with m odd as Good-Thomas (prime
 * factor) indexing, n = (m n1 + 2 n2) mod q: no twiddle factors, two
 * DFTs of length m of x[2 n2] +- x[2 n2 + m], X[k] = DFT_m(A or B by the
 * parity of k)[k mod m].  A DFT of odd length m pairs its inputs j and
 * m - j (sums p_j and differences d_j), so that its outputs k and m - k
 * share the cosine sums C_k and the sine sums S_k: X_k = C_k + i S_k,
 * X_(m-k) = C_k - i S_k (complex for the columns; for the rows the
 * input of each half is Hermitian and the outputs real).  Which row an
 * output lands in does not matter: only the maximum over all of them is
 * kept.  q = P m with P = 4, 8 or 16 (lane_bodyP()) splits the same way
 * into a DFT of length P (radix 2, in lanes) and P DFTs of length m.
 * tab: cos, sin, 2 cos and 2 sin of 2 pi j k / m, j, k = 1..(m-1)/2, at
 * [c][j][k], AS_LANE_T doubles per c (apple_score_lane_tab()).  Every q
 * the route covers has its own function (AS_LANE_ROUTES below), so that
 * each loop has a constant trip count and is unrolled: the sums live in
 * registers. */
/* (the table layout and the sizes: apple_score_isa.h) */

static inline AS_VD AS_FN(vmax)(AS_VD x, AS_VD m) /* x > m ? x : m per lane */
{
#if defined(__x86_64__) && AS_W == 4
	return (AS_VD)_mm256_max_pd((__m256d)x, (__m256d)m);
#elif defined(__x86_64__) && AS_W == 2
	return (AS_VD)_mm_max_pd((__m128d)x, (__m128d)m);
#else
	for (int l = 0; l < AS_W; l++)
		m[l] = x[l] > m[l] ? x[l] : m[l];
	return m;
#endif
}

/* Complex DFT of odd length m (backward, e^{+2 pi i j k / m}): a -> x. */
static inline __attribute__((always_inline)) void AS_FN(lane_cdft)(const int m, const double *tab,
								  const AS_VD *ar, const AS_VD *ai,
								  AS_VD *xr, AS_VD *xi)
{
	const int h = (m - 1) / 2;
	AS_VD pr[AS_LANE_MAXH + 1], pi[AS_LANE_MAXH + 1], dr[AS_LANE_MAXH + 1], di[AS_LANE_MAXH + 1];
	AS_VD s0r = ar[0], s0i = ai[0];

#pragma GCC unroll 16
	for (int j = 1; j <= h; j++) {
		pr[j] = ar[j] + ar[m - j];
		pi[j] = ai[j] + ai[m - j];
		dr[j] = ar[j] - ar[m - j];
		di[j] = ai[j] - ai[m - j];
		s0r += pr[j];
		s0i += pi[j];
	}
	xr[0] = s0r;
	xi[0] = s0i;
#pragma GCC unroll 16
	for (int k = 1; k <= h; k++) {
		AS_VD cr = ar[0], ci = ai[0];
		AS_VD sr = dr[1] * AS_TAB(tab, 1, 1, k), si = di[1] * AS_TAB(tab, 1, 1, k);
		cr += pr[1] * AS_TAB(tab, 0, 1, k);
		ci += pi[1] * AS_TAB(tab, 0, 1, k);
#pragma GCC unroll 16
		for (int j = 2; j <= h; j++) {
			cr += pr[j] * AS_TAB(tab, 0, j, k);
			ci += pi[j] * AS_TAB(tab, 0, j, k);
			sr += dr[j] * AS_TAB(tab, 1, j, k);
			si += di[j] * AS_TAB(tab, 1, j, k);
		}
		xr[k] = cr - si; /* C + i (i d sin) */
		xi[k] = ci + sr;
		xr[m - k] = cr + si;
		xi[m - k] = ci - sr;
	}
}

/* The maximum of mx and the real DFT of odd length m of a Hermitian
 * sequence given by a0 (real) and a[1..(m-1)/2]. */
static inline __attribute__((always_inline)) AS_VD AS_FN(lane_rdft_max)(const int m, const double *tab,
									AS_VD a0, const AS_VD *ar,
									const AS_VD *ai, AS_VD mx)
{
	const int h = (m - 1) / 2;
	AS_VD s = ar[1];

#pragma GCC unroll 16
	for (int j = 2; j <= h; j++)
		s += ar[j];
	mx = AS_FN(vmax)(a0 + s * 2.0, mx);
#pragma GCC unroll 16
	for (int k = 1; k <= h; k++) {
		AS_VD c = a0 + ar[1] * AS_TAB(tab, 2, 1, k), sv = ai[1] * AS_TAB(tab, 3, 1, k);
#pragma GCC unroll 16
		for (int j = 2; j <= h; j++) {
			c += ar[j] * AS_TAB(tab, 2, j, k);
			sv += ai[j] * AS_TAB(tab, 3, j, k);
		}
		mx = AS_FN(vmax)(c - sv, mx);
		mx = AS_FN(vmax)(c + sv, mx);
	}
	return mx;
}

/* out[l] = (max cc_l - P_l[0]) inv, cc_l the circular cross-correlation of
 * lane l's reference with the query: Rl [2][q (m + 1)][AS_W] (re, then im,
 * of the references' half spectra), wr, wi [q (m + 1)] the query's; Y
 * scratch of 2 q (m + 1) AS_W doubles. */
static inline __attribute__((always_inline)) void AS_FN(lane_body2)(const int m, const double *tab,
								  const double *Rl, const double *wr,
								  const double *wi, double *Y, double inv,
								  double *out)
{
	typedef AS_VD vdu_t __attribute__((aligned(8))); /* Y: any double alignment */
	const int q = 2 * m, nh = m + 1, h = (m - 1) / 2;
	const size_t ns = (size_t)q * nh;
	vdu_t *Yr = (vdu_t *)Y, *Yi = Yr + ns;

	for (int u = 0; u < nh; u++) {
		AS_VD ar[AS_LANE_MAXM], ai[AS_LANE_MAXM], br[AS_LANE_MAXM], bi[AS_LANE_MAXM];
		AS_VD xr[AS_LANE_MAXM], xi[AS_LANE_MAXM];
#pragma GCC unroll 16
		for (int n2 = 0; n2 < m; n2++) {
			const size_t o1 = (size_t)(2 * n2) * nh + u, o2 = (size_t)((2 * n2 + m) % q) * nh + u;
			AS_VD r1, i1, r2, i2;
			memcpy(&r1, Rl + o1 * AS_W, sizeof r1);
			memcpy(&i1, Rl + (ns + o1) * AS_W, sizeof i1);
			memcpy(&r2, Rl + o2 * AS_W, sizeof r2);
			memcpy(&i2, Rl + (ns + o2) * AS_W, sizeof i2);
			/* R conj(W): re = a c + b d, im = b c - a d (product()'s) */
			AS_VD x1r = r1 * wr[o1] + i1 * wi[o1], x1i = i1 * wr[o1] - r1 * wi[o1];
			AS_VD x2r = r2 * wr[o2] + i2 * wi[o2], x2i = i2 * wr[o2] - r2 * wi[o2];
			ar[n2] = x1r + x2r;
			ai[n2] = x1i + x2i;
			br[n2] = x1r - x2r;
			bi[n2] = x1i - x2i;
		}
		AS_FN(lane_cdft)(m, tab, ar, ai, xr, xi);
#pragma GCC unroll 16
		for (int k = 0; k < m; k++) {
			Yr[(size_t)k * nh + u] = xr[k];
			Yi[(size_t)k * nh + u] = xi[k];
		}
		AS_FN(lane_cdft)(m, tab, br, bi, xr, xi);
#pragma GCC unroll 16
		for (int k = 0; k < m; k++) {
			Yr[(size_t)(m + k) * nh + u] = xr[k];
			Yi[(size_t)(m + k) * nh + u] = xi[k];
		}
	}
	/* rows: Z[u] = Y[u] (u <= m), conj(Y[q - u]) beyond; its Good-Thomas
	 * halves A'_j = Z[2j] + Z[2j + m], B'_j = Z[2j] - Z[2j + m], with
	 * Z[2j + m] = conj(Y[m - 2j]) (j >= 1), Z[m] = Y[m]; the imaginary
	 * parts of Y[0] and Y[m] are not used (as a c2r's) */
	const AS_VD zero = { 0 };
	AS_VD mx = zero - (double)INFINITY; /* every cc value is >= -inf */
	for (int t = 0; t < q; t++) {
		const vdu_t *yr = Yr + (size_t)t * nh, *yi = Yi + (size_t)t * nh;
		AS_VD pr[AS_LANE_MAXH + 1], pi[AS_LANE_MAXH + 1], qr[AS_LANE_MAXH + 1], qi[AS_LANE_MAXH + 1];
#pragma GCC unroll 16
		for (int j = 1; j <= h; j++) {
			pr[j] = yr[2 * j] + yr[m - 2 * j];
			pi[j] = yi[2 * j] - yi[m - 2 * j];
			qr[j] = yr[2 * j] - yr[m - 2 * j];
			qi[j] = yi[2 * j] + yi[m - 2 * j];
		}
		mx = AS_FN(lane_rdft_max)(m, tab, yr[0] + yr[m], pr, pi, mx);
		mx = AS_FN(lane_rdft_max)(m, tab, yr[0] - yr[m], qr, qi, mx);
	}
	AS_VD r0, i0;
	memcpy(&r0, Rl, sizeof r0);
	memcpy(&i0, Rl + ns * AS_W, sizeof i0);
	const AS_VD res = (mx - (r0 * wr[0] + i0 * wi[0])) * inv;
	memcpy(out, &res, sizeof res);
}

/* DFT of length 4 (backward) of z, in place: z[c] = sum_n z[n] i^(n c). */
static inline __attribute__((always_inline)) void AS_FN(lane_dft4)(AS_VD *zr, AS_VD *zi)
{
	{
		const AS_VD t0r = zr[0] + zr[2], t0i = zi[0] + zi[2], t1r = zr[0] - zr[2], t1i = zi[0] - zi[2];
		const AS_VD t2r = zr[1] + zr[3], t2i = zi[1] + zi[3], t3r = zr[1] - zr[3], t3i = zi[1] - zi[3];
		zr[0] = t0r + t2r;
		zi[0] = t0i + t2i;
		zr[2] = t0r - t2r;
		zi[2] = t0i - t2i;
		zr[1] = t1r - t3i; /* t1 + i t3 */
		zi[1] = t1i + t3r;
		zr[3] = t1r + t3i; /* t1 - i t3 */
		zi[3] = t1i - t3r;
	}
}

/* DFT of length 8 (backward) in place: the DFTs of length 4 of the even
 * and the odd inputs, then z[c] = E[c] + w^c O[c], z[c + 4] = E[c] - w^c
 * O[c], w = e^{i pi / 4}. */
static inline __attribute__((always_inline)) void AS_FN(lane_dft8)(AS_VD *zr, AS_VD *zi)
{
	AS_VD er[4] = { zr[0], zr[2], zr[4], zr[6] }, ei[4] = { zi[0], zi[2], zi[4], zi[6] };
	AS_VD or_[4] = { zr[1], zr[3], zr[5], zr[7] }, oi[4] = { zi[1], zi[3], zi[5], zi[7] };
	AS_FN(lane_dft4)(er, ei);
	AS_FN(lane_dft4)(or_, oi);
	const double h = M_SQRT1_2;
	AS_VD wr[4], wi[4];
	wr[0] = or_[0];
	wi[0] = oi[0];
	wr[1] = (or_[1] - oi[1]) * h; /* (1 + i) / sqrt 2 */
	wi[1] = (or_[1] + oi[1]) * h;
	wr[2] = -oi[2]; /* i */
	wi[2] = or_[2];
	wr[3] = (-or_[3] - oi[3]) * h; /* (-1 + i) / sqrt 2 */
	wi[3] = (or_[3] - oi[3]) * h;
	for (int c = 0; c < 4; c++) {
		zr[c] = er[c] + wr[c];
		zi[c] = ei[c] + wi[c];
		zr[c + 4] = er[c] - wr[c];
		zi[c + 4] = ei[c] - wi[c];
	}
}

/* z[c] = E[c] + w^c O[c], z[c + n] = E[c] - w^c O[c], w = e^{i pi / n}:
 * the last radix-2 step of a DFT of length 2n (backward). */
static inline __attribute__((always_inline)) void AS_FN(lane_radix2)(const int n, const AS_VD *er,
								    const AS_VD *ei, const AS_VD *or_,
								    const AS_VD *oi, AS_VD *zr, AS_VD *zi)
{
#pragma GCC unroll 16
	for (int c = 0; c < n; c++) {
		const double wc = cos(M_PI * c / n), ws = sin(M_PI * c / n); /* constants */
		const AS_VD tr = or_[c] * wc - oi[c] * ws, ti = or_[c] * ws + oi[c] * wc;
		zr[c] = er[c] + tr;
		zi[c] = ei[c] + ti;
		zr[c + n] = er[c] - tr;
		zi[c + n] = ei[c] - ti;
	}
}

/* DFT of length 16 (backward) in place: two of length 8, one radix-2 step. */
static inline __attribute__((always_inline)) void AS_FN(lane_dft16)(AS_VD *zr, AS_VD *zi)
{
	AS_VD er[8], ei[8], or_[8], oi[8];
#pragma GCC unroll 8
	for (int c = 0; c < 8; c++) {
		er[c] = zr[2 * c];
		ei[c] = zi[2 * c];
		or_[c] = zr[2 * c + 1];
		oi[c] = zi[2 * c + 1];
	}
	AS_FN(lane_dft8)(er, ei);
	AS_FN(lane_dft8)(or_, oi);
	AS_FN(lane_radix2)(8, er, ei, or_, oi, zr, zi);
}

/* DFT of length P = 4, 8 or 16 (backward) of z, in place. */
static inline __attribute__((always_inline)) void AS_FN(lane_dft48)(const int P, AS_VD *zr, AS_VD *zi)
{
	if (P == 4)
		AS_FN(lane_dft4)(zr, zi);
	else if (P == 8)
		AS_FN(lane_dft8)(zr, zi);
	else
		AS_FN(lane_dft16)(zr, zi);
}

/* The DFT of length P of z (z is overwritten), output c to dr[c][at],
 * di[c][at] (a macro: the arrays keep their shapes, so their elements
 * stay in registers). */
#ifndef AS_LANE_DFT_TO
#define AS_LANE_DFT_TO(FN, P, zr, zi, dr, di, at)                   \
	do {                                                        \
		FN(P, zr, zi);                                      \
		_Pragma("GCC unroll 16") for (int c_ = 0; c_ < (P); c_++) \
		{                                                   \
			(dr)[c_][at] = (zr)[c_];                    \
			(di)[c_][at] = (zi)[c_];                    \
		}                                                   \
	} while (0)
#endif

/* lane_body2() for q = P m, P = 4, 8 or 16, m odd >= 3: Good-Thomas
 * indexing
 * n = (m n1 + P n2) mod q, a DFT of length P over n1 for each n2, then P
 * DFTs of length m.  In the rows, the P sequences A'_c[j] = sum_n1
 * w_P^(n1 c) Z[(m n1 + P j) mod q] are each Hermitian in j (their DFTs
 * are the row's real outputs v = c mod P), so j <= (m - 1)/2 suffices. */
static inline __attribute__((always_inline)) void AS_FN(lane_bodyP)(const int P, const int m,
								   const double *tab, const double *Rl,
								   const double *wr, const double *wi,
								   double *Y, double inv, double *out)
{
	typedef AS_VD vdu_t __attribute__((aligned(8)));
	const int q = P * m, nh = q / 2 + 1, h = (m - 1) / 2;
	const size_t ns = (size_t)q * nh;
	vdu_t *Yr = (vdu_t *)Y, *Yi = Yr + ns;

	for (int u = 0; u < nh; u++) {
		AS_VD ar[16][AS_LANE_MAXM4], ai[16][AS_LANE_MAXM4], xr[AS_LANE_MAXM4], xi[AS_LANE_MAXM4];
#pragma GCC unroll 16
		for (int n2 = 0; n2 < m; n2++) {
			AS_VD zr[16], zi[16];
#pragma GCC unroll 16
			for (int n1 = 0; n1 < P; n1++) {
				const size_t o = (size_t)((m * n1 + P * n2) % q) * nh + u;
				AS_VD r, i;
				memcpy(&r, Rl + o * AS_W, sizeof r);
				memcpy(&i, Rl + (ns + o) * AS_W, sizeof i);
				zr[n1] = r * wr[o] + i * wi[o]; /* R conj(W) */
				zi[n1] = i * wr[o] - r * wi[o];
			}
			AS_LANE_DFT_TO(AS_FN(lane_dft48), P, zr, zi, ar, ai, n2);
		}
#pragma GCC unroll 16
		for (int c = 0; c < P; c++) {
			AS_FN(lane_cdft)(m, tab, ar[c], ai[c], xr, xi);
#pragma GCC unroll 16
			for (int k = 0; k < m; k++) {
				Yr[(size_t)(c * m + k) * nh + u] = xr[k];
				Yi[(size_t)(c * m + k) * nh + u] = xi[k];
			}
		}
	}
	const AS_VD zero = { 0 };
	AS_VD mx = zero - (double)INFINITY;
	for (int t = 0; t < q; t++) {
		const vdu_t *yr = Yr + (size_t)t * nh, *yi = Yi + (size_t)t * nh;
		AS_VD cr[16][AS_LANE_MAXH + 1], ci[16][AS_LANE_MAXH + 1];
#pragma GCC unroll 16
		for (int j = 0; j <= h; j++) {
			AS_VD zr[16], zi[16];
#pragma GCC unroll 16
			for (int n1 = 0; n1 < P; n1++) {
				/* Z[v]: Y[v] up to q/2, conj(Y[q - v]) beyond; the
				 * imaginary parts of Y[0] and Y[q/2] are not used */
				const int v = (m * n1 + P * j) % q;
				if (v == 0 || v == q / 2) {
					zr[n1] = yr[v];
					zi[n1] = zero;
				} else if (v < q / 2) {
					zr[n1] = yr[v];
					zi[n1] = yi[v];
				} else {
					zr[n1] = yr[q - v];
					zi[n1] = -yi[q - v];
				}
			}
			AS_LANE_DFT_TO(AS_FN(lane_dft48), P, zr, zi, cr, ci, j);
		}
#pragma GCC unroll 16
		for (int c = 0; c < P; c++)
			mx = AS_FN(lane_rdft_max)(m, tab, cr[c][0], cr[c], ci[c], mx);
	}
	AS_VD r0, i0;
	memcpy(&r0, Rl, sizeof r0);
	memcpy(&i0, Rl + ns * AS_W, sizeof i0);
	const AS_VD res = (mx - (r0 * wr[0] + i0 * wi[0])) * inv;
	memcpy(out, &res, sizeof res);
}

/* One function per q the route covers (constant trip counts: unrolled). */
#define AS_LANE_Q(P, M)                                                                             \
	static void AS_FN(lane_pairs_##P##_##M)(const double *tab, const double *Rl, const double *wr, \
						const double *wi, double *Y, double inv, double *out) \
	{                                                                                           \
		if (P == 2)                                                                         \
			AS_FN(lane_body2)(M, tab, Rl, wr, wi, Y, inv, out);                         \
		else                                                                                \
			AS_FN(lane_bodyP)(P, M, tab, Rl, wr, wi, Y, inv, out);                      \
	}
AS_LANE_ROUTES(AS_LANE_Q)
#undef AS_LANE_Q

/* The responses for q = P m of the routes above (apple_score_lane_m());
 * -1 for another q. */
static int AS_FN(lane_pairs)(int q, const double *tab, const double *Rl, const double *wr,
			     const double *wi, double *Y, double inv, double *out)
{
	switch (q) {
#define AS_CASE(P, M)                                                              \
	case (P) * (M):                                                            \
		AS_FN(lane_pairs_##P##_##M)(tab, Rl, wr, wi, Y, inv, out);          \
		return 0;
		AS_LANE_ROUTES(AS_CASE)
#undef AS_CASE
	default:
		return -1;
	}
}

const apple_score_simd_t AS_FN(apple_score_simd_tab) = {
	AS_FN(product), AS_FN(max_of), AS_FN(max2_of), AS_FN(pack_row), AS_FN(lowpass_row),
	AS_FN(window_sums), AS_FN(window_cols), AS_FN(decisions), AS_FN(lane_pairs), AS_W
};

#undef AS_VD
#undef AS_VL
#undef AS_W
#undef AS_FN
