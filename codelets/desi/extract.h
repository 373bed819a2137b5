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
} desi_patch_t;

static inline int desi_patch_n(const desi_patch_t *p) { return p->nfib * p->nwave; }

/* Step 1-2: iCov = A'NA (+ regularisation), y = A'Np, fluxweight = A'N1.
 * spots [nfib][nwave][sy][sx], xc/yc [nfib][nwave]; pix/ivar [ny][nx].
 * icov [n][n] (full symmetric), y [n], fluxweight [n] (before
 * regularisation, as the reference reports it). */
void desi_extract_normal_cpu(const desi_patch_t *p, const double *spots, const int32_t *xc,
			     const int32_t *yc, const double *pix, const double *ivar, double *icov,
			     double *y, double *fluxweight);

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

/* The same by the reference's route (full eigendecomposition of icov), for
 * tests and the benchmark. */
int desi_decorrelate_eigh_cpu(const desi_patch_t *p, const double *icov, const double *x,
			      double *flux, double *ivar, double *rdiags, double *rfull,
			      double *work);

/* Steps 7-8: pixmask_fraction and chi2pix of the core [core_nf][core_nw],
 * from the deconvolved x (all n). */
void desi_extract_chi2_cpu(const desi_patch_t *p, const double *spots, const int32_t *xc,
			   const int32_t *yc, const double *pix, const double *ivar, const double *x,
			   double *chi2pix, double *pixmask_fraction, double *work);

/* Doubles of scratch space the kernels above need for patch p. */
size_t desi_extract_work_size(const desi_patch_t *p);

#endif /* SP_DESI_EXTRACT_H */
