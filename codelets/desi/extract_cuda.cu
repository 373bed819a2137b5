/* DESI subbundle extraction on CUDA: the twin of desi_extract_batch_cpu() in extract_batch.c
 * (the kernels and the entry points; the host helpers: extract_cuda_host.cu). */
#include <float.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "extract_cuda.h"

/*
 * DESIGN.  The patches of a task go through the GPU together, in chunks
 * of at most CHUNK = 64 (a whole subbundle, 47 to 58 patches with DESI's
 * grids, is one chunk), all asynchronous on the caller's stream; no
 * allocation, no host <-> device copy, no synchronisation.  Two phases, two
 * graph stages, as on the CPU: desi_patch_batch_cuda() (steps 1-2 below)
 * writes the normal equations into `normal`, laid out as the CPU's, and
 * desi_decorrelate_batch_cuda() (steps 1, 3-7) factors and solves them in
 * place; desi_extract_batch_cuda() chains the two.
 *
 * Geometry.  The per-patch windows and offsets travel by value, in the
 * kernel parameter struct `geom` (2.3 KB: under the 4 KB that every
 * architecture accepts), so the host arrays of desi_batch_t need no copy.
 *
 * Per chunk:
 *  1. k_window: the windows of the float image as doubles, masked as the
 *     CPU does (outside the image, non-finite value or ivar, ivar <= 0:
 *     pix 0, ivar 0).
 *  2. k_normal: one thread per column pair (j1 <= j2) of the dense n x n
 *     iCov of each patch: the overlap-only sum of extract_cpu.c over the
 *     intersection of the two clipped spot rectangles (0 when disjoint), in
 *     the CPU's order and without FMA (__dmul_rn/__dadd_rn): iCov, y and
 *     fluxweight are the CPU's bit for bit.  k_regularise adds step 2;
 *     k_pointers makes the batched calls' pointer arrays (phase 2).
 *  3. cusolverDnDpotrfBatched (lower) factors every iCov in place;
 *     k_solve (one block per patch: blocked forward and back substitution,
 *     x in shared memory) turns y into x.
 *  4. C_bb, the diagonal fibre blocks of iCov^-1, for the core fibres:
 *     Z = L^-1 E (E: the core columns of the identity, n x core_nf nwave),
 *     cublasDtrsmBatched on Z's rows from the first core fibre's (those
 *     above are 0), then C_bb = Z_b' Z_b, cublasDgemmStridedBatched over
 *     every (patch, core fibre).
 *  5. Q_bb = C_bb^-1/2 from the eigendecomposition of each m x m block
 *     (m = nwave = 74): in CUDA 13 builds cusolverDnXsyevBatched over all
 *     the chunk's blocks, then k_decor_finish, one block per (patch, core
 *     fibre); in older builds (Debian's CUDA 11.8 has no batched syev for
 *     n > 32; only CUDA 13 was tried for it) k_decorrelate, a
 *     cyclic Jacobi eigensolver in one block per (patch, core fibre) in
 *     shared memory (2 m^2 doubles, 88 KB; opt-in above 48 KB), parallel
 *     ordering (round robin, m/2 disjoint rotations per step), rotations
 *     while |a_pq| > DBL_EPSILON sqrt(a_pp a_qq), at most 40 sweeps
 *     (slower than the batched syev: doc/gpu.md).  Then (decor_finish), as
 *     block_finish() in extract_cpu.c: Q = W W' with
 *     W = V diag(ev^-1/4), s = row sums, R = Q / s, flux = R x, ivar = s^2,
 *     the resolution diagonals; with xflux, the deconvolved flux x of the
 *     core too (the 2-D model's flux, desi.write model=true).
 *  6. k_chi2pix (per pixel: model = A x, in the CPU's column order over
 *     the columns that meet the block's rows, and the chi2 and tivar > 0
 *     maps), k_chi2core (per core column: chi2pix, pixmask_fraction).
 *  7. k_write: the core into the rows as floats, flux / dw, ivar dw^2.
 * Numerical failures stay on the device: a patch whose potrf info is not
 * 0, or whose C_bb has an eigenvalue that is not > 0 (NaN included),
 * gets all-zero rows (ivar 0), as the CPU leaves them.
 *
 * Agreement with desi_extract_batch_cpu(): iCov, y, fluxweight identical;
 * x, C_bb and what follows differ by rounding amplified by iCov's
 * conditioning (dense Cholesky + dense inverse blocks + Jacobi against
 * band Cholesky + Takahashi + dsyevd): ~1e-13 relative in double on the
 * reference patch, expected, like the CPU's fast route against its eigh
 * route.  The rows are floats, so they agree to float rounding: a
 * difference of one float ulp where a double lies near a rounding
 * boundary (the test allows 1e-6 relative to each field's max).
 *
 * The handles are used as given (bound to the stream by the caller);
 * cuBLAS is set to host pointer mode for its scalars.
 */


using namespace desi_cu;

/* Internal linkage for the kernels: other .cu files have their own. */
namespace {

/* Patch i's window for desi_kern.h. */
__device__ static dsk_win_t win_of(const common &c, const geom &g, int i)
{
	dsk_win_t w = { g.ymin[i], g.xmin[i], g.ny[i] > 0 ? g.ny[i] : 0, g.nx[i] > 0 ? g.nx[i] : 0,
			c.sy, c.sx };
	return w;
}

/* The patch's columns in the bundle's spot arrays (desi_kern.h). */
__device__ static dsk_cols_t cols_of(const common &c, const geom &g, int i, const double *spots,
				     const int32_t *xc, const int32_t *yc)
{
	dsk_cols_t k = { spots, xc, yc, c.fib0, c.nfullwave, g.w0[i], c.m };
	return k;
}

__global__ void k_window(common c, geom g, const float *img, const float *ivar, double *wpix,
			 double *wivar)
{
	const int i = blockIdx.y;
	const int ny = g.ny[i] > 0 ? g.ny[i] : 0, nx = g.nx[i] > 0 ? g.nx[i] : 0;
	const long long npix = (long long)ny * nx;
	for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < npix;
	     q += (long long)gridDim.x * blockDim.x)
		dsk_window_px(img, ivar, c.npix_y, c.npix_x, g.ymin[i] + q / nx, g.xmin[i] + q % nx,
			      &wpix[g.poff[i] + q], &wivar[g.poff[i] + q]);
}

/* One thread per column pair (j1 <= j2) of a patch's iCov, TILE x TILE
 * threads per block, blocks (j2 tile, j1 tile, patch). */
__global__ void k_normal(common c, geom g, const double *spots, const int32_t *xc,
			 const int32_t *yc, const double *wpix, const double *wivar, double *icov,
			 double *yv, double *fwv)
{
	if (blockIdx.x < blockIdx.y)
		return; /* tile below the diagonal */
	const int i = blockIdx.z, n = c.n;
	const int j1 = blockIdx.y * TILE + threadIdx.y, j2 = blockIdx.x * TILE + threadIdx.x;
	if (j1 >= n || j2 >= n || j2 < j1)
		return;
	const size_t ss = (size_t)c.sy * c.sx;
	const dsk_cols_t k = cols_of(c, g, i, spots, xc, yc);
	const size_t s1j = dsk_col(&k, j1), s2j = dsk_col(&k, j2);
	const dsk_win_t w = win_of(c, g, i);
	dsk_normal_entry(&w, n, j1, j2, spots + s1j * ss, xc[s1j], yc[s1j], spots + s2j * ss,
			 xc[s2j], yc[s2j], wpix + g.poff[i], wivar + g.poff[i],
			 icov + (size_t)i * n * n, yv + (size_t)i * n, fwv + (size_t)i * n);
}

/* Step 2 per patch (block i). */
__global__ void k_regularise(common c, double *icov, const double *fwv)
{
	__shared__ double red[THREADS];
	const int i = blockIdx.x, n = c.n;
	const double *fw = fwv + (size_t)i * n;
	double mx = 0.0;
	for (int j = threadIdx.x; j < n; j += blockDim.x)
		if (fw[j] > mx)
			mx = fw[j];
	red[threadIdx.x] = mx;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (threadIdx.x < s && red[threadIdx.x + s] > red[threadIdx.x])
			red[threadIdx.x] = red[threadIdx.x + s];
		__syncthreads();
	}
	const double minweight = dsk_minweight(red[0]);
	double *ic = icov + (size_t)i * n * n;
	for (int j = threadIdx.x; j < n; j += blockDim.x)
		ic[(size_t)j * n + j] = dsk_regularised(ic[(size_t)j * n + j], fw[j], minweight,
							c.regularize);
}

/* The batched calls' pointer arrays and the failure flags, one thread per patch. */
__global__ void k_pointers(common c, int np, double *icov, double *x, double *z, double **pa,
			   double **px, double **pl, double **pzt, int *fail)
{
	const int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= np)
		return;
	dsk_pointers(i, (size_t)c.n, (size_t)c.core_nf * c.m, (size_t)c.core_f0 * c.m, icov, x, z,
		     pa, px, pl, pzt, fail);
}

/* x = L'^-1 L^-1 y for patch blockIdx.x, in place (desi_kern.h's k_solve):
 * x in shared memory (n doubles) with the current block's triangle
 * (DSK_NB^2): one launch, where cusolverDnDpotrsBatched (nrhs 1) or two
 * cublasDtrsmBatched were slower per subbundle (doc/gpu.md;
 * SP_DESI_SOLVE=potrs for A/B). */
__global__ void k_solve(common c, double *const *pa, double *const *px)
{
	extern __shared__ double shs[];
	const int n = c.n, tid = threadIdx.x, nt = blockDim.x;
	double *d = shs, *x = shs + DSK_NB * DSK_NB;
	const double *L = pa[blockIdx.x];
	double *xg = px[blockIdx.x];
	for (int e = tid; e < n; e += nt)
		x[e] = xg[e];
	for (int step = 0; step < 2 * ((n + DSK_NB - 1) / DSK_NB); step++) {
		int fwd;
		const int kb = dsk_trsv_step(n, step, &fwd), nb = n - kb < DSK_NB ? n - kb : DSK_NB;
		for (int e = tid; e < DSK_NB * DSK_NB; e += nt)
			dsk_trsv_load(L, (size_t)n, kb, nb, e, d);
		__syncthreads();
		if (tid == 0)
			dsk_trsv_diag(d, nb, fwd, x + kb);
		__syncthreads();
		for (int k = tid; k < dsk_trsv_nupdate(n, kb, nb, fwd); k += nt)
			dsk_trsv_update(L, (size_t)n, kb, nb, fwd, k, x);
		__syncthreads();
	}
	for (int e = tid; e < n; e += nt)
		xg[e] = x[e];
}

/* Z = the core columns of the identity, column-major n x core_nf m per patch. */
__global__ void k_eye(common c, int np, double *z)
{
	const size_t n = (size_t)c.n, k = (size_t)c.core_nf * c.m, tot = (size_t)np * n * k;
	const size_t first = (size_t)c.core_f0 * c.m;
	for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < tot;
	     e += (size_t)gridDim.x * blockDim.x)
		z[e] = dsk_eye(e, n, k, first);
}

/* The shared memory of a block of k_decorrelate / k_decor_finish. */
struct decor_smem {
	double *A, *V, *ev, *s, *cs, *sn;
	int *pp, *pq, *flag;
};

__device__ static decor_smem decor_carve(double *sh, int m)
{
	const int half = (m + 1) / 2;
	decor_smem d;
	d.A = sh;
	d.V = d.A + (size_t)m * m;
	d.ev = d.V + (size_t)m * m;
	d.s = d.ev + m;
	d.cs = d.s + m;
	d.sn = d.cs + half;
	d.pp = (int *)(d.sn + half);
	d.pq = d.pp + half;
	d.flag = d.pq + half;
	return d;
}

/* Step 5's end for block (patch i, core fibre fc), from the eigenvalues
 * (d.ev) and eigenvectors (d.V, row-major, column k the k-th vector) of
 * C_bb: the patch fails unless every eigenvalue is > 0 (NaN included);
 * else W = V diag(ev^-1/4) (in V), Q = W W' (in A), s = its row sums,
 * R = Q / s, and the block's flux, ivar, resolution diagonals (and x). */
__device__ static void decor_finish(const common &c, const geom &g, int i, int fc,
				    const decor_smem &d, const double *xv, double *core, int *fail)
{
	const int m = c.m, f = c.core_f0 + fc, tid = threadIdx.x, nt = blockDim.x;
	if (tid == 0)
		*d.flag = 0;
	__syncthreads();
	for (int k = tid; k < m; k += nt)
		if (!(d.ev[k] > 0.0))
			*d.flag = 1;
	__syncthreads();
	if (*d.flag) { /* C_bb not positive definite (or NaN): the patch fails */
		if (tid == 0)
			fail[i] = 1;
		return;
	}
	for (int e = tid; e < m * m; e += nt)
		dsk_decor_w(d.V, d.ev, m, e);
	__syncthreads();
	for (int e = tid; e < m * m; e += nt)
		d.A[e] = dsk_decor_q(d.V, m, e);
	__syncthreads();
	for (int r = tid; r < m; r += nt)
		d.s[r] = dsk_decor_rowsum(d.A, m, r);
	__syncthreads();
	for (int e = tid; e < m * m; e += nt)
		d.A[e] *= 1.0 / d.s[e / m]; /* A[r][q] = R[r][q] */
	__syncthreads();
	const int cnw = g.cnw[i], nd = c.nd, blk = i * c.core_nf + fc;
	const double *xb = xv + (size_t)i * c.n + (size_t)f * m;
	double *out = core + (size_t)blk * c.nf_out * m;
	for (int w = tid; w < cnw; w += nt)
		dsk_decor_flux(d.A, d.s, xb, m, c.core_w0, w, out);
	for (int e = tid; e < nd * cnw; e += nt)
		dsk_decor_rdiag(d.A, m, c.core_w0, c.ndiag, cnw, e, out);
	if (c.xflux)
		for (int w = tid; w < cnw; w += nt)
			dsk_decor_xflux(xb, m, c.core_w0, c.nf_out - 1, w, out);
}

/* Step 5 for block (patch i, core fibre fc): Q = C_bb^-1/2 by Jacobi. */
__global__ void k_decorrelate(common c, geom g, const double *cbb, const double *xv, double *core,
			      int *fail)
{
	extern __shared__ double sh[];
	const int m = c.m, half = (m + 1) / 2, mm = 2 * half; /* mm even: index m is a dummy when m is odd */
	const int i = blockIdx.x / c.core_nf, fc = blockIdx.x % c.core_nf;
	const decor_smem d = decor_carve(sh, m);
	double *A = d.A, *V = d.V, *cs = d.cs, *sn = d.sn;
	int *pp = d.pp, *pq = d.pq, *flag = d.flag;
	const double *src = cbb + (size_t)blockIdx.x * m * m;
	const int tid = threadIdx.x, nt = blockDim.x;

	for (int e = tid; e < m * m; e += nt) {
		A[e] = src[e]; /* symmetric: column-major = row-major */
		V[e] = e / m == e % m ? 1.0 : 0.0;
	}
	__syncthreads();
	for (int sweep = 0; sweep < JACOBI_SWEEPS; sweep++) {
		if (tid == 0)
			*flag = 0;
		__syncthreads();
		for (int r = 0; r < mm - 1; r++) {
			for (int k = tid; k < half; k += nt)
				if (dsk_jacobi_pair(A, m, mm, r, k, pp, pq, cs, sn))
					*flag = 1;
			__syncthreads();
			/* A <- J' A (rows p, q), then A <- A J and V <- V J (columns). */
			for (int e = tid; e < half * m; e += nt)
				dsk_jacobi_rows(A, m, e, pp, pq, cs, sn);
			__syncthreads();
			for (int e = tid; e < half * m; e += nt)
				dsk_jacobi_cols(A, V, m, e, pp, pq, cs, sn);
			__syncthreads();
			for (int k = tid; k < half; k += nt)
				dsk_jacobi_zero(A, m, k, pp, pq, sn);
			__syncthreads();
		}
		if (*flag == 0)
			break;
		__syncthreads(); /* everyone has read the flag before it is reset */
	}
	for (int k = tid; k < m; k += nt)
		d.ev[k] = A[k * m + k];
	__syncthreads();
	decor_finish(c, g, i, fc, d, xv, core, fail);
}

/* Step 5's end after cusolverDnXsyevBatched (eigen=syevb): block (patch i,
 * core fibre fc) reads the eigenvectors the solver left in cbb (column-
 * major: vector k is column k, as V's column k) and its eigenvalues; a
 * block whose solver info is not 0 fails its patch. */
__global__ void k_decor_finish(common c, geom g, const double *vecs, const double *evs,
			       const int *einfo, const double *xv, double *core, int *fail)
{
	extern __shared__ double sh[];
	const int m = c.m, i = blockIdx.x / c.core_nf, fc = blockIdx.x % c.core_nf;
	const decor_smem d = decor_carve(sh, m);
	const double *src = vecs + (size_t)blockIdx.x * m * m;
	for (int e = threadIdx.x; e < m * m; e += blockDim.x)
		d.V[(e % m) * m + e / m] = src[e]; /* column-major -> row-major */
	for (int k = threadIdx.x; k < m; k += blockDim.x)
		d.ev[k] = einfo[blockIdx.x] == 0 ? evs[(size_t)blockIdx.x * m + k] : -1.0;
	__syncthreads();
	decor_finish(c, g, i, fc, d, xv, core, fail);
}

/* Per pixel: the model A x, then the chi2 and (tivar > 0) maps.  Each
 * block first lists, in order, the columns that meet its pixels' rows
 * (dsk_chi2_col_meets; an ordered compaction by warp ballots), in
 * dynamic shared memory (n ints): ~30 of a patch's ~500 columns, where
 * every pixel used to test them all. */
__global__ void k_chi2pix(common c, geom g, const double *spots, const int32_t *xc,
			  const int32_t *yc, const double *wpix, const double *wivar,
			  const double *xv, double *chi2, double *tpos)
{
	extern __shared__ int cols[];
	__shared__ int wsum[THREADS / 32 + 1];
	const int i = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int nw = blockDim.x / 32;
	const int ny = g.ny[i] > 0 ? g.ny[i] : 0, nx = g.nx[i] > 0 ? g.nx[i] : 0;
	const long long npix = (long long)ny * nx;
	const dsk_win_t w = win_of(c, g, i);
	const dsk_cols_t k = cols_of(c, g, i, spots, xc, yc);
	const double *x = xv + (size_t)i * c.n;
	for (long long base = (long long)blockIdx.x * blockDim.x; base < npix;
	     base += (long long)gridDim.x * blockDim.x) {
		const long long q = base + tid, last = (base + blockDim.x < npix ? base + blockDim.x : npix) - 1;
		const int r0 = (int)(base / nx), r1 = (int)(last / nx);
		if (tid == 0)
			wsum[nw] = 0;
		__syncthreads();
		for (int j0 = 0; j0 < c.n; j0 += blockDim.x) {
			const int j = j0 + tid;
			const int keep = j < c.n && dsk_chi2_col_meets(&w, &k, x, j, r0, r1);
			const unsigned ball = __ballot_sync(0xffffffffu, keep);
			if (lane == 0)
				wsum[warp] = __popc(ball);
			__syncthreads();
			if (tid == 0) {
				int acc = wsum[nw];
				for (int v = 0; v < nw; v++) {
					const int t = wsum[v];
					wsum[v] = acc;
					acc += t;
				}
				wsum[nw] = acc;
			}
			__syncthreads();
			if (keep)
				cols[wsum[warp] + __popc(ball & ((1u << lane) - 1u))] = j;
			__syncthreads(); /* wsum is rewritten by the next chunk */
		}
		if (q < npix) {
			const size_t o = (size_t)(g.poff[i] + q);
			dsk_chi2_pixel_cols(&w, &k, cols, wsum[nw], x, (int)(q / nx), (int)(q % nx),
					    wpix[o], wivar[o], c.psferr, &chi2[o], &tpos[o]);
		}
		__syncthreads(); /* cols is rewritten by the next pass */
	}
}

/* Per core column: chi2pix and pixmask_fraction. */
__global__ void k_chi2core(common c, geom g, const double *spots, const int32_t *xc,
			   const int32_t *yc, const double *wivar, const double *chi2,
			   const double *tpos, double *core)
{
	const int i = blockIdx.x, cnw = g.cnw[i];
	const dsk_win_t w = win_of(c, g, i);
	const dsk_cols_t k = cols_of(c, g, i, spots, xc, yc);
	for (int e = threadIdx.x; e < c.core_nf * cnw; e += blockDim.x) {
		const int fc = e / cnw, wc = e % cnw;
		const int j = (c.core_f0 + fc) * c.m + c.core_w0 + wc;
		double *out = core + ((size_t)i * c.core_nf + fc) * c.nf_out * c.m;
		dsk_chi2_core(&w, &k, j, chi2 + g.poff[i], tpos + g.poff[i], wivar + g.poff[i],
			      &out[2 * (size_t)c.m + wc], &out[3 * (size_t)c.m + wc]);
	}
}

__global__ void k_write(common c, geom g, const double *core, const int *info, const int *fail,
			float *rows)
{
	const int i = blockIdx.x, cnw = g.cnw[i];
	const bool bad = info[i] != 0 || fail[i] != 0;
	for (int e = threadIdx.x; e < c.core_nf * c.nf_out * cnw; e += blockDim.x)
		dsk_write_elem(e, i, cnw, c.core_nf, c.nf_out, c.m, c.nfield, c.nwave_grid,
			       g.w0[i] - c.col0, core, bad, c.dw, rows);
}

/* A chunk's rows into its subbundle's frame rows: a strided copy,
 * grid-stride over the elements. */
__global__ void k_stitch(size_t n, int nf_out, int nfield, int nwave, size_t grid, int col0,
			 const float *rows, float *frame)
{
	for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
	     e += (size_t)gridDim.x * blockDim.x)
		dsk_stitch_elem(e, nf_out, nfield, nwave, grid, col0, rows, frame);
}

} /* namespace */

/* ---- host side ---- */

extern "C" size_t desi_patch_cuda_scratch(const desi_batch_t *b)
{
	return make_layout(b, PATCH).total;
}

extern "C" size_t desi_decorrelate_cuda_scratch(const desi_batch_t *b)
{
	return make_layout(b, DECOR).total;
}

extern "C" size_t desi_extract_batch_cuda_scratch(const desi_batch_t *b)
{
	return (desi_normal_doubles(b) * sizeof(double) + 255) / 256 * 256 +
	       desi_decorrelate_cuda_scratch(b);
}

extern "C" int desi_patch_batch_cuda(const desi_batch_t *b, const double *spots,
				     const int32_t *xc, const int32_t *yc, const float *img,
				     const float *ivar, double *normal, void *scratch,
				     struct CUstream_st *stream)
{
	const int n = b->p.nfib * b->p.nwave;
	cudaStream_t st = (cudaStream_t)stream;

	if (b->np <= 0)
		return 0;
	if (check_batch(b) != 0)
		return SP_EINVAL;
	const layout L = make_layout(b, PATCH);
	char *base = (char *)scratch;
	double *wpix = (double *)(base + L.pix), *wivar = (double *)(base + L.ivar);
	const size_t np = (size_t)b->np;
	double *icov = normal, *y = icov + np * n * n, *fw = y + np * n;
	const common c = common_of(b);

	/* the band slots [np]: 0, not known (the CPU's decorrelation scans) */
	if (cudaMemsetAsync(fw + np * n, 0, np * sizeof(double), st) != cudaSuccess)
		return SP_ECUDA;

	for (int c0 = 0; c0 < b->np; c0 += CHUNK) {
		size_t maxpix;
		const geom g = geom_of(b, c0, &maxpix);
		const int P = g.np;
		const dim3 pixgrid(grid_for(maxpix), P);
		const unsigned nt = (unsigned)((n + TILE - 1) / TILE);
		double *ic = icov + (size_t)c0 * n * n, *yc_ = y + (size_t)c0 * n;
		double *fwc = fw + (size_t)c0 * n;

		k_window<<<pixgrid, THREADS, 0, st>>>(c, g, img, ivar, wpix, wivar);
		LAUNCHED();
		k_normal<<<dim3(nt, nt, P), dim3(TILE, TILE), 0, st>>>(c, g, spots, xc, yc, wpix,
									 wivar, ic, yc_, fwc);
		LAUNCHED();
		k_regularise<<<P, THREADS, 0, st>>>(c, ic, fwc);
		LAUNCHED();
	}
	return 0;
}

extern "C" int desi_decorrelate_batch_cuda(const desi_batch_t *b, const double *spots,
					   const int32_t *xc, const int32_t *yc, const float *img,
					   const float *ivar, double *normal, float *rows,
					   void *scratch, void *blas, void *solver,
					   struct CUstream_st *stream)
{
	const desi_patch_t *p = &b->p;
	const int m = p->nwave, n = p->nfib * m;
	cublasHandle_t hb = (cublasHandle_t)blas;
	cusolverDnHandle_t hs = (cusolverDnHandle_t)solver;
	cudaStream_t st = (cudaStream_t)stream;

	if (b->np <= 0)
		return 0;
	if (check_batch(b) != 0)
		return SP_EINVAL;
	const size_t smem = smem_bytes(m);
	int dev = 0, optin = 0;
	CU(cudaGetDevice(&dev));
	CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
	if (smem > (size_t)optin)
		return SP_EINVAL; /* nwave too large for the in-block Jacobi (~110 on sm_90) */
	CU(cudaFuncSetAttribute(k_decorrelate, cudaFuncAttributeMaxDynamicSharedMemorySize,
				(int)smem));
	BL(cublasSetPointerMode(hb, CUBLAS_POINTER_MODE_HOST));

	const layout L = make_layout(b, DECOR);
	char *base = (char *)scratch;
	double *wpix = (double *)(base + L.pix), *wivar = (double *)(base + L.ivar);
	double *chi2 = (double *)(base + L.chi2), *tpos = (double *)(base + L.tpos);
	double *z = (double *)(base + L.z);
	double *cbb = (double *)(base + L.c), *core = (double *)(base + L.core);
	double **pa = (double **)(base + L.pa), **px = (double **)(base + L.px);
	double **pl = (double **)(base + L.pl), **pzt = (double **)(base + L.pzt);
	double *evs = (double *)(base + L.ev);
	int *einfo = (int *)(base + L.einfo);
	int *info = (int *)(base + L.info), *info_rs = (int *)(base + L.info_rs);
	int *fail = (int *)(base + L.fail);
	const size_t np = (size_t)b->np;
	double *icov = normal, *y = icov + np * n * n;
	const common c = common_of(b);
	const double one = 1.0, zero = 0.0;
	const int K = p->core_nf * m, first = p->core_f0 * m, syevb = eigen_syevb(),
		  potrs = solve_potrs();
	const size_t solve_smem = ((size_t)DSK_NB * DSK_NB + (size_t)n) * sizeof(double);
	if (syevb)
		CU(cudaFuncSetAttribute(k_decor_finish, cudaFuncAttributeMaxDynamicSharedMemorySize,
					(int)smem));

	for (int c0 = 0; c0 < b->np; c0 += CHUNK) {
		size_t maxpix;
		const geom g = geom_of(b, c0, &maxpix);
		const int P = g.np;
		const dim3 pixgrid(grid_for(maxpix), P);
		double *ic = icov + (size_t)c0 * n * n, *x = y + (size_t)c0 * n;
		steps t;

		steps_begin(&t);
		steps_mark(&t, S_WINDOW, st);
		k_window<<<pixgrid, THREADS, 0, st>>>(c, g, img, ivar, wpix, wivar);
		LAUNCHED();
		k_pointers<<<grid_for((size_t)P), THREADS, 0, st>>>(c, P, ic, x, z, pa, px, pl, pzt,
								     fail);
		LAUNCHED();
		steps_mark(&t, S_POTRF, st);
		SO(cusolverDnDpotrfBatched(hs, CUBLAS_FILL_MODE_LOWER, n, pa, n, info, P));
		steps_mark(&t, S_SOLVE, st);
		if (potrs) {
			SO(cusolverDnDpotrsBatched(hs, CUBLAS_FILL_MODE_LOWER, n, 1, pa, n, px, n,
						   info_rs, P));
		} else {
			k_solve<<<P, THREADS, solve_smem, st>>>(c, pa, px);
			LAUNCHED();
		}
		steps_mark(&t, S_TRSM, st);
		k_eye<<<grid_for((size_t)P * n * K), THREADS, 0, st>>>(c, P, z);
		LAUNCHED();
		/* Z = L^-1 E: rows above `first` stay k_eye's zeros (dsk_pointers) */
		BL(cublasDtrsmBatched(hb, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
				      CUBLAS_DIAG_NON_UNIT, n - first, K, &one,
				      (const double *const *)pl, n, (double *const *)pzt, n, P));
		/* C_bb = Z_b' Z_b for every (patch, core fibre): Z_b are n x m
		 * blocks at a uniform stride n m. */
		steps_mark(&t, S_GEMM, st);
		BL(cublasDgemmStridedBatched(hb, CUBLAS_OP_T, CUBLAS_OP_N, m, m, n, &one, z, n,
					     (long long)n * m, z, n, (long long)n * m, &zero, cbb, m,
					     (long long)m * m, P * p->core_nf));
		steps_mark(&t, S_EIGEN, st);
#if CUDART_VERSION >= 13000
		if (syevb) {
			int ret = syev_batched(hs, st, m, P * p->core_nf, cbb, evs, einfo);
			if (ret != 0)
				return ret;
			steps_mark(&t, S_FINISH, st);
			k_decor_finish<<<P * p->core_nf, THREADS, smem, st>>>(c, g, cbb, evs, einfo,
									      x, core, fail);
		} else
#endif
		{
			k_decorrelate<<<P * p->core_nf, THREADS, smem, st>>>(c, g, cbb, x, core,
									     fail);
			steps_mark(&t, S_FINISH, st);
		}
		LAUNCHED();
		steps_mark(&t, S_CHI2, st);
		k_chi2pix<<<pixgrid, THREADS, (size_t)n * sizeof(int), st>>>(
			c, g, spots, xc, yc, wpix, wivar, x, chi2, tpos);
		LAUNCHED();
		k_chi2core<<<P, THREADS, 0, st>>>(c, g, spots, xc, yc, wivar, chi2, tpos, core);
		LAUNCHED();
		steps_mark(&t, S_WRITE, st);
		k_write<<<P, THREADS, 0, st>>>(c, g, core, info, fail, rows);
		LAUNCHED();
		steps_mark(&t, S_N, st);
		steps_end(&t, P);
	}
#if CUDART_VERSION < 13000
	(void)k_decor_finish; /* no cusolverDnXsyevBatched before CUDA 13 here */
#endif
	(void)evs;
	(void)einfo;
	return 0;
}

extern "C" int desi_extract_batch_cuda(const desi_batch_t *b, const double *spots,
				       const int32_t *xc, const int32_t *yc, const float *img,
				       const float *ivar, float *rows, void *scratch, void *blas,
				       void *solver, struct CUstream_st *stream)
{
	/* the normal equations first in the scratch, then the phases' own */
	double *normal = (double *)scratch;
	char *rest = (char *)scratch + (desi_normal_doubles(b) * sizeof(double) + 255) / 256 * 256;
	int ret = desi_patch_batch_cuda(b, spots, xc, yc, img, ivar, normal, rest, stream);
	if (ret == 0)
		ret = desi_decorrelate_batch_cuda(b, spots, xc, yc, img, ivar, normal, rows, rest,
						  blas, solver, stream);
	return ret;
}

extern "C" int desi_stitch_cuda(const desi_batch_t *b, int nf_out, size_t grid, const float *rows,
				float *frame, struct CUstream_st *stream)
{
	const size_t n = (size_t)b->p.core_nf * (size_t)nf_out * (size_t)b->nwave_grid;
	if (n == 0)
		return 0;
	const size_t blocks = (n + THREADS - 1) / THREADS;
	k_stitch<<<(unsigned)(blocks < 4096 ? blocks : 4096), THREADS, 0, (cudaStream_t)stream>>>(
		n, nf_out, b->nfield, b->nwave_grid, grid, b->col0, rows, frame);
	LAUNCHED();
	return 0;
}
