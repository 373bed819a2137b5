/* What the DESI extraction's two CUDA files share (extract_cuda.cu: the
 * kernels and the entry points; extract_cuda_host.cu: the scratch layout,
 * the kernels' parameter structs, the step timing and the batched
 * eigensolver call); CUDA only. */
#ifndef SP_DESI_EXTRACT_CUDA_H
#define SP_DESI_EXTRACT_CUDA_H

#ifndef __CUDACC__
#error "extract_cuda.h is for the .cu files"
#endif

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

extern "C" {
#include "extract.h"
#include "error.h"
}
#include "desi_kern.h"
#include "cuda_handles.h"

#define CHUNK 64 /* DESI_BATCH_MAX: patches per chunk */
#define THREADS DSK_THREADS
#define TILE DSK_TILE
#define JACOBI_SWEEPS 40

/* A named namespace: the two files share these, and other .cu files have
 * their own `layout` and kernels. */
namespace desi_cu {

struct common {
	int nfib, m, n, sy, sx, core_f0, core_nf, core_w0, ndiag, nd, nf_out;
	int fib0, nfullwave, npix_y, npix_x, nwave_grid, nfield, col0, xflux;
	double regularize, psferr, dw;
};

struct geom {
	int np;
	int ymin[CHUNK], ny[CHUNK], xmin[CHUNK], nx[CHUNK], w0[CHUNK], cnw[CHUNK];
	long long poff[CHUNK]; /* first pixel of the patch's window in the chunk's buffers */
};

static_assert(sizeof(common) + sizeof(geom) + 12 * sizeof(void *) < 4000,
	      "kernel parameters must stay under 4 KB");

/* Scratch layout, in bytes from the start, each region 256-aligned. */
struct layout {
	int cap;                  /* patches per chunk */
	size_t pixcap;            /* window pixels per chunk */
	size_t pix, ivar, chi2, tpos, z, c, core, pa, px, pl, pzt, info, info_rs, fail;
	size_t ev, einfo; /* the batched eigensolver's eigenvalues and infos (eigen=syevb) */
	size_t total;
};

/* Scratch of a phase: PATCH (windows only), DECOR (all but the normal
 * equations, which live in the caller's `normal`). */
enum phase { PATCH, DECOR };

/* k_decorrelate's dynamic shared memory for m x m blocks, bytes. */
size_t smem_bytes(int m);
/* The scratch layout of phase ph for batch b. */
layout make_layout(const desi_batch_t *b, phase ph);
/* The kernels' scalar parameters of batch b. */
common common_of(const desi_batch_t *b);
/* The geometry of patches [c0, c0 + CHUNK) of b; *maxpix: the largest window. */
geom geom_of(const desi_batch_t *b, int c0, size_t *maxpix);
/* Geometry the kernels support: SP_EINVAL otherwise. */
int check_batch(const desi_batch_t *b);

/* ---- step timing and the eigensolver's choice (environment) ----
 *
 * SP_CUDA_STEPS=1: desi_decorrelate_batch_cuda() records a CUDA event
 * between its steps, waits for the chunk's last, and adds each step's GPU
 * time to a per-process table printed on stderr at exit (a profiling aid:
 * the wait costs the overlap of consecutive tasks; bench/gpu uses it).
 * Step 5's eigendecompositions are cusolverDnXsyevBatched's in CUDA 13
 * builds (faster than the in-block Jacobi kernel: doc/gpu.md), the Jacobi
 * kernel's before, or with SP_DESI_EIGEN=jacobi; both
 * give C_bb = V diag(ev) V' to rounding.  SP_DESI_SOLVE=potrs: x by
 * cusolverDnDpotrsBatched instead of k_solve (for A/B). */

enum step { S_WINDOW, S_POTRF, S_SOLVE, S_TRSM, S_GEMM, S_EIGEN, S_FINISH, S_CHI2, S_WRITE, S_N };

/* A chunk's events: mark(k) before step k, mark(S_N) after the last. */
struct steps {
	int on;
	cudaEvent_t ev[S_N + 1];
};

void steps_begin(steps *t);
void steps_mark(steps *t, int k, cudaStream_t st);
void steps_end(steps *t, int np);
/* 1 when step 5 uses cuSOLVER's batched eigensolver: in CUDA 13 builds,
 * unless SP_DESI_EIGEN=jacobi. */
int eigen_syevb(void);
/* 1 when SP_DESI_SOLVE=potrs asks for cusolverDnDpotrsBatched. */
int solve_potrs(void);
#if CUDART_VERSION >= 13000
/* cusolverDnXsyevBatched over the nb m x m blocks of cbb (column-major,
 * m m apart): eigenvectors in place, eigenvalues into ev, infos into
 * einfo. */
int syev_batched(cusolverDnHandle_t hs, cudaStream_t st, int m, int nb, double *cbb,
		 double *ev, int *einfo);
#endif

static inline unsigned grid_for(size_t work)
{
	size_t g = (work + THREADS - 1) / THREADS;
	return (unsigned)(g < 1 ? 1 : g > 4096 ? 4096 : g);
}

} /* namespace desi_cu */

/* Each failure is noted (sp_cuda_note_error) for the message the user
 * sees, then SP_ECUDA is returned. */
#define CU(call)                                                           \
	do {                                                               \
		cudaError_t e_ = (call);                                   \
		if (e_ != cudaSuccess) {                                   \
			sp_cuda_note_error(#call, cudaGetErrorString(e_)); \
			return SP_ECUDA;                                   \
		}                                                          \
	} while (0)
#define LAUNCHED() CU(cudaGetLastError())
#define BL(call)                                                              \
	do {                                                                  \
		cublasStatus_t s_ = (call);                                   \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                            \
			sp_cuda_note_error(#call, cublasGetStatusString(s_)); \
			return SP_ECUDA;                                      \
		}                                                             \
	} while (0)
#define SO(call)                                                 \
	do {                                                     \
		cusolverStatus_t s_ = (call);                    \
		if (s_ != CUSOLVER_STATUS_SUCCESS) {             \
			char why_[32];                           \
			snprintf(why_, sizeof why_, "status %d", \
				 (int)s_);                       \
			sp_cuda_note_error(#call, why_);         \
			return SP_ECUDA;                         \
		}                                                \
	} while (0)


#endif
