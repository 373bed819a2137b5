/* J-synchronization CUDA kernels: the twins of jsync_cpu.c, bit for bit. */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "jsync.h"
#include "../../src/error.h"
}

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
 * its (i, j) come from closed forms (no table, no host pass).
 */

#define BEST_THREADS 64
#define MV_THREADS 128
#define MAX_BLOCKS (1 << 20)

static __device__ int64_t d_pair(int64_t N, int64_t i, int64_t j)
{
	return (2 * N - i - 1) * i / 2 + j - i - 1;
}

/* Inverse of d_pair: the closed form, corrected for rounding. */
static __device__ void d_pair_ij(int64_t N, int64_t p, int64_t *i, int64_t *j)
{
	double b = (double)(2 * N - 1);
	int64_t r = (int64_t)((b - sqrt(b * b - 8.0 * (double)p)) / 2.0);

	if (r < 0)
		r = 0;
	if (r > N - 2)
		r = N - 2;
	while (r > 0 && d_pair(N, r, r + 1) > p)
		r--;
	while (r < N - 2 && d_pair(N, r + 1, r + 2) <= p)
		r++;
	*i = r;
	*j = p - d_pair(N, r, r + 1) + r + 1;
}

/* sum_{l=0..L} ceil(l/4), and its sum over L = 0..M (see jsync_cpu.c). */
static __device__ int64_t d_bytes_upto(int64_t L)
{
	if (L < 0)
		return 0;
	int64_t q = L / 4, r = L % 4;
	return 2 * q * (q + 1) + r * (q + 1);
}

static __device__ int64_t d_bytes_upto2(int64_t M)
{
	if (M < 0)
		return 0;
	int64_t Q = M / 4, R = M % 4;
	return 8 * (Q - 1) * Q * (Q + 1) / 3 + 3 * Q * (Q + 1) +
	       (R + 1) * 2 * Q * (Q + 1) + (Q + 1) * R * (R + 1) / 2;
}

/* Choice bytes of the runs of pairs before p = (i, j). */
static __device__ int64_t d_bytes_before(int64_t N, int64_t i, int64_t j)
{
	return d_bytes_upto2(N - 2) - d_bytes_upto2(N - 2 - i) +
	       d_bytes_upto(N - 2 - i) - d_bytes_upto(N - 1 - j);
}

#define DMUL __dmul_rn
#define DADD __dadd_rn
#define DSUB __dsub_rn

/* One entry (a, c) of the residuals; E1, E2, E3 as in jsync_cpu.c. */
#define JS_ENTRY(a, c, E1, E2, E3)                                           \
	do {                                                                 \
		double x = DADD(DMUL(A[3 * (a)], B[(c)]),                    \
				DMUL(A[3 * (a) + 1], B[3 + (c)]));           \
		double y = DMUL(A[3 * (a) + 2], B[6 + (c)]);                 \
		double s = DADD(x, y), d = DSUB(y, x), cc = C[3 * (a) + (c)]; \
		double e0 = DSUB(s, cc), dp = DADD(d, cc), dm = DSUB(d, cc); \
		double sp = DADD(s, cc);                                     \
		(void)dp;                                                    \
		(void)dm;                                                    \
		(void)sp;                                                    \
		c0 = DADD(c0, DMUL(e0, e0));                                 \
		c1 = DADD(c1, DMUL((E1), (E1)));                             \
		c2 = DADD(c2, DMUL((E2), (E2)));                             \
		c3 = DADD(c3, DMUL((E3), (E3)));                             \
	} while (0)

/* The choice of one triplet: A in registers, B and C in global memory. */
static __device__ unsigned d_choice(const double *A, const double *Bg,
				    const double *Cg)
{
	double B[9], C[9];
	double c0 = 0.0, c1 = 0.0, c2 = 0.0, c3 = 0.0;

	for (int e = 0; e < 9; e++) {
		B[e] = __ldg(Bg + e);
		C[e] = __ldg(Cg + e);
	}
	JS_ENTRY(0, 0, dp, dp, e0);
	JS_ENTRY(0, 1, dp, dp, e0);
	JS_ENTRY(0, 2, dp, dm, sp);
	JS_ENTRY(1, 0, dp, dp, e0);
	JS_ENTRY(1, 1, dp, dp, e0);
	JS_ENTRY(1, 2, dp, dm, sp);
	JS_ENTRY(2, 0, dm, dp, sp);
	JS_ENTRY(2, 1, dm, dp, sp);
	JS_ENTRY(2, 2, dm, dm, e0);
	unsigned best = 0;
	double m = c0;
	if (c1 < m) {
		m = c1;
		best = 1;
	}
	if (c2 < m) {
		m = c2;
		best = 2;
	}
	if (c3 < m)
		best = 3;
	return best;
}

static __global__ void best_kernel(const double *R, int64_t N, int64_t p0,
				   int64_t p1, int64_t base, uint8_t *choices)
{
	for (int64_t p = p0 + blockIdx.x; p < p1; p += gridDim.x) {
		int64_t i, j;
		d_pair_ij(N, p, &i, &j);
		int64_t L = N - 1 - j, nbytes = (L + 3) / 4;
		int64_t off = d_bytes_before(N, i, j) - base;
		const double *Bp = R + 9 * d_pair(N, j, j + 1);
		const double *Cp = R + 9 * (p + 1);
		double A[9];
		for (int e = 0; e < 9; e++)
			A[e] = __ldg(R + 9 * p + e);
		for (int64_t b = threadIdx.x; b < nbytes; b += blockDim.x) {
			unsigned byte = 0;
			for (int l = 0; l < 4; l++) {
				int64_t t = 4 * b + l;
				if (t < L)
					byte |= d_choice(A, Bp + 9 * t, Cp + 9 * t)
						<< (2 * l);
			}
			choices[off + b] = (uint8_t)byte;
		}
	}
}

/* The three edge updates of one triplet of choice c; returns the wq[ij]
 * term, adds the wq[jk] and wq[ik] terms atomically. */
static __device__ int64_t d_update(unsigned c, int64_t vij, int64_t vjk,
				   int64_t vik, int64_t *wjk, int64_t *wik)
{
	int64_t m1 = -(int64_t)((c ^ (c >> 1)) & 1);
	int64_t m2 = -(int64_t)((c >> 1) & 1);
	int64_t m3 = -(int64_t)(c & 1);
	int64_t a = ((vij ^ m1) - m1) + ((vik ^ m2) - m2);
	int64_t b = ((vij ^ m3) - m3) + ((vjk ^ m2) - m2);

	atomicAdd((unsigned long long *)wjk, (unsigned long long)a);
	atomicAdd((unsigned long long *)wik, (unsigned long long)b);
	return ((vjk ^ m1) - m1) + ((vik ^ m3) - m3);
}

/* Adds the block's sum of v to *w (one atomic); every thread calls it. */
static __device__ void d_block_add(int64_t v, int64_t *w)
{
	__shared__ long long part[MV_THREADS / 32];
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
		int64_t i, j;
		d_pair_ij(N, p, &i, &j);
		int64_t L = N - 1 - j, jk = d_pair(N, j, j + 1), ik = p + 1;
		const uint8_t *run = choices + (d_bytes_before(N, i, j) - base);
		int64_t vij = vq[p], wij = 0;
		for (int64_t t = threadIdx.x; t < L; t += blockDim.x) {
			unsigned c = (run[t / 4] >> (2 * (t % 4))) & 3;
			wij += d_update(c, vij, vq[jk + t], vq[ik + t],
					wq + jk + t, wq + ik + t);
		}
		d_block_add(wij, wq + p);
	}
}

static __global__ void fused_kernel(const double *R, int64_t N, int64_t p0,
				    int64_t p1, const int64_t *vq, int64_t *wq)
{
	for (int64_t p = p0 + blockIdx.x; p < p1; p += gridDim.x) {
		int64_t i, j;
		d_pair_ij(N, p, &i, &j);
		int64_t L = N - 1 - j, jk = d_pair(N, j, j + 1), ik = p + 1;
		double A[9];
		for (int e = 0; e < 9; e++)
			A[e] = __ldg(R + 9 * p + e);
		int64_t vij = vq[p], wij = 0;
		for (int64_t t = threadIdx.x; t < L; t += blockDim.x) {
			unsigned c = d_choice(A, R + 9 * (jk + t), R + 9 * (ik + t));
			wij += d_update(c, vij, vq[jk + t], vq[ik + t],
					wq + jk + t, wq + ik + t);
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
	return cudaGetLastError() == cudaSuccess ? 0 : SP_ECUDA;
}

extern "C" int jsync_best_cuda(const double *R, int64_t N, int64_t p0,
			       int64_t p1, uint8_t *choices,
			       struct CUstream_st *stream)
{
	if (p0 >= p1)
		return 0;
	int64_t base = (int64_t)jsync_choice_bytes(N, 0, p0);
	best_kernel<<<grid_for(p1 - p0), BEST_THREADS, 0, (cudaStream_t)stream>>>(
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
	matvec_kernel<<<grid_for(p1 - p0), MV_THREADS, 0, (cudaStream_t)stream>>>(
		choices, N, p0, p1, base, vq, wq);
	return launched();
}

extern "C" int jsync_matvec_fused_cuda(const double *R, int64_t N, int64_t p0,
				       int64_t p1, const int64_t *vq,
				       int64_t *wq, struct CUstream_st *stream)
{
	if (p0 >= p1)
		return 0;
	fused_kernel<<<grid_for(p1 - p0), MV_THREADS, 0, (cudaStream_t)stream>>>(
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
