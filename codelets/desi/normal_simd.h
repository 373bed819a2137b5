/* A patch's SIMD loops (A'NA's pair sums, the model A x, R's kept parts) in one variant, included by extract_cpu.c once per variant. */
/* No include guard: included once per variant of src/base/cpuisa.h, after
 * defining NS_W (doubles per vector: 2 for SSE2, 4 for AVX2) and
 * NS_FN(name) (the variant's names); it undefines both macros at its end.
 *
 * The sums are desi_kern.h's dsk_pair_sum(), the CUDA kernel's, to the bit:
 * row y of the overlap (y = r0 + 4 b + l) goes to partial sum l, its terms
 * in column order, the rows of a partial sum in order, and the result is
 * (s0 + s1) + (s2 + s3).  Here four rows are the four lanes (4 / NS_W
 * vectors), and the spots are held transposed (column x of spot j is
 * contiguous over its rows), so that one vector load reads the four rows
 * of a column: a pair costs a multiply-add per column and block of four
 * rows, instead of a short loop per row (the average overlap is ~7
 * columns wide).  The rows past the overlap in its last block add -0 (x +
 * -0 is x for every x: those lanes are left as they were).  The first
 * factor, s1 ivar, is formed once per column j1 (the product that
 * dsk_pair_sum() forms term by term). */

typedef double NS_FN(vd) __attribute__((vector_size(8 * NS_W)));
typedef int64_t NS_FN(vl) __attribute__((vector_size(8 * NS_W)));
#define NS_VD NS_FN(vd)
#define NS_VL NS_FN(vl)
#define NS_NV (4 / NS_W) /* vectors of partial sums */

static inline NS_VD NS_FN(ld)(const double *p)
{
	NS_VD v;
	memcpy(&v, p, sizeof v);
	return v;
}

/* lanes l < t of vector k, t = 0 .. 4 (rows of the last block) */
static const int64_t NS_FN(row_lanes)[5][4] = {
	{ 0, 0, 0, 0 }, { -1, 0, 0, 0 }, { -1, -1, 0, 0 }, { -1, -1, -1, 0 }, { -1, -1, -1, -1 }
};

/* dsk_pair_sum() over the overlap rows [r0, r1), columns [q0, q1), given
 * u: the first term (r0, q0) of ws (s1 ivar, transposed: column x at
 * u + (x - q0) syp) and v: spot 2's (transposed, the same layout). */
static double NS_FN(pair_sum)(const double *u, const double *v, int syp, int nrow, int ncol)
{
	NS_VD acc[NS_NV];
	const NS_VD nzero = (NS_VD){ 0 } - 0.0;
	for (int k = 0; k < NS_NV; k++)
		acc[k] = (NS_VD){ 0 };
	int y = 0;
	for (; y + 4 <= nrow; y += 4)
		for (int x = 0; x < ncol; x++)
			for (int k = 0; k < NS_NV; k++)
				acc[k] += NS_FN(ld)(u + (size_t)x * syp + y + k * NS_W) *
					  NS_FN(ld)(v + (size_t)x * syp + y + k * NS_W);
	if (y < nrow) {
		NS_VL m[NS_NV];
		for (int k = 0; k < NS_NV; k++)
			memcpy(&m[k], &NS_FN(row_lanes)[nrow - y][k * NS_W], sizeof m[k]);
		for (int x = 0; x < ncol; x++)
			for (int k = 0; k < NS_NV; k++) {
				const NS_VD pr = NS_FN(ld)(u + (size_t)x * syp + y + k * NS_W) *
						 NS_FN(ld)(v + (size_t)x * syp + y + k * NS_W);
				acc[k] += (NS_VD)(((NS_VL)pr & m[k]) | ((NS_VL)nzero & ~m[k]));
			}
	}
	double c[4];
	memcpy(c, acc, sizeof c);
	return (c[0] + c[1]) + (c[2] + c[3]);
}

/* dsk_column_sums() over rows [y0, y1) and columns [x0, x1) of a
 * rectangle, given u: s ivar at its first term (transposed, column x at u
 * + (x - x0) syp) and p: the pixels at the same place (transposed, column
 * x at p + (x - x0) pyp).  Returns A'Np; *fw gets A'N1. */
static double NS_FN(column_sums)(const double *u, int syp, const double *p, int pyp, int nrow,
				 int ncol, double *fw)
{
	NS_VD sw[NS_NV], sp[NS_NV];
	const NS_VD nzero = (NS_VD){ 0 } - 0.0;
	for (int k = 0; k < NS_NV; k++)
		sw[k] = sp[k] = (NS_VD){ 0 };
	for (int y = 0; y < nrow; y += 4) {
		NS_VL m[NS_NV];
		const int t = nrow - y < 4 ? nrow - y : 4;
		for (int k = 0; k < NS_NV; k++)
			memcpy(&m[k], &NS_FN(row_lanes)[t][k * NS_W], sizeof m[k]);
		for (int x = 0; x < ncol; x++)
			for (int k = 0; k < NS_NV; k++) {
				const NS_VD aw = NS_FN(ld)(u + (size_t)x * syp + y + k * NS_W);
				const NS_VD ap = aw * NS_FN(ld)(p + (size_t)x * pyp + y + k * NS_W);
				sw[k] += (NS_VD)(((NS_VL)aw & m[k]) | ((NS_VL)nzero & ~m[k]));
				sp[k] += (NS_VD)(((NS_VL)ap & m[k]) | ((NS_VL)nzero & ~m[k]));
			}
	}
	double c[4], d[4];
	memcpy(c, sw, sizeof c);
	memcpy(d, sp, sizeof d);
	*fw = (c[0] + c[1]) + (c[2] + c[3]);
	return (d[0] + d[1]) + (d[2] + d[3]);
}

/* desi_extract_normal_cpu()'s pair loop: the entries (j1, j2), j2 > j1, of
 * icov's upper triangle (zeroed by the caller; the lower one is not
 * written, extract.h) and, on the diagonal, each
 * column's y[j1] and fluxweight[j1].  sorted: rows_sorted().  work:
 * normal_work() doubles.  Returns the largest j2 - j1 of an entry != 0
 * written, -1 if none. */
static int NS_FN(normal_pairs)(const desi_patch_t *p, const double *spots, const int32_t *xc,
				const int32_t *yc, const double *pix, const double *ivar,
				double *icov, double *y, double *fluxweight, int sorted,
				double *work)
{
	const int n = desi_patch_n(p), nx = p->nx, ny = p->ny, sx = p->sx, sy = p->sy;
	const int m = p->nwave, syp = sy + 3, pyp = ny + 3;
	const size_t ss = (size_t)sy * (size_t)sx, ts = (size_t)sx * (size_t)syp;
	const dsk_win_t w = win_of(p);
	double *tsp = work, *ws = tsp + (size_t)n * ts, *pixt = ws + ts;
	double *ivt = pixt + (size_t)nx * pyp;
	int maxoff = -1;

	/* the spots and the window transposed, three rows of zeros past each
	 * column (what a vector of the last rows reads past them) */
	for (int j = 0; j < n; j++) {
		const double *s = spots + desi_patch_col(p, j) * ss;
		double *t = tsp + (size_t)j * ts;
		for (int x = 0; x < sx; x++) {
			for (int r = 0; r < sy; r++)
				t[(size_t)x * syp + r] = s[(size_t)r * sx + x];
			t[(size_t)x * syp + sy] = t[(size_t)x * syp + sy + 1] =
				t[(size_t)x * syp + sy + 2] = 0.0;
		}
	}
	for (int x = 0; x < nx; x++) {
		for (int r = 0; r < ny; r++) {
			pixt[(size_t)x * pyp + r] = pix[(size_t)r * nx + x];
			ivt[(size_t)x * pyp + r] = ivar[(size_t)r * nx + x];
		}
		for (int r = ny; r < pyp; r++)
			pixt[(size_t)x * pyp + r] = ivt[(size_t)x * pyp + r] = 0.0;
	}
	memset(ws, 0, ts * sizeof *ws);
	for (int j1 = 0; j1 < n; j1++) {
		dsk_rect_t a;
		const size_t c1 = desi_patch_col(p, j1);
		const double *s1 = tsp + (size_t)j1 * ts;

		y[j1] = 0.0;
		fluxweight[j1] = 0.0;
		if (!dsk_rect(&w, xc[c1], yc[c1], &a))
			continue;
		for (int x = a.x0; x < a.x1; x++) {
			double *wc = ws + (size_t)(x - a.ox) * syp - a.oy;
			const double *sc = s1 + (size_t)(x - a.ox) * syp - a.oy;
			const double *ic = ivt + (size_t)x * pyp;
			for (int yy = a.y0; yy < a.y1; yy++)
				wc[yy] = sc[yy] * ic[yy];
		}
		y[j1] = NS_FN(column_sums)(ws + (size_t)(a.x0 - a.ox) * syp + (a.y0 - a.oy), syp,
					   pixt + (size_t)a.x0 * pyp + a.y0, pyp, a.y1 - a.y0,
					   a.x1 - a.x0, &fluxweight[j1]);
		const long long y1 = yc[c1], x1 = xc[c1];
		for (int f2 = j1 / m; f2 < p->nfib; f2++) {
			int w2 = f2 == j1 / m ? j1 % m : 0;
			if (sorted) { /* the first wavelength whose row is within a spot */
				int hi = m;
				while (w2 < hi) {
					const int mid = w2 + (hi - w2) / 2;
					if (yc[desi_patch_col(p, f2 * m + mid)] - y1 <= -p->sy)
						w2 = mid + 1;
					else
						hi = mid;
				}
			}
			for (; w2 < m; w2++) {
				dsk_rect_t b;
				const int j2 = f2 * m + w2;
				const size_t c2 = desi_patch_col(p, j2);
				/* spots whose corners are a spot apart cannot meet:
				 * their entry stays the memset's 0, as dsk_pair_sum
				 * would give */
				const long long dy = yc[c2] - y1, dx = xc[c2] - x1;
				if (sorted && dy >= p->sy)
					break; /* and every later one of this fibre */
				if (dy >= p->sy || -dy >= p->sy || dx >= sx || -dx >= sx)
					continue;
				if (!dsk_rect(&w, xc[c2], yc[c2], &b))
					continue;
				const int r0 = a.y0 > b.y0 ? a.y0 : b.y0, r1 = a.y1 < b.y1 ? a.y1 : b.y1;
				const int q0 = a.x0 > b.x0 ? a.x0 : b.x0, q1 = a.x1 < b.x1 ? a.x1 : b.x1;
				if (r0 >= r1 || q0 >= q1)
					continue; /* dsk_pair_sum's 0 */
				const double acc = NS_FN(pair_sum)(
					ws + (size_t)(q0 - a.ox) * syp + (r0 - a.oy),
					tsp + (size_t)j2 * ts + (size_t)(q0 - b.ox) * syp + (r0 - b.oy), syp,
					r1 - r0, q1 - q0);
				icov[(size_t)j1 * n + j2] = acc;
				if (acc != 0.0 && j2 - j1 > maxoff)
					maxoff = j2 - j1;
			}
		}
	}
	return maxoff;
}

/* The chi2's model A x over the window (zeroed by the caller): column j's
 * spot times x[j] added to the pixels under its rectangle, the columns in
 * order (each pixel's sum in the scalar loop's order; lanes along x). */
static void NS_FN(model)(const desi_patch_t *p, const double *spots, const int32_t *xc,
			 const int32_t *yc, const double *x, double *model)
{
	const int n = desi_patch_n(p), nx = p->nx, sx = p->sx;
	const size_t ss = (size_t)p->sy * (size_t)sx;
	const dsk_win_t w = win_of(p);

	for (int j = 0; j < n; j++) {
		dsk_rect_t r;
		const size_t cj = desi_patch_col(p, j);
		if (x[j] == 0.0 || !dsk_rect(&w, xc[cj], yc[cj], &r))
			continue;
		const double *s = spots + cj * ss;
		const double xj = x[j];
		for (int y = r.y0; y < r.y1; y++) {
			double *mrow = model + (size_t)y * nx;
			const double *srow = s + (size_t)(y - r.oy) * sx - r.ox;
			int c = r.x0;
			for (; c + NS_W <= r.x1; c += NS_W) {
				NS_VD m = NS_FN(ld)(mrow + c);
				m += xj * NS_FN(ld)(srow + c);
				memcpy(mrow + c, &m, sizeof m);
			}
			for (; c < r.x1; c++)
				mrow[c] += xj * srow[c];
		}
	}
}

/* block_finish()'s kept parts of R from W = V diag(ev^-1/4) (m x m,
 * column k at w + k m): t = W' 1 and u = W' x_b (each a sum over i in
 * order; four columns' sums interleaved), then s = W t and qx = W u (sums
 * over k in order, lanes along i), and the 2 nd0 + 1 diagonals of Q = W W'
 * at the core columns w0 .. w0 + cnw - 1 (sums over k in order, lanes
 * along the columns) into dg [2 nd0 + 1][cnw].  work: 2 m doubles.  The
 * scalar loops' bits, in every variant. */
static void NS_FN(kept_parts)(int m, const double *w, const double *xb, int w0, int cnw,
			      int nd0, double *s, double *qx, double *dg, double *work)
{
	double *t = work, *u = t + m;
	const int nd = 2 * nd0 + 1;
	int k = 0;
	for (; k + 4 <= m; k += 4) {
		const double *w0k = w + (size_t)k * m, *w1k = w0k + m, *w2k = w1k + m, *w3k = w2k + m;
		double t0 = 0.0, t1 = 0.0, t2 = 0.0, t3 = 0.0, u0 = 0.0, u1 = 0.0, u2 = 0.0, u3 = 0.0;
		for (int i = 0; i < m; i++) {
			t0 += w0k[i];
			u0 += w0k[i] * xb[i];
			t1 += w1k[i];
			u1 += w1k[i] * xb[i];
			t2 += w2k[i];
			u2 += w2k[i] * xb[i];
			t3 += w3k[i];
			u3 += w3k[i] * xb[i];
		}
		t[k] = t0, t[k + 1] = t1, t[k + 2] = t2, t[k + 3] = t3;
		u[k] = u0, u[k + 1] = u1, u[k + 2] = u2, u[k + 3] = u3;
	}
	for (; k < m; k++) {
		const double *wk = w + (size_t)k * m;
		double tk = 0.0, uk = 0.0;
		for (int i = 0; i < m; i++) {
			tk += wk[i];
			uk += wk[i] * xb[i];
		}
		t[k] = tk;
		u[k] = uk;
	}
	for (int i = 0; i < m; i++)
		s[i] = qx[i] = 0.0;
	for (size_t e = 0; e < (size_t)nd * cnw; e++)
		dg[e] = 0.0;
	for (k = 0; k < m; k++) {
		const double *wk = w + (size_t)k * m, tk = t[k], uk = u[k];
		int i = 0;
		for (; i + NS_W <= m; i += NS_W) {
			const NS_VD wi = NS_FN(ld)(wk + i);
			NS_VD vs = NS_FN(ld)(s + i), vq = NS_FN(ld)(qx + i);
			vs += wi * tk;
			vq += wi * uk;
			memcpy(s + i, &vs, sizeof vs);
			memcpy(qx + i, &vq, sizeof vq);
		}
		for (; i < m; i++) {
			s[i] += wk[i] * tk;
			qx[i] += wk[i] * uk;
		}
		/* Q[row][col] += W[row][k] W[col][k], row = col - nd0 + d */
		for (int d = 0; d < nd; d++) {
			double *dd = dg + (size_t)d * cnw;
			const int off = d - nd0;
			int j0 = 0, j1 = cnw;
			while (j0 < j1 && w0 + j0 + off < 0)
				j0++;
			while (j1 > j0 && w0 + j1 - 1 + off >= m)
				j1--;
			int j = j0;
			for (; j + NS_W <= j1; j += NS_W) {
				NS_VD v = NS_FN(ld)(dd + j);
				v += NS_FN(ld)(wk + w0 + j + off) * NS_FN(ld)(wk + w0 + j);
				memcpy(dd + j, &v, sizeof v);
			}
			for (; j < j1; j++)
				dd[j] += wk[w0 + j + off] * wk[w0 + j];
		}
	}
}

#undef NS_NV
#undef NS_VD
#undef NS_VL
#undef NS_W
#undef NS_FN
