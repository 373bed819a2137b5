/* DESI patch extraction and decorrelation: the contract of the CPU and CUDA kernels. */
#ifndef SP_DESI_EXTRACT_H
#define SP_DESI_EXTRACT_H

/*
 * DESIGN: one patch = nfib fibres (the subbundle's own, plus up to one
 * neighbour each side inside the bundle) x nwave padded wavelengths; its
 * unknowns are ordered fibre-major, index f*nwave + w, n = nfib*nwave.  The
 * projection A is never formed: column (f, w) is the spot spots[f][w]
 * ([sy][sx] pixels) placed with its corner at CCD (yc, xc), cut to the
 * patch's pixel window [ymin, ymin+ny) x [xmin, xmin+nx) (cut spots are not
 * renormalised).  Arrays are C order (row-major), doubles unless said.
 * The math is ../shared/science/desi-extraction.md, steps 1-8.
 */

#include <stddef.h>
#include <stdint.h>

struct CUstream_st;

typedef struct desi_patch {
	int nfib, nwave;  /* unknowns n = nfib * nwave, fibre-major */
	int sy, sx;       /* spot size (11, 17) */
	int ymin, xmin;   /* CCD row/column of window pixel [0][0] */
	int ny, nx;       /* window size */
	int core_f0, core_nf; /* core fibres: [core_f0, core_f0 + core_nf) of the patch's nfib */
	int core_w0, core_nw; /* core wavelengths: [core_w0, core_w0 + core_nw) of nwave */
	int ndiag;        /* resolution half-width (HSIZEY = 5): 2 ndiag + 1 diagonals */
	double regularize;
	double psferr;
	int fstride;      /* columns from one fibre's spots/xc/yc to the next's (0: nwave) */
} desi_patch_t;

static inline int desi_patch_n(const desi_patch_t *p) { return p->nfib * p->nwave; }

/* Where column j (fibre-major) sits in the spots/xc/yc arrays the CPU
 * kernels are given: j itself for a patch's own arrays (fstride 0 or
 * nwave); inside a bundle's arrays (fstride = its nfullwave, the pointers
 * at the patch's first spot) the same column without copying them. */
static inline size_t desi_patch_col(const desi_patch_t *p, int j)
{
	if (p->fstride == 0 || p->fstride == p->nwave)
		return (size_t)j;
	return (size_t)(j / p->nwave) * (size_t)p->fstride + (size_t)(j % p->nwave);
}

/* Step 1-2: iCov = A'NA (+ regularisation), y = A'Np, fluxweight = A'N1.
 * spots [nfib][nwave][sy][sx], xc/yc [nfib][nwave] (or fibre rows fstride
 * apart, see desi_patch_col()); pix/ivar [ny][nx].
 * icov [n][n] (full symmetric), y [n], fluxweight [n] (before
 * regularisation, as the reference reports it).  For tests: the pipeline
 * writes the upper triangle only (desi_extract_normal_cpu_isa()). */
void desi_extract_normal_cpu(const desi_patch_t *p, const double *spots, const int32_t *xc,
			     const int32_t *yc, const double *pix, const double *ivar, double *icov,
			     double *y, double *fluxweight);
/* The same with the SIMD variant isa of src/base/cpuisa.h (the baseline
 * where isa cannot run here; every variant gives the same bits) and work:
 * desi_extract_normal_work_size() doubles (desi_extract_normal_cpu()
 * allocates its own; work NULL: desi_kern.h's sums pair by pair, the same
 * bits, slower).  Writes icov's upper triangle only, icov[j1][j2] with
 * j2 >= j1 (row-major): the strictly lower one is left as it was.  Every
 * reader of the normal equations reads that triangle and no other (the
 * band Cholesky, the band scan, dsyevd's and LAPACK's 'L' in column-major
 * order, cuSOLVER's and cuBLAS's CUBLAS_FILL_MODE_LOWER on the GPU), and
 * the mirror stores, one cache line each, cost ~10 % of the phase.
 * Returns the largest j2 - j1 of an entry icov[j1][j2] != 0, j2 > j1 (-1
 * if none): the bandwidth a scan of icov finds. */
int desi_extract_normal_cpu_isa(int isa, const desi_patch_t *p, const double *spots,
				const int32_t *xc, const int32_t *yc, const double *pix,
				const double *ivar, double *icov, double *y, double *fluxweight,
				double *work);
size_t desi_extract_normal_work_size(const desi_patch_t *p);
/* The model A x over the window, model [ny][nx] (desi_extract_chi2_cpu()'s
 * first step), with SIMD variant isa (as above; the same bits in every
 * variant). */
void desi_extract_model_cpu_isa(int isa, const desi_patch_t *p, const double *spots,
				const int32_t *xc, const int32_t *yc, const double *x, double *model);
/* The decorrelation's kept parts of R for one block, from W = V
 * diag(ev^-1/4) (m x m, column-major): s = W W' 1, qx = W W' xb and the
 * 2 nd0 + 1 diagonals of W W' at columns w0 .. w0 + cnw - 1 into dg
 * [2 nd0 + 1][cnw]; work: 2 m doubles.  With SIMD variant isa (as above;
 * the same bits in every variant): for tests. */
void desi_kept_parts_isa(int isa, int m, const double *w, const double *xb, int w0, int cnw,
			 int nd0, double *s, double *qx, double *dg, double *work);

/* Step 3: solves icov x = y (icov symmetric positive definite).  Returns 0,
 * or a positive LAPACK info when icov is not positive definite.  work: see
 * desi_extract_work_size(). */
int desi_extract_solve_cpu(const desi_patch_t *p, const double *icov, const double *y, double *x,
			   double *work);

/* Steps 4-6 (signal-mode decorrelation) for the core fibres only:
 * flux [core_nf][core_nw] = (R x) core, ivar [core_nf][core_nw] = s^2 core,
 * rdiags [core_nf][2 ndiag + 1][core_nw] as the reference's layout.  Also
 * returns, if rfull is not NULL, the full R [n][n] (block diagonal; for
 * tests).  Returns 0 or a positive LAPACK info. */
int desi_decorrelate_cpu(const desi_patch_t *p, const double *icov, const double *x,
			 double *flux, double *ivar, double *rdiags, double *rfull, double *work);

/* desi_decorrelate_cpu() in three parts, so that a caller can run the
 * middle one over the blocks of several patches at once (extract_batch.c):
 * desi_decorrelate_blocks_cpu() writes the core blocks C_bb of iCov^-1,
 * cbb [core_nf][nwave][nwave] (lower triangles, column-major), and, when
 * y is not NULL, solves icov x = y (step 3) with the same band Cholesky
 * factor, as desi_extract_solve_cpu() does (the same bits);
 * desi_eigh_batch(sp_cpu_isa(), ...) decomposes them (in place);
 * desi_decorrelate_finish_cpu() finishes core blocks c0 .. c0 + nb - 1
 * from their eigenvectors vecs[c] and eigenvalues ev[c] (LAPACK's first
 * where !ok[c]) into flux, ivar, rdiags (and rfull, which it does not
 * clear).  Return 0 or a positive LAPACK info.  work:
 * desi_extract_work_size() doubles (finish and desi_eigh_batch() need
 * less). */
int desi_decorrelate_blocks_cpu(const desi_patch_t *p, const double *icov, const double *y,
				double *x, double *cbb, double *work);
/* The same given icov's largest offset maxoff (desi_extract_normal_cpu_isa()'s
 * result) instead of scanning for it; maxoff < -1: scan. */
int desi_decorrelate_blocks_cpu_kd(const desi_patch_t *p, const double *icov, int maxoff,
				   const double *y, double *x, double *cbb, double *work);
int desi_decorrelate_finish_cpu(const desi_patch_t *p, int c0, int nb, double *const *vecs,
				double *const *ev, const int *ok, const double *x, double *flux,
				double *ivar, double *rdiags, double *rfull, double *work);

/* The same by the reference's route (full eigendecomposition of icov), for
 * tests and the benchmark. */
int desi_decorrelate_eigh_cpu(const desi_patch_t *p, const double *icov, const double *x,
			      double *flux, double *ivar, double *rdiags, double *rfull,
			      double *work);

/* The decorrelation's block eigendecompositions, for tests: the nb m x m
 * symmetric matrices mat[k] (lower triangles, column-major), one per lane
 * of SIMD variant isa (src/base/cpuisa.h), overwritten with their
 * eigenvectors (columns) and ev[k] [m] with their eigenvalues (unsorted);
 * ok[k] = 0 where the lanes could not share the work (mat[k] is then left
 * as it was; desi_decorrelate_cpu() uses LAPACK for it).  work:
 * desi_eigh_batch_work(m) doubles.  Returns -1 when the variant cannot run
 * here.  Every variant gives the same bits. */
int desi_eigh_batch(int isa, int m, int nb, double *const *mat, double *const *ev, int *ok,
		    double *work);
size_t desi_eigh_batch_work(int m);

/* Steps 7-8: pixmask_fraction and chi2pix of the core [core_nf][core_nw],
 * from the deconvolved x (all n). */
void desi_extract_chi2_cpu(const desi_patch_t *p, const double *spots, const int32_t *xc,
			   const int32_t *yc, const double *pix, const double *ivar, const double *x,
			   double *chi2pix, double *pixmask_fraction, double *work);

/* Doubles of scratch space the kernels above need for patch p. */
size_t desi_extract_work_size(const desi_patch_t *p);

/* ---- A subbundle at once: every patch along the wavelength axis ----
 *
 * The patches of one subbundle share nfib, nwave, the spot size, the core
 * fibres and the parameters (the common desi_patch_t; its window and
 * core_nw fields are ignored) and differ in their window and wavelength
 * offset, given per patch.  Their spots are read in place from the
 * bundle's arrays: patch i's fibre f, padded wavelength w is bundle spot
 * [fib0 + f][w0[i] + w].  Results go straight into the subbundle's rows of
 * the frame buffer, float [core_nf][nfield][nwave_grid], fields in the order
 * flux, ivar, chi2pix, pixmask_fraction, then the 2 ndiag + 1 resolution
 * rows, then, when xflux is set, the deconvolved flux x of the core
 * (field 4 + 2 ndiag + 1: the solution of iCov x = y before the
 * decorrelation, electrons per bin, not divided by dw; the 2-D model's
 * flux); patch i's core lands at grid bins [w0[i], w0[i] + core_nw[i])
 * (the padded offset of a patch equals its first core grid bin), that is
 * at columns w0[i] - col0 of the rows, with
 * flux / dw and ivar * dw^2 (electron / Angstrom). */
typedef struct desi_batch {
	desi_patch_t p;       /* common geometry and parameters */
	int np;               /* patches */
	const int *ymin, *ny, *xmin, *nx; /* [np] pixel windows (host memory) */
	const int *w0, *core_nw;          /* [np] */
	int fib0;             /* first patch fibre in the bundle's spot arrays */
	int nfullwave;        /* wavelength extent of the bundle's spot arrays */
	int npix_y, npix_x;   /* image size */
	int nwave_grid, nfield; /* the rows: [core_nf][nfield][nwave_grid] */
	int col0;             /* grid bin of the rows' column 0 (0: rows of the whole grid) */
	int xflux;            /* also the deconvolved flux x as the field after the resolution's */
	double dw;
} desi_batch_t;

/* Fields of the rows: 4 + 2 ndiag + 1, and the deconvolved flux with xflux. */
static inline int desi_batch_fields(const desi_batch_t *b)
{
	return 4 + 2 * b->p.ndiag + 1 + (b->xflux != 0);
}

/* The two phases of the batch, each a graph stage (desi.patch and
 * desi.decorrelate), meeting in `normal`: desi_normal_doubles() doubles,
 * laid out icov [np][n][n], y [np][n], fluxweight [np][n], band [np] (the
 * same on CPU and CUDA, so either phase may run on either; icov's strictly
 * lower triangle, row-major, is undefined after the CPU's patch phase and
 * read by neither decorrelation).  band[i] is 1 +
 * the largest j2 - j1 of an entry of icov != 0 where the CPU's patch phase
 * knows it, 0 where not (the CUDA phase's): the CPU's decorrelation then
 * needs not scan the ~1 MB of zeros past the band.  The patch phase writes it
 * (returns 0, -1 when out of memory, or DESI_CANCELLED); the decorrelate
 * phase reads it (the CUDA twin factors icov and solves y in place) and
 * returns as desi_extract_batch_cpu(). */
size_t desi_normal_doubles(const desi_batch_t *b);
/* What the batch functions return when a stop was requested while they ran
 * (src/base/cancel.h: polled before each patch and before the
 * eigendecompositions): their outputs are then partial and must not be
 * used; the item is cancelled. */
#define DESI_CANCELLED (-2)
int desi_patch_batch_cpu(const desi_batch_t *b, const double *spots, const int32_t *xc,
			 const int32_t *yc, const float *img, const float *ivar, double *normal);
int desi_decorrelate_batch_cpu(const desi_batch_t *b, const double *spots, const int32_t *xc,
			       const int32_t *yc, const float *img, const float *ivar,
			       const double *normal, float *rows);

/* CPU: the patches one after the other with the kernels above (both phases).  spots,
 * xc, yc: the bundle's; img/ivar: the image (float, masked at ivar 0).
 * Returns 0, -1 when its work buffers cannot be allocated, DESI_CANCELLED
 * when a stop was requested (the rows are partial), or the 1-based index of
 * the first patch whose normal matrix is not positive definite (its rows
 * are left at 0, the others are done). */
int desi_extract_batch_cpu(const desi_batch_t *b, const double *spots, const int32_t *xc,
			   const int32_t *yc, const float *img, const float *ivar, float *rows);

/* The 2-D model of a batch's core (the model image of desi.write
 * model=true): adds x(f, g) spot(f, g) to `model` [npix_y][npix_x] (float,
 * host) for every core fibre f and grid bin g of the rows' columns, x read
 * from the rows' deconvolved-flux field (b->xflux must be set), the spot
 * (bundle spot [fib0 + core_f0 + f][g + core_w0], uncut by the patch
 * windows) placed at its corner and clipped to the image.  Each term is
 * added in double and rounded to float, wavelength-major: g ascending, then
 * f, then the spot's pixels row by row.  Calls over consecutive column
 * ranges of one subbundle, in order, therefore add the same terms in the
 * same order as one call over them all: the image does not depend on how
 * the subbundle was split into tasks. */
void desi_model_batch_cpu(const desi_batch_t *b, const double *spots, const int32_t *xc,
			  const int32_t *yc, const float *rows, float *model);

/* desi.stitch: the first nf_out fields of a chunk's rows ([core_nf][nfield]
 * [nwave_grid]) into its columns col0 .. col0 + nwave_grid - 1 of its
 * subbundle's frame rows [core_nf][nf_out][grid]. */
void desi_stitch_cpu(const desi_batch_t *b, int nf_out, size_t grid, const float *rows,
		     float *frame);
/* CUDA twin (k_stitch: dsk_stitch_elem() per thread), device pointers,
 * asynchronous on stream; 0 or SP_ECUDA.  The same values as the CPU's: a
 * copy. */
int desi_stitch_cuda(const desi_batch_t *b, int nf_out, size_t grid, const float *rows,
		     float *frame, struct CUstream_st *stream);

/* CUDA twin: device pointers, batched over the patches (batched Cholesky),
 * asynchronous on stream; scratch: desi_extract_batch_cuda_scratch() bytes
 * of device memory; blas and solver: the worker's cublasHandle_t and
 * cusolverDnHandle_t, already bound to stream (the call sets cuBLAS's
 * host pointer mode).  Returns 0, SP_EINVAL for a geometry the kernels do
 * not support (nwave above the in-block eigensolver's limit, ~110), or
 * SP_ECUDA (launch or library errors); numerical failures are reported
 * per patch in the output as all-zero rows, as on the CPU. */
size_t desi_extract_batch_cuda_scratch(const desi_batch_t *b);
/* The phases on CUDA: `normal` is device memory of desi_normal_doubles();
 * scratch: desi_patch_cuda_scratch() and desi_decorrelate_cuda_scratch()
 * bytes.  Return as desi_extract_batch_cuda(). */
size_t desi_patch_cuda_scratch(const desi_batch_t *b);
size_t desi_decorrelate_cuda_scratch(const desi_batch_t *b);
int desi_patch_batch_cuda(const desi_batch_t *b, const double *spots, const int32_t *xc,
			  const int32_t *yc, const float *img, const float *ivar, double *normal,
			  void *scratch, struct CUstream_st *stream);
int desi_decorrelate_batch_cuda(const desi_batch_t *b, const double *spots, const int32_t *xc,
				const int32_t *yc, const float *img, const float *ivar,
				double *normal, float *rows, void *scratch, void *blas,
				void *solver, struct CUstream_st *stream);
int desi_extract_batch_cuda(const desi_batch_t *b, const double *spots, const int32_t *xc,
			    const int32_t *yc, const float *img, const float *ivar, float *rows,
			    void *scratch, void *blas, void *solver, struct CUstream_st *stream);

/* Nominal floating-point operation counts and device-memory bytes of the
 * kernels, for StarPU's performance models (STARPU_FLOPS, the size column)
 * and the estimated GPU times derived from them (tools/sim-node).  Dominant
 * terms, counted as bench/desi-patch counts them:
 *   patch:  A'NA at 3 flops per (column pair, shared pixel) term, with
 *           8.7 terms per column and spot pixel (counted on the reference
 *           patch: 843 k terms, n = 518, 11 x 17 spots), 4 flops per spot
 *           pixel for y and fluxweight, and the wavelength-major band
 *           Cholesky and solve, n kdw^2 + 4 n kdw, kdw = 8 nfib + 2 (58);
 *   decorrelate: band Cholesky n kd^2 and Takahashi 2 (n - core_f0 nwave)
 *           kd^2, kd = 2 nwave + 8 (156), then per core fibre a dsyevd with
 *           vectors (4.7 m^3) and an m x m product (2 m^3), m = nwave, and
 *           the chi2 model (2 flops per spot pixel);
 *   spots:  per spot the two Gauss-Hermite contractions, 2 (dx+1)(dy+1) sx
 *           + 2 (dy+1) sx sy, the normalisation 2 sx sy, and the 1-D
 *           Hermite tables, 8 (sx + sy)(max(dx, dy) + 1).
 * bytes: what the kernel reads and writes: the patches' pixel windows
 * (image and ivar, float), their spots (double), the normal equations
 * (icov n^2, y, fluxweight; read and written again by the decorrelation)
 * and the chunk's rows (float). */
double desi_patch_flops(const desi_patch_t *p);
double desi_decorrelate_flops(const desi_patch_t *p);
double desi_spots_flops(int sx, int sy, int dx, int dy, size_t nspots);
double desi_patch_bytes(const desi_batch_t *b);
double desi_decorrelate_bytes(const desi_batch_t *b, size_t nrows);

#endif /* SP_DESI_EXTRACT_H */
