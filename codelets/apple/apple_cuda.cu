/* APPLE-Picker CUDA kernels: the FFT query score and the SVM classification (the twins of
 * apple_score.c and apple_svm.c); the image steps are in apple_cuda_image.cu. */
#include <cuda_runtime.h>
#include <cufft.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_handles.h"
extern "C" {
#include "apple.h"
#include "error.h"
}
#include "apple_kern.h"
#include "apple_cuda_util.h"

/*
 * DESIGN.  Score: the queries of [qbegin, qend) go through in chunks of
 * the plan set's `chunk` queries, four stream-ordered steps per chunk:
 *   1. gather: the chunk's q x q windows of im into wreal [chunk][q][q];
 *   2. one batched D2Z (batch chunk) -> wspec [chunk][q][q/2 + 1], the
 *      layout of FFTW's r2c and of apple_score_refs_fft()'s spec;
 *   3. product: P[k nref + r] = R_r conj(W_k), apple_score.c's expression
 *      (a c + b d, b c - a d, __dmul_rn/__dadd_rn: never an FMA);
 *   4. one batched Z2D (batch chunk nref) -> creal [chunk nref][q][q],
 *      then one warp per (query, reference) pair: its maximum and
 *      resp = (max - p0) / q^2 with p0 = Re P[0], recomputed from R and W
 *      (cuFFT's Z2D overwrites its input).
 * cuFFT plans have a fixed batch, so the last, partial chunk runs the full
 * batch: its gather and product write zeros past the real queries (no
 * uninitialised memory reaches cuFFT) and the reduction skips them.  The
 * caller picks the chunk (apple_score_cuda_chunk() fits a byte budget) and
 * makes the plan set once per worker: planning allocates cuFFT's work area
 * and is no part of the hot path; the compute functions only launch on the
 * caller's stream (no allocation, no synchronisation).
 * Responses differ from the CPU's only through the transforms' rounding
 * (cuFFT against FFTW_ESTIMATE): ~1e-15 of the correlation's magnitude.
 *
 * The fused route (apple_score_cuda_fused(q): q = 2m, m odd <= 23, the
 * default particle size's q = 26 among them) replaces steps 3 and 4 by
 * one kernel, score_fused_kernel: a block per (query, npair references)
 * forms each pair's product, its column DFTs, its rows' real inverses and
 * their maximum in shared memory and registers (apple_kern.h, phases 1 to
 * 3), so no product or correlation crosses global memory: the cuFFT route
 * writes and reads back about 22 KB per pair at q = 26 (P, then creal),
 * ~140 GB per 4k micrograph.  Each thread does what one SIMD lane of the
 * CPU's lanes route does, in the same order, so for the same spectra the
 * responses are the CPU lanes route's bits.  Its chunks are capped at
 * APPLE_CUDA_FUSED_CHUNK queries: only the gather and the forward D2Z
 * scale with the chunk, and a tile's last chunk pays a full one.
 * STARPIPE_APPLE_SCORE=fftw selects the cuFFT route, as it selects FFTW's
 * on the CPU.
 *
 * Classification: one thread per window position, the support vectors
 * staged through shared memory in tiles (every thread reads the same one:
 * a broadcast), libsvm's sum in SV order with apple_svm.c's operations,
 * rounded one by one (__dsub_rn, __ddiv_rn, __dmul_rn, __dadd_rn).  The
 * decision value differs from the CPU's only through CUDA's exp (<= 1 ulp
 * from glibc's), so labels differ only where the value is ~1e-15 from 0.
 */

#define GATHER_THREADS 256
#define PROD_THREADS 256
#define RED_THREADS 256 /* 8 warps: 8 pairs per block */
#define SVM_THREADS 256
#define SVM_TILE 256    /* support vectors per shared-memory tile */

#define APPLE_CUDA_FUSED_CHUNK 512
static_assert(APK_TAB_H == APPLE_LANE_H, "apple_kern.h reads apple_score_lane_tab()'s layout");
static_assert(APK_SCORE_MAXM <= APPLE_LANE_MAXM, "the fused route's table comes from the lanes'");

struct apple_score_cuda {
	int q, nref, chunk;
	int m;       /* apple_score_cuda_fused(q): the fused route, or 0 */
	double *tab; /* device: apple_score_lane_tab(m) (fused route) */
	cufftHandle fwd, inv;
	int has_fwd, has_inv;
};

extern "C" int apple_score_cuda_fused(int q)
{
	return apple_score_library_route() ? 0 : apk_score_fused_m(q);
}

static size_t scratch_layout(int q, int nref, int chunk, int fused, size_t off[4])
{
	size_t nn = (size_t)q * q, ns = apple_score_spec_size(q), c = (size_t)chunk;
	size_t o = 0; /* fused: no P, no creal */
	off[0] = o; /* wreal */
	o = align_up(o + c * nn * sizeof(double));
	off[1] = o; /* wspec */
	o = align_up(o + c * ns * sizeof(cufftDoubleComplex));
	off[2] = o; /* P */
	o = align_up(o + !fused * c * nref * ns * sizeof(cufftDoubleComplex));
	off[3] = o; /* creal */
	o = align_up(o + !fused * c * nref * nn * sizeof(double));
	return o;
}

extern "C" size_t apple_score_cuda_scratch(int q, int nref, int nquery_chunk)
{
	size_t off[4];
	if (q < 1 || nref < 1 || nquery_chunk < 1)
		return 0;
	return scratch_layout(q, nref, nquery_chunk, apple_score_cuda_fused(q) > 0, off);
}

extern "C" int apple_score_cuda_chunk(int q, int nref, int nquery, size_t max_bytes)
{
	int lo = 1, hi = nquery > 1 ? nquery : 1;

	if (q < 1 || nref < 1)
		return 1;
	if (apple_score_cuda_fused(q) > 0 && hi > APPLE_CUDA_FUSED_CHUNK)
		hi = APPLE_CUDA_FUSED_CHUNK;
	/* the largest chunk <= nquery whose scratch fits (at least 1) */
	while (lo < hi) {
		int mid = lo + (hi - lo + 1) / 2;
		if (apple_score_cuda_scratch(q, nref, mid) <= max_bytes)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

extern "C" apple_score_cuda_t *apple_score_cuda_new(int q, int nref, int nquery_chunk)
{
	if (q < 2 || nref < 1 || nquery_chunk < 1 ||
	    (long long)nquery_chunk * nref > 0x7fffffffLL)
		return NULL;
	apple_score_cuda_t *p = (apple_score_cuda_t *)calloc(1, sizeof *p);
	if (p == NULL)
		return NULL;
	p->q = q;
	p->nref = nref;
	p->chunk = nquery_chunk;
	p->m = apple_score_cuda_fused(q);
	int n[2] = { q, q };
	size_t ws = 0;
	/* NULL embeds: contiguous [batch][q][q] reals, [batch][q][q/2 + 1] complexes */
	if (cufftCreate(&p->fwd) != CUFFT_SUCCESS)
		goto fail;
	p->has_fwd = 1;
	if (cufftMakePlanMany(p->fwd, 2, n, NULL, 1, 0, NULL, 1, 0, CUFFT_D2Z, nquery_chunk,
			      &ws) != CUFFT_SUCCESS)
		goto fail;
	if (p->m > 0) {
		double tab[APPLE_LANE_TAB];
		apple_score_lane_tab(p->m, tab);
		if (cudaMalloc((void **)&p->tab, sizeof tab) != cudaSuccess) {
			p->tab = NULL;
			goto fail;
		}
		if (cudaMemcpy(p->tab, tab, sizeof tab, cudaMemcpyHostToDevice) != cudaSuccess)
			goto fail;
		return p; /* no inverse plan */
	}
	if (cufftCreate(&p->inv) != CUFFT_SUCCESS)
		goto fail;
	p->has_inv = 1;
	if (cufftMakePlanMany(p->inv, 2, n, NULL, 1, 0, NULL, 1, 0, CUFFT_Z2D,
			      nquery_chunk * nref, &ws) != CUFFT_SUCCESS)
		goto fail;
	return p;
fail:
	apple_score_cuda_free(&p);
	return NULL;
}

extern "C" void apple_score_cuda_free(apple_score_cuda_t **pp)
{
	apple_score_cuda_t *p = *pp;

	if (p == NULL)
		return;
	if (p->has_fwd)
		cufftDestroy(p->fwd);
	if (p->has_inv)
		cufftDestroy(p->inv);
	if (p->tab != NULL)
		cudaFree(p->tab);
	free(p);
	*pp = NULL;
}

/* wreal[k][i][j] = im[r_k + i][c_k + j] for k < nvalid, 0 for nvalid <= k
 * < chunk; window k at ref[2 k], ref[2 k + 1] when ref is not NULL, else
 * at query k0 + k of the grid (row ((k0 + k) / gx) q/2, col (.. % gx) q/2). */
static __global__ void gather_kernel(const double *__restrict__ im, int nx, int q, int gx, int k0,
				     const int32_t *__restrict__ ref, int nvalid, int chunk,
				     double *__restrict__ wreal)
{
	const size_t nn = (size_t)q * q, total = (size_t)chunk * nn;
	const int h = q / 2;

	for (size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
	     t += (size_t)gridDim.x * blockDim.x) {
		int k = (int)(t / nn), p = (int)(t % nn), i = p / q, j = p % q;
		double v = 0.0;
		if (k < nvalid) {
			int r, c;
			if (ref != NULL) {
				r = ref[2 * k];
				c = ref[2 * k + 1];
			} else {
				r = ((k0 + k) / gx) * h;
				c = ((k0 + k) % gx) * h;
			}
			v = im[(size_t)(r + i) * nx + c + j];
		}
		wreal[t] = v;
	}
}

/* P[k nref + r][t] = R_r[t] conj(W_k[t]) for k < nvalid, 0 beyond. */
static __global__ void product_kernel(const double2 *__restrict__ spec,
				      const double2 *__restrict__ wspec, int ns, int nref,
				      int nvalid, int chunk, double2 *__restrict__ P)
{
	const size_t total = (size_t)chunk * nref * ns;

	for (size_t u = (size_t)blockIdx.x * blockDim.x + threadIdx.x; u < total;
	     u += (size_t)gridDim.x * blockDim.x) {
		size_t pair = u / ns;
		int t = (int)(u % ns), k = (int)(pair / nref), r = (int)(pair % nref);
		double2 out = make_double2(0.0, 0.0);
		if (k < nvalid) {
			double2 R = spec[(size_t)r * ns + t], W = wspec[(size_t)k * ns + t];
			double a = R.x, b = R.y, c = W.x, d = W.y;
			out.x = __dadd_rn(__dmul_rn(a, c), __dmul_rn(b, d));
			out.y = __dsub_rn(__dmul_rn(b, c), __dmul_rn(a, d));
		}
		P[u] = out;
	}
}

/* One warp per pair of the nvalid nref real pairs: resp = (max(cc) - p0) inv. */
static __global__ void reduce_kernel(const double *__restrict__ creal, const double2 *__restrict__ spec,
				     const double2 *__restrict__ wspec, int nn, int ns, int nref,
				     int npair, double inv, double *__restrict__ resp)
{
	const int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;

	for (int pair = blockIdx.x * wpb + (threadIdx.x >> 5); pair < npair;
	     pair += gridDim.x * wpb) {
		const double *cc = creal + (size_t)pair * nn;
		double m = cc[0];
		for (int t = lane; t < nn; t += 32)
			m = cc[t] > m ? cc[t] : m;
		for (int off = 16; off > 0; off >>= 1) {
			double o = __shfl_down_sync(0xffffffffu, m, off);
			m = o > m ? o : m;
		}
		if (lane == 0) {
			int k = pair / nref, r = pair % nref;
			double2 R = spec[(size_t)r * ns], W = wspec[(size_t)k * ns];
			double p0 = __dadd_rn(__dmul_rn(R.x, W.x), __dmul_rn(R.y, W.y));
			resp[pair] = __dmul_rn(__dsub_rn(m, p0), inv);
		}
	}
}

/* The fused route for q = 2 M (apple_kern.h): block b takes query
 * b / ngroups of the chunk and references (b % ngroups) npair .. + npair;
 * resp: the chunk's first row of responses. */
template <int M>
static __global__ void __launch_bounds__(256)
	score_fused_kernel(const double *__restrict__ tab, const double *__restrict__ spec,
			   const double *__restrict__ wspec, int nref, int npair, int ngroups,
			   double inv, double *__restrict__ resp)
{
	extern __shared__ double sm[];
	const int k = blockIdx.x / ngroups, r0 = (blockIdx.x % ngroups) * npair;
	const int npv = nref - r0 < npair ? nref - r0 : npair;
	const double *W = wspec + (size_t)4 * M * (M + 1) * k;

	for (int t = threadIdx.x; t < npv * apk_score_pair_threads(M); t += blockDim.x)
		apk_score_phase1(M, tab, spec, W, r0, npv, t, sm);
	__syncthreads();
	for (int t = threadIdx.x; t < npv * 2 * M; t += blockDim.x)
		apk_score_phase2(M, tab, npv, t, sm);
	__syncthreads();
	apk_score_phase3(M, spec, W, r0, npv, threadIdx.x, sm, inv, resp + (size_t)k * nref);
}

/* Launches the fused kernel for nv queries of wspec against nref
 * references (m: the plan set's). */
static int score_fused(int m, const double *tab, const double *spec, const double *wspec,
		       int nref, int nv, double inv, double *resp, cudaStream_t st)
{
	const int npair = apk_score_npair(m), ngroups = (nref + npair - 1) / npair;
	const unsigned threads = (unsigned)((npair * apk_score_pair_threads(m) + 31) / 32 * 32);
	const size_t smem = sizeof(double) * (size_t)npair * apk_score_pair_doubles(m);
	const unsigned blocks = (unsigned)((size_t)nv * ngroups);

	switch (m) {
#define FUSED_CASE(M)                                                                          \
	case M:                                                                                \
		score_fused_kernel<M><<<blocks, threads, smem, st>>>(tab, spec, wspec, nref, npair, \
								     ngroups, inv, resp);           \
		break;
		FUSED_CASE(3)
		FUSED_CASE(5)
		FUSED_CASE(7)
		FUSED_CASE(9)
		FUSED_CASE(11)
		FUSED_CASE(13)
		FUSED_CASE(15)
		FUSED_CASE(17)
		FUSED_CASE(19)
		FUSED_CASE(21)
		FUSED_CASE(23)
#undef FUSED_CASE
	default:
		return SP_EINVAL;
	}
	return sp_cuda_status(cudaGetLastError(), __func__) != 0 ? SP_ECUDA : 0;
}

extern "C" int apple_score_refs_fft_cuda(apple_score_cuda_t *plans, const double *im, int nx,
					 int q, const int32_t *ref, int nref, double *spec,
					 void *scratch, struct CUstream_st *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t off[4];

	if (plans == NULL || q != plans->q || nref < 0 || scratch == NULL)
		return SP_EINVAL;
	if (nref == 0)
		return 0;
	scratch_layout(plans->q, plans->nref, plans->chunk, plans->m > 0, off);
	double *wreal = (double *)((char *)scratch + off[0]);
	cufftDoubleComplex *wspec = (cufftDoubleComplex *)((char *)scratch + off[1]);
	const size_t nn = (size_t)q * q, ns = apple_score_spec_size(q);
	const int chunk = plans->chunk;

	if (sp_cufft_status(cufftSetStream(plans->fwd, st), "cufftSetStream") != 0)
		return SP_ECUDA;
	for (int k0 = 0; k0 < nref; k0 += chunk) {
		int nv = nref - k0 < chunk ? nref - k0 : chunk;
		gather_kernel<<<grid_for((size_t)chunk * nn, GATHER_THREADS), GATHER_THREADS, 0,
				st>>>(im, nx, q, 1, 0, ref + 2 * (size_t)k0, nv, chunk, wreal);
		if (sp_cuda_status(cudaGetLastError(), __func__) != 0)
			return SP_ECUDA;
		if (sp_cufft_status(cufftExecD2Z(plans->fwd, wreal, wspec), "cufftExecD2Z") != 0)
			return SP_ECUDA;
		if (sp_cuda_status(cudaMemcpyAsync(spec + 2 * ns * (size_t)k0, wspec,
				    sizeof(cufftDoubleComplex) * ns * (size_t)nv,
				    cudaMemcpyDeviceToDevice, st), "cudaMemcpyAsync") != 0)
			return SP_ECUDA;
	}
	return 0;
}

extern "C" int apple_score_responses_cuda(apple_score_cuda_t *plans, const double *im, int nx,
					  int q, int gx, const double *spec, int nref, int qbegin,
					  int qend, double *resp, void *scratch,
					  struct CUstream_st *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t off[4];

	if (plans == NULL || q != plans->q || nref != plans->nref || gx < 1 || qbegin < 0 ||
	    qend < qbegin || scratch == NULL)
		return SP_EINVAL;
	if (qend == qbegin)
		return 0;
	scratch_layout(q, nref, plans->chunk, plans->m > 0, off);
	double *wreal = (double *)((char *)scratch + off[0]);
	cufftDoubleComplex *wspec = (cufftDoubleComplex *)((char *)scratch + off[1]);
	cufftDoubleComplex *P = (cufftDoubleComplex *)((char *)scratch + off[2]);
	double *creal = (double *)((char *)scratch + off[3]);
	const int nn = q * q, ns = (int)apple_score_spec_size(q), chunk = plans->chunk;
	const double inv = 1.0 / (double)nn;

	if (sp_cufft_status(cufftSetStream(plans->fwd, st), "cufftSetStream") != 0 ||
	    (plans->has_inv &&
	     sp_cufft_status(cufftSetStream(plans->inv, st), "cufftSetStream") != 0))
		return SP_ECUDA;
	for (int k0 = qbegin; k0 < qend; k0 += chunk) {
		int nv = qend - k0 < chunk ? qend - k0 : chunk;
		gather_kernel<<<grid_for((size_t)chunk * nn, GATHER_THREADS), GATHER_THREADS, 0,
				st>>>(im, nx, q, gx, k0, NULL, nv, chunk, wreal);
		if (sp_cuda_status(cudaGetLastError(), __func__) != 0)
			return SP_ECUDA;
		if (sp_cufft_status(cufftExecD2Z(plans->fwd, wreal, wspec), "cufftExecD2Z") != 0)
			return SP_ECUDA;
		if (plans->m > 0) {
			int rc = score_fused(plans->m, plans->tab, spec, (const double *)wspec, nref, nv,
					     inv, resp + (size_t)(k0 - qbegin) * nref, st);
			if (rc != 0)
				return rc;
			continue;
		}
		product_kernel<<<grid_for((size_t)chunk * nref * ns, PROD_THREADS), PROD_THREADS, 0,
				 st>>>((const double2 *)spec, (const double2 *)wspec, ns, nref, nv,
				       chunk, (double2 *)P);
		if (sp_cuda_status(cudaGetLastError(), __func__) != 0)
			return SP_ECUDA;
		if (sp_cufft_status(cufftExecZ2D(plans->inv, P, creal), "cufftExecZ2D") != 0)
			return SP_ECUDA;
		int npair = nv * nref;
		reduce_kernel<<<grid_for((size_t)npair * 32, RED_THREADS), RED_THREADS, 0, st>>>(
			creal, (const double2 *)spec, (const double2 *)wspec, nn, ns, nref, npair,
			inv, resp + (size_t)(k0 - qbegin) * nref);
		if (sp_cuda_status(cudaGetLastError(), __func__) != 0)
			return SP_ECUDA;
	}
	return 0;
}

/* ---- classification ------------------------------------------------------ */

struct svm_scalars {
	double mu0, mu1, scale0, scale1, gamma, rho;
	int nsv, label_pos;
};

static __global__ void classify_kernel(svm_scalars s, const double *__restrict__ svc,
				       const double *__restrict__ mean,
				       const double *__restrict__ std, int nw, int r0,
				       size_t nwin, uint8_t *__restrict__ seg)
{
	__shared__ double tile[3 * SVM_TILE];
	const double ng = -s.gamma;

	/* every thread of the block walks the same tiles (block-uniform trip count) */
	for (size_t base = (size_t)blockIdx.x * blockDim.x; base < nwin;
	     base += (size_t)gridDim.x * blockDim.x) {
		size_t w = base + threadIdx.x;
		int valid = w < nwin;
		double f0 = 0.0, f1 = 0.0, sum = 0.0;
		if (valid) {
			size_t o = (size_t)r0 * nw + w;
			f0 = __ddiv_rn(__dsub_rn(mean[o], s.mu0), s.scale0);
			f1 = __ddiv_rn(__dsub_rn(std[o], s.mu1), s.scale1);
		}
		for (int t0 = 0; t0 < s.nsv; t0 += SVM_TILE) {
			int nt = s.nsv - t0 < SVM_TILE ? s.nsv - t0 : SVM_TILE;
			__syncthreads(); /* the previous tile is consumed */
			for (int u = threadIdx.x; u < 3 * nt; u += blockDim.x)
				tile[u] = svc[3 * (size_t)t0 + u];
			__syncthreads();
			if (valid)
				for (int i = 0; i < nt; i++) {
					double d0 = __dsub_rn(f0, tile[3 * i]);
					double d1 = __dsub_rn(f1, tile[3 * i + 1]);
					double d2 = __dadd_rn(__dmul_rn(d0, d0), __dmul_rn(d1, d1));
					sum = __dadd_rn(sum, __dmul_rn(tile[3 * i + 2],
								       exp(__dmul_rn(ng, d2))));
				}
		}
		if (valid) {
			int label = __dsub_rn(sum, s.rho) > 0 ? s.label_pos : 1 - s.label_pos;
			seg[w] = (uint8_t)(label == 1);
		}
	}
}

extern "C" int apple_classify_rows_cuda(const apple_svm_t *m, const double *svc,
					const double *mean, const double *std, int nw, int r0,
					int r1, uint8_t *seg, struct CUstream_st *stream)
{
	if (m == NULL || m->nsv < 0 || nw < 0 || r0 < 0 || r1 < r0)
		return SP_EINVAL;
	size_t nwin = (size_t)(r1 - r0) * (size_t)nw;
	if (nwin == 0)
		return 0;
	if ((m->nsv > 0 && svc == NULL) || mean == NULL || std == NULL || seg == NULL)
		return SP_EINVAL;
	svm_scalars s = { m->mu[0], m->mu[1], m->scale[0], m->scale[1], m->gamma, m->rho,
			  m->nsv, m->label_pos };
	classify_kernel<<<grid_for(nwin, SVM_THREADS), SVM_THREADS, 0, (cudaStream_t)stream>>>(
		s, svc, mean, std, nw, r0, nwin, seg);
	return sp_cuda_status(cudaGetLastError(), __func__);
}

