/* Symmetric eigendecompositions of EH_W small matrices at once, one per SIMD lane (extract_cpu.c). */
/* No include guard: included once per variant of src/base/cpuisa.h, after
 * defining EH_W (doubles per vector: 2 for SSE2, 4 for AVX2) and
 * EH_FN(name) (the variant's names); it defines the variant's vector types
 * and undefines both macros at its end.
 *
 * The algorithm is the classic pair (Wilkinson and Reinsch's Handbook
 * tred2 and tql2): Householder reduction to tridiagonal form with the
 * transformations accumulated, then the implicit QL iteration with
 * Wilkinson shifts, its rotations applied to the accumulated vectors.  Each
 * lane runs it on its own matrix with the same sequence of operations;
 * where lanes differ (the QL sweep's length, a converged eigenvalue) the
 * lane's rotation is the identity and its state is kept by a select.  A
 * case the lanes cannot share (a value that is not finite, a zero rotation
 * radius, no convergence in EH_MAXIT sweeps) fails the whole group, and
 * the caller uses LAPACK for its matrices.  No
 * FMA, and IEEE sqrt and division: every variant gives the same bits. */

typedef double EH_FN(vd) __attribute__((vector_size(8 * EH_W)));
typedef int64_t EH_FN(vl) __attribute__((vector_size(8 * EH_W)));
#define EH_VD EH_FN(vd)
#define EH_VL EH_FN(vl)

static inline EH_VD EH_FN(sel)(EH_VL m, EH_VD a, EH_VD b)
{
	return (EH_VD)(((EH_VL)a & m) | ((EH_VL)b & ~m));
}

static inline EH_VD EH_FN(vsqrt)(EH_VD a)
{
#if defined(__x86_64__) && EH_W == 4
	__m256d r = _mm256_sqrt_pd((__m256d)a);
	return (EH_VD)r;
#elif defined(__x86_64__) && EH_W == 2
	__m128d r = _mm_sqrt_pd((__m128d)a);
	return (EH_VD)r;
#else
	EH_VD r;
	for (int l = 0; l < EH_W; l++)
		r[l] = sqrt(a[l]);
	return r;
#endif
}

/* The tridiagonal reduction and QL iteration of one group: a [m][m] lanes
 * (row i, column j at a[i m + j]; the lower triangle is read), into
 * eigenvectors z [m][m] (vector i: z[i m + k], k < m, contiguous) and
 * eigenvalues d [m] (unsorted); e, g [m] are scratch.  Every loop walks
 * rows of a or vectors of z, contiguous.  Returns 0, or -1 when a lane met
 * a case the group cannot share (the outputs are then undefined). */
static int EH_FN(tridiag_ql)(int m, EH_VD *a, EH_VD *z, EH_VD *d, EH_VD *e, EH_VD *g)
{
#define A(i, j) a[(size_t)(i) * (size_t)m + (size_t)(j)]
#define Z(i, k) z[(size_t)(i) * (size_t)m + (size_t)(k)]
	const EH_VD zero = { 0 }, one = zero + 1.0;
	const EH_VL absmask = (EH_VL){ 0 } + INT64_MAX;

	/* Householder: row i's part left of the diagonal to a multiple of
	 * e_(i-1); u kept in row i, u / h in column i */
	for (int i = m - 1; i > 0; i--) {
		const int l = i - 1;
		EH_VD h = zero;
		if (l > 0) {
			EH_VD scale = zero;
			for (int k = 0; k <= l; k++)
				scale += (EH_VD)((EH_VL)A(i, k) & absmask);
			for (int t = 0; t < EH_W; t++)
				if (!(scale[t] >= 0.0 && scale[t] <= DBL_MAX))
					return -1; /* not finite */
			/* a lane whose row is reduced already (scale 0: a wavelength
			 * decoupled from the others, e.g. where every pixel is masked)
			 * skips the step: u = 0, h = 0, its 1/h and hh taken as 0, so
			 * that every update below leaves it as it is */
			const EH_VL zl = scale == zero;
			scale = EH_FN(sel)(zl, one, scale);
			const EH_VD inv = one / scale;
			for (int k = 0; k <= l; k++) {
				A(i, k) *= inv;
				h += A(i, k) * A(i, k);
			}
			EH_VD f = A(i, l), sq = EH_FN(vsqrt)(h);
			EH_VD gl = EH_FN(sel)(f >= zero, -sq, sq);
			e[i] = scale * gl;
			h -= f * gl;
			A(i, l) = f - gl;
			const EH_VD ih = EH_FN(sel)(zl, zero, one / h);
			/* p = A u over the lower triangle, row by row */
			for (int j = 0; j <= l; j++)
				g[j] = zero;
			for (int j = 0; j <= l; j++) {
				const EH_VD uj = A(i, j);
				EH_VD acc = A(j, j) * uj;
				for (int k = 0; k < j; k++) {
					acc += A(j, k) * A(i, k);
					g[k] += A(j, k) * uj;
				}
				g[j] += acc;
			}
			f = zero;
			for (int j = 0; j <= l; j++) {
				A(j, i) = A(i, j) * ih;
				e[j] = g[j] * ih;
				f += e[j] * A(i, j);
			}
			const EH_VD hh = EH_FN(sel)(zl, zero, f / (h + h));
			for (int j = 0; j <= l; j++) {
				const EH_VD ff = A(i, j), gg = e[j] - hh * ff;
				e[j] = gg;
				for (int k = 0; k <= j; k++)
					A(j, k) -= ff * e[k] + gg * A(i, k);
			}
		} else {
			e[i] = A(i, l);
		}
		d[i] = h;
	}
	/* the accumulated transformations, rows 0 .. i-1 of columns 0 .. i-1
	 * updated by row i (where d[i] = h = 0, row i's u is 0: no change) */
	for (int i = 0; i < m; i++) {
		const int l = i - 1;
		if (i > 1) {
			for (int j = 0; j <= l; j++)
				g[j] = zero;
			for (int k = 0; k <= l; k++) {
				const EH_VD aik = A(i, k);
				for (int j = 0; j <= l; j++)
					g[j] += aik * A(k, j);
			}
			for (int k = 0; k <= l; k++) {
				const EH_VD aki = A(k, i);
				for (int j = 0; j <= l; j++)
					A(k, j) -= g[j] * aki;
			}
		}
		d[i] = A(i, i);
		A(i, i) = one;
		for (int j = 0; j <= l; j++)
			A(j, i) = A(i, j) = zero;
	}
	/* the vectors, transposed: vector i contiguous */
	for (int k = 0; k < m; k++)
		for (int i = 0; i < m; i++)
			Z(i, k) = A(k, i);

	/* implicit QL with Wilkinson shifts on (d, e) */
	for (int i = 1; i < m; i++)
		e[i - 1] = e[i];
	e[m - 1] = zero;
	for (int l = 0; l < m; l++) {
		for (int iter = 0;; iter++) {
			int mk[EH_W], top = l, any = 0;
			/* per lane: the first negligible off-diagonal at or after l */
			for (int t = 0; t < EH_W; t++) {
				int k = l;
				for (; k < m - 1; k++) {
					const double dd = fabs(d[k][t]) + fabs(d[k + 1][t]);
					if (fabs(e[k][t]) <= 0x1p-53 * dd)
						break;
				}
				mk[t] = k;
				top = k > top ? k : top;
				any |= k != l;
			}
			if (!any)
				break;
			if (iter == EH_MAXIT)
				return -1;
			EH_VD gs = (d[l + 1] - d[l]) / (e[l] + e[l]);
			EH_VD r = EH_FN(vsqrt)(gs * gs + one);
			EH_VD dm;
			EH_VL act;
			for (int t = 0; t < EH_W; t++) {
				dm[t] = d[mk[t]][t];
				act[t] = mk[t] != l ? -1 : 0;
			}
			gs = dm - d[l] + e[l] / (gs + EH_FN(sel)(gs >= zero, r, -r));
			EH_VD s = one, c = one, p = zero;
			for (int i = top - 1; i >= l; i--) {
				EH_VL live;
				for (int t = 0; t < EH_W; t++)
					live[t] = i < mk[t] ? -1 : 0;
				const EH_VD f = s * e[i], b = c * e[i];
				EH_VD rr = EH_FN(vsqrt)(f * f + gs * gs);
				for (int t = 0; t < EH_W; t++)
					if (live[t] && !(rr[t] > 0.0))
						return -1; /* underflow: LAPACK's business */
				rr = EH_FN(sel)(live, rr, one);
				const EH_VD sn = f / rr, cn = gs / rr, gn = d[i + 1] - p;
				const EH_VD r2 = (d[i] - gn) * sn + (cn + cn) * b, pn = sn * r2;
				e[i + 1] = EH_FN(sel)(live, rr, e[i + 1]);
				d[i + 1] = EH_FN(sel)(live, gn + pn, d[i + 1]);
				gs = EH_FN(sel)(live, cn * r2 - b, gs);
				s = EH_FN(sel)(live, sn, s);
				c = EH_FN(sel)(live, cn, c);
				p = EH_FN(sel)(live, pn, p);
				/* vectors i, i + 1: a dead lane's rotation is (c, s) = (1, 0) */
				const EH_VD sz = EH_FN(sel)(live, sn, zero), cz = EH_FN(sel)(live, cn, one);
				EH_VD *zi = &Z(i, 0), *zj = &Z(i + 1, 0);
				for (int k = 0; k < m; k++) {
					const EH_VD x = zi[k], y = zj[k];
					zj[k] = sz * x + cz * y;
					zi[k] = cz * x - sz * y;
				}
			}
			d[l] = EH_FN(sel)(act, d[l] - p, d[l]);
			e[l] = EH_FN(sel)(act, gs, e[l]);
			for (int t = 0; t < EH_W; t++)
				if (mk[t] != l)
					e[mk[t]][t] = 0.0;
		}
	}
	return 0;
#undef A
#undef Z
}

/* Eigendecompositions of the nb m x m symmetric matrices mat[k] (lower
 * triangles, column-major, leading dimension m), EH_W at a time (a short
 * last group repeats its last matrix): on success mat[k] is overwritten
 * with the eigenvectors (column i: mat[k][i m ..]) and ev[k] [m] with the
 * eigenvalues, unsorted, and ok[k] = 1; a failed group leaves its
 * matrices as they were, with ok[k] = 0, as does a stop requested before
 * a group (sp_cancel_requested(): the caller checks it after the call and
 * drops the results).  work: eigh_batch_work(m) doubles. */
static void EH_FN(eigh)(int m, int nb, double *const *mat, double *const *ev, int *ok,
			double *work)
{
	EH_VD *a = (EH_VD *)(void *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
	EH_VD *z = a + (size_t)m * (size_t)m, *d = z + (size_t)m * (size_t)m, *e = d + m, *g = e + m;

	for (int k0 = 0; k0 < nb; k0 += EH_W) {
		if (sp_cancel_requested()) { /* a stop: the rest is not needed (cancel.h) */
			for (int k = k0; k < nb; k++)
				ok[k] = 0;
			return;
		}
		const double *src[EH_W];
		for (int t = 0; t < EH_W; t++)
			src[t] = mat[k0 + t < nb ? k0 + t : nb - 1];
		for (int c = 0; c < m; c++)
			for (int r = c; r < m; r++) {
				EH_VD v;
				for (int t = 0; t < EH_W; t++)
					v[t] = src[t][(size_t)c * m + r];
				a[(size_t)r * m + c] = a[(size_t)c * m + r] = v;
			}
		const int good = EH_FN(tridiag_ql)(m, a, z, d, e, g) == 0;
		for (int t = 0; t < EH_W && k0 + t < nb; t++) {
			ok[k0 + t] = good;
			if (!good)
				continue;
			double *v = mat[k0 + t], *w = ev[k0 + t];
			for (int i = 0; i < m; i++) {
				w[i] = d[i][t];
				for (int k = 0; k < m; k++)
					v[(size_t)i * m + k] = z[(size_t)i * m + k][t];
			}
		}
	}
}

#undef EH_VD
#undef EH_VL
#undef EH_W
#undef EH_FN
