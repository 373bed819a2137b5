/* The PSF spots' contraction in one SIMD variant, included by psf.c once per variant. */
/* No include guard: included once per variant of src/base/cpuisa.h, after
 * defining PS_W (doubles per vector: 2 for SSE2, 4 for AVX2) and
 * PS_FN(name) (the variant's names); it undefines both macros at its end.
 *
 * Lanes run along a spot's columns ix; every pixel's sums are the scalar
 * loop's, term by term.  The normalisation's sum keeps four partial sums
 * whatever the width (column ix of a row's whole groups of four goes to
 * sum ix mod 4, rows in order; the columns past them, in order, to a fifth
 * that the four are then added to, 0 to 3), so that every variant gives
 * the same bits. */

typedef double PS_FN(vd) __attribute__((vector_size(8 * PS_W)));
typedef int64_t PS_FN(vl) __attribute__((vector_size(8 * PS_W)));
#define PS_VD PS_FN(vd)
#define PS_VL PS_FN(vl)
#define PS_NV (4 / PS_W)

static inline PS_VD PS_FN(vload)(const double *p)
{
	PS_VD v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void PS_FN(vstore)(double *p, PS_VD v)
{
	memcpy(p, &v, sizeof v);
}

/* The 2-D sum, clipping and normalisation of one spot, terms in ascending
 * i (then j) order.  Inlined twice: with DESI's sizes as constants
 * (unrolled), and with the general ones; the same operations in both. */
static inline __attribute__((always_inline)) void
PS_FN(contract)(const double *gh, const double *gx, const double *gy, double *T, double *spot,
		int nx, int ny, int dx, int dy)
{
	const PS_VD zero = { 0 };
	PS_VD vsum[PS_NV];
	double sum = 0.0, inv;
	const int nx4 = nx & ~3;
	int ix;

	for (int k = 0; k < PS_NV; k++)
		vsum[k] = zero;
	/* T[j][ix] = sum_i GH_ij gx[i][ix] */
	for (int j = 0; j <= dy; j++) {
		for (ix = 0; ix + PS_W <= nx; ix += PS_W) {
			PS_VD t = zero;
			for (int i = 0; i <= dx; i++)
				t += gh[i * (dy + 1) + j] * PS_FN(vload)(gx + i * nx + ix);
			PS_FN(vstore)(T + j * nx + ix, t);
		}
		for (; ix < nx; ix++) {
			double t = 0.0;
			for (int i = 0; i <= dx; i++)
				t += gh[i * (dy + 1) + j] * gx[i * nx + ix];
			T[j * nx + ix] = t;
		}
	}
	/* spot[iy][ix] = sum_j gy[j][iy] T[j][ix], clipped at 0 (NaN too) */
	for (int iy = 0; iy < ny; iy++) {
		double *row = spot + iy * nx;
		for (ix = 0; ix < nx4; ix += 4)
			for (int k = 0; k < PS_NV; k++) {
				PS_VD v = zero;
				for (int j = 0; j <= dy; j++)
					v += gy[j * ny + iy] * PS_FN(vload)(T + j * nx + ix + k * PS_W);
				v = (PS_VD)((PS_VL)v & (PS_VL)(v > zero));
				vsum[k] += v;
				PS_FN(vstore)(row + ix + k * PS_W, v);
			}
		for (; ix < nx; ix++) {
			double v = 0.0;
			for (int j = 0; j <= dy; j++)
				v += gy[j * ny + iy] * T[j * nx + ix];
			row[ix] = v > 0.0 ? v : 0.0;
			sum += row[ix];
		}
	}
	for (int k = 0; k < PS_NV; k++)
		for (int l = 0; l < PS_W; l++)
			sum += vsum[k][l];
	/* One division, then products: 1 ulp from the reference's division
	 * per pixel, and psf_cuda.cu does the same. */
	inv = 1.0 / sum;
	for (ix = 0; ix + PS_W <= nx * ny; ix += PS_W)
		PS_FN(vstore)(spot + ix, inv * PS_FN(vload)(spot + ix));
	for (; ix < nx * ny; ix++)
		spot[ix] *= inv;
}

/* desi_spots_cpu() in this variant (the shape checked by the caller). */
static void PS_FN(spots)(const double *params, size_t n, desi_spot_shape_t shape, double *spots,
			 int32_t *xc, int32_t *yc)
{
	int nx = 2 * shape.hsizex + 1, ny = 2 * shape.hsizey + 1;
	int dx = shape.ghdegx, dy = shape.ghdegy, ngh = (dx + 1) * (dy + 1);
	int np = 4 + ngh;
	int desi = nx == 17 && ny == 11 && dx == 6 && dy == 6;
	double gx[MAXD * MAXN], gy[MAXD * MAXN], T[MAXD * MAXN];

	for (size_t s = 0; s < n; s++) {
		/* a stop (cancel.h): the rest of the spots are not needed */
		if ((s & 1023) == 0 && sp_cancel_requested())
			return;
		const double *p = params + s * (size_t)np;
		double *spot = spots + s * (size_t)nx * ny;

		xc[s] = desi_spot_corner(p[0], shape.hsizex);
		yc[s] = desi_spot_corner(p[1], shape.hsizey);
		pgh(p[0], p[2], nx, dx, gx);
		pgh(p[1], p[3], ny, dy, gy);
		if (desi)
			PS_FN(contract)(p + 4, gx, gy, T, spot, 17, 11, 6, 6);
		else
			PS_FN(contract)(p + 4, gx, gy, T, spot, nx, ny, dx, dy);
	}
}

#undef PS_NV
#undef PS_VD
#undef PS_VL
#undef PS_W
#undef PS_FN
