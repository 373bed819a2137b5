/* J-synchronization CUDA kernels: the twins of jsync_cpu.c, bit for bit. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_handles.h"
extern "C" {
#include "jsync.h"
#include "error.h"
}
#include "jsync_kern.h"

/*
 * DESIGN.  Blocks walk the runs (pairs) of [p0, p1) with a grid stride;
 * their threads walk k.  `best` gives each thread whole choice bytes (4
 * triplets), so no two threads write one byte; the matvec kernels give each
 * thread one triplet, so loads of vq and the atomics on wq[jk], wq[ik] are
 * coalesced.  wq is accumulated with atomicAdd on unsigned long long: two's
 * complement addition is the same bits as int64 addition, and integer sums
 * do not depend on the order, so wq equals the CPU's bit for bit.  Each
 * block sums its run's wq[ij] terms (warp shuffles, then shared memory) and
 * adds them with one atomic.
 *
 * The residuals use __dmul_rn/__dadd_rn/__dsub_rn (never contracted into
 * FMA) in exactly the order of jsync_cpu.c's DESIGN, so the choices equal
 * the CPU's bit for bit.  A run's byte offset in the chunk's choices and
 * its (i, j) come from closed forms (no table, no host pass).  What one
 * thread computes lives in jsync_kern.h, which tests/test_jsync_kern.c
 * runs on the host, block by block, against jsync_cpu.c.
 */

#define MAX_BLOCKS (1 << 20)

static __global__ void best_kernel(const double *R, int64_t N, int64_t p0,
				   int64_t p1, int64_t base, uint8_t *choices)
{
	for (int64_t p = p0 + blockIdx.x; p < p1; p += gridDim.x) {
		jsk_run_t r = jsk_run(N, p, base);
		int64_t nbytes = (r.L + 3) / 4;
		double A[9];
		for (int e = 0; e < 9; e++)
			A[e] = __ldg(R + 9 * p + e);
		for (int64_t b = threadIdx.x; b < nbytes; b += blockDim.x)
			choices[r.off + b] =
				jsk_best_byte(A, R + 9 * r.jk, R + 9 * r.ik, b, r.L);
	}
}

/* Adds the block's sum of v to *w (one atomic); every thread calls it. */
static __device__ void d_block_add(int64_t v, int64_t *w)
{
	__shared__ long long part[JSK_MV_THREADS / 32];
	long long s = v;

	for (int o = 16; o > 0; o /= 2)
		s += __shfl_down_sync(0xffffffffu, s, o);
	if (threadIdx.x % 32 == 0)
		part[threadIdx.x / 32] = s;
	__syncthreads();
	if (threadIdx.x == 0) {
		s = 0;
		for (int q = 0; q < (int)(blockDim.x / 32); q++)
			s += part[q];
		if (s != 0)
			atomicAdd((unsigned long long *)w, (unsigned long long)s);
	}
	__syncthreads(); /* part[] is reused by the next run */
}

static __global__ void matvec_kernel(const uint8_t *choices, int64_t N,
				     int64_t p0, int64_t p1, int64_t base,
				     const int64_t *vq, int64_t *wq)
{
	for (int64_t p = p0 + blockIdx.x; p < p1; p += gridDim.x) {
		jsk_run_t r = jsk_run(N, p, base);
		const uint8_t *run = choices + r.off;
		int64_t vij = vq[p], wij = 0;
		for (int64_t t = threadIdx.x; t < r.L; t += blockDim.x)
			wij += jsk_update(jsk_choice_at(run, t), vij, vq[r.jk + t],
					  vq[r.ik + t], wq + r.jk + t, wq + r.ik + t);
		d_block_add(wij, wq + p);
	}
}

static __global__ void fused_kernel(const double *R, int64_t N, int64_t p0,
				    int64_t p1, const int64_t *vq, int64_t *wq)
{
	for (int64_t p = p0 + blockIdx.x; p < p1; p += gridDim.x) {
		jsk_run_t r = jsk_run(N, p, 0);
		double A[9];
		for (int e = 0; e < 9; e++)
			A[e] = __ldg(R + 9 * p + e);
		int64_t vij = vq[p], wij = 0;
		for (int64_t t = threadIdx.x; t < r.L; t += blockDim.x) {
			unsigned c = jsk_choice(A, R + 9 * (r.jk + t), R + 9 * (r.ik + t));
			wij += jsk_update(c, vij, vq[r.jk + t], vq[r.ik + t],
					  wq + r.jk + t, wq + r.ik + t);
		}
		d_block_add(wij, wq + p);
	}
}

static __global__ void zero_kernel(int64_t *w, int64_t n)
{
	for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
	     e += (int64_t)gridDim.x * blockDim.x)
		w[e] = 0;
}

static __global__ void add_kernel(int64_t *dst, const int64_t *src, int64_t n)
{
	for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n;
	     e += (int64_t)gridDim.x * blockDim.x)
		dst[e] = (int64_t)((uint64_t)dst[e] + (uint64_t)src[e]);
}

static unsigned grid_for(int64_t blocks)
{
	return (unsigned)(blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS);
}

static int launched(void)
{
	return sp_cuda_status(cudaGetLastError(), __func__);
}

extern "C" int jsync_best_cuda(const double *R, int64_t N, int64_t p0,
			       int64_t p1, uint8_t *choices,
			       struct CUstream_st *stream)
{
	if (p0 >= p1)
		return 0;
	int64_t base = (int64_t)jsync_choice_bytes(N, 0, p0);
	best_kernel<<<grid_for(p1 - p0), JSK_BEST_THREADS, 0, (cudaStream_t)stream>>>(
		R, N, p0, p1, base, choices);
	return launched();
}

extern "C" int jsync_matvec_cuda(const uint8_t *choices, int64_t N, int64_t p0,
				 int64_t p1, const int64_t *vq, int64_t *wq,
				 struct CUstream_st *stream)
{
	if (p0 >= p1)
		return 0;
	int64_t base = (int64_t)jsync_choice_bytes(N, 0, p0);
	matvec_kernel<<<grid_for(p1 - p0), JSK_MV_THREADS, 0, (cudaStream_t)stream>>>(
		choices, N, p0, p1, base, vq, wq);
	return launched();
}

extern "C" int jsync_matvec_fused_cuda(const double *R, int64_t N, int64_t p0,
				       int64_t p1, const int64_t *vq,
				       int64_t *wq, struct CUstream_st *stream)
{
	if (p0 >= p1)
		return 0;
	fused_kernel<<<grid_for(p1 - p0), JSK_MV_THREADS, 0, (cudaStream_t)stream>>>(
		R, N, p0, p1, vq, wq);
	return launched();
}

extern "C" int jsync_zero_cuda(int64_t *w, int64_t n, struct CUstream_st *stream)
{
	if (n <= 0)
		return 0;
	zero_kernel<<<grid_for((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096),
		      256, 0, (cudaStream_t)stream>>>(w, n);
	return launched();
}

extern "C" int jsync_add_cuda(int64_t *dst, const int64_t *src, int64_t n,
			      struct CUstream_st *stream)
{
	if (n <= 0)
		return 0;
	add_kernel<<<grid_for((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096),
		     256, 0, (cudaStream_t)stream>>>(dst, src, n);
	return launched();
}
