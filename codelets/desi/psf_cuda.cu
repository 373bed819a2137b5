/* DESI GaussHermite spots on CUDA: the twin of desi_spots_cpu() in psf.c. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda_handles.h"
extern "C" {
#include "psf.h"
#include "error.h"
}
#include "desi_kern.h"

/*
 * DESIGN.  One block per spot (a grid stride over spots when there are
 * more than MAX_BLOCKS), SPOT_THREADS threads, everything in shared memory:
 *   1. one thread per pixel edge (nx + 1 along x, ny + 1 along y): one erf,
 *      one exp and the Hermite recurrence, as psf.c's pgh();
 *   2. one thread per (degree, pixel): the differences g_m[p];
 *   3. one thread per (j, ix): T_j[ix] = sum_i GH_ij gx_i[ix], i ascending;
 *   4. one thread per pixel: sum_j gy_j[iy] T_j[ix], j ascending, clipped;
 *      a block sum (warp shuffles, then warp 0), and the product by 1/sum.
 * The arithmetic is psf.c's expression for expression, with
 * __dmul_rn/__dadd_rn/__dsub_rn/__ddiv_rn so that nvcc cannot contract
 * into FMA (psf.c is compiled with -ffp-contract=off).  Corners are then
 * identical; the pixels differ from the CPU's only through CUDA's erf and
 * exp (2 and 1 ulp at most, against glibc's < 1 ulp) and the order of the
 * normalising sum: a few 1e-16 absolute on pixels <= 1.
 * Shared memory: ((dx+1)(nx+1) + (dy+1)(ny+1)) edge terms, overlaid by
 * the nx ny pixels once the g_m are made, then gx, gy, T and 32 partial
 * sums: 5.9 KB for DESI's 11 x 17 spots of degree 6, 59 KB at the
 * DESI_PSF_MAX_* limits (above 48 KB the kernel's limit is raised).
 */

#define SPOT_THREADS DSK_SPOT_THREADS
#define MAX_BLOCKS (1 << 20)

struct layout {
	int nx, ny, dx, dy, np;
	int o_gx, o_gy, o_t, o_red; /* offsets in doubles; edges and pixels at 0 */
	size_t bytes;
};

static layout make_layout(desi_spot_shape_t s)
{
	layout L;
	L.nx = 2 * s.hsizex + 1;
	L.ny = 2 * s.hsizey + 1;
	L.dx = s.ghdegx;
	L.dy = s.ghdegy;
	L.np = 4 + (L.dx + 1) * (L.dy + 1);
	int edges = (L.dx + 1) * (L.nx + 1) + (L.dy + 1) * (L.ny + 1);
	int pix = L.nx * L.ny;
	L.o_gx = edges > pix ? edges : pix;
	L.o_gy = L.o_gx + (L.dx + 1) * L.nx;
	L.o_t = L.o_gy + (L.dy + 1) * L.ny;
	L.o_red = L.o_t + (L.dy + 1) * L.nx;
	L.bytes = (size_t)(L.o_red + 32) * sizeof(double);
	return L;
}

static __global__ void spots_kernel(const double *__restrict__ params, size_t n, layout L,
				    desi_spot_shape_t shape, double *__restrict__ spots,
				    int32_t *__restrict__ xc, int32_t *__restrict__ yc)
{
	extern __shared__ double sh[];
	double *Ex = sh, *Hx = Ex + (L.nx + 1);
	double *Ey = Ex + (L.dx + 1) * (L.nx + 1), *Hy = Ey + (L.ny + 1);
	double *pix = sh; /* overlays the edges, after step 2 */
	double *gx = sh + L.o_gx, *gy = sh + L.o_gy, *T = sh + L.o_t, *red = sh + L.o_red;
	int tid = threadIdx.x, nt = blockDim.x, npix = L.nx * L.ny;
	int lane = tid & 31, warp = tid >> 5, nwarp = (nt + 31) >> 5;

	for (size_t s = blockIdx.x; s < n; s += gridDim.x) {
		const double *p = params + s * (size_t)L.np, *gh = p + 4;
		double X = p[0], Y = p[1];

		if (tid == 0) {
			xc[s] = dsk_corner(X, shape.hsizex);
			yc[s] = dsk_corner(Y, shape.hsizey);
		}
		/* 1. edges */
		for (int k = tid; k < L.nx + 1 + L.ny + 1; k += nt) {
			if (k <= L.nx)
				dsk_edge(X, p[2], L.nx, L.dx, k, Ex, Hx);
			else
				dsk_edge(Y, p[3], L.ny, L.dy, k - (L.nx + 1), Ey, Hy);
		}
		__syncthreads();
		/* 2. pixel-integrated terms */
		for (int q = tid; q < (L.dx + 1) * L.nx + (L.dy + 1) * L.ny; q += nt) {
			if (q < (L.dx + 1) * L.nx)
				gx[q] = dsk_pgh(Ex, Hx, L.nx, q);
			else
				gy[q - (L.dx + 1) * L.nx] =
					dsk_pgh(Ey, Hy, L.ny, q - (L.dx + 1) * L.nx);
		}
		__syncthreads();
		/* 3. T[j][ix] = sum_i GH_ij gx[i][ix] */
		for (int q = tid; q < (L.dy + 1) * L.nx; q += nt)
			T[q] = dsk_spot_T(gh, gx, L.dx, L.dy, L.nx, q);
		__syncthreads();
		/* 4. pixels, clipped, and their sum */
		double part = 0.0;
		for (int q = tid; q < npix; q += nt) {
			double v = dsk_spot_pixel(gy, T, L.dy, L.ny, L.nx, q);
			pix[q] = v;
			part = __dadd_rn(part, v);
		}
		for (int off = 16; off > 0; off >>= 1)
			part = __dadd_rn(part, __shfl_down_sync(0xffffffffu, part, off));
		if (lane == 0)
			red[warp] = part;
		__syncthreads();
		if (warp == 0) {
			part = lane < nwarp ? red[lane] : 0.0;
			for (int off = 16; off > 0; off >>= 1)
				part = __dadd_rn(part, __shfl_down_sync(0xffffffffu, part, off));
			if (lane == 0)
				red[0] = part;
		}
		__syncthreads();
		double inv = __ddiv_rn(1.0, red[0]); /* as psf.c: one division */
		double *out = spots + s * (size_t)npix;
		for (int q = tid; q < npix; q += nt)
			out[q] = __dmul_rn(pix[q], inv);
		__syncthreads(); /* pix and red are reused by the next spot */
	}
}

extern "C" int desi_spots_cuda(const double *params, size_t n, desi_spot_shape_t shape,
			       double *spots, int32_t *xc, int32_t *yc,
			       struct CUstream_st *stream)
{
	if (shape.hsizex < 0 || shape.hsizex > DESI_PSF_MAX_HSIZE || shape.hsizey < 0 ||
	    shape.hsizey > DESI_PSF_MAX_HSIZE || shape.ghdegx < 0 ||
	    shape.ghdegx > DESI_PSF_MAX_GHDEG || shape.ghdegy < 0 ||
	    shape.ghdegy > DESI_PSF_MAX_GHDEG)
		return SP_EINVAL;
	if (n == 0)
		return 0;
	layout L = make_layout(shape);
	if (L.bytes > 48 * 1024 &&
	    sp_cuda_status(cudaFuncSetAttribute(spots_kernel,
						cudaFuncAttributeMaxDynamicSharedMemorySize,
						(int)L.bytes),
			   "cudaFuncSetAttribute") != 0)
		return SP_ECUDA;
	unsigned grid = (unsigned)(n < MAX_BLOCKS ? n : MAX_BLOCKS);
	spots_kernel<<<grid, SPOT_THREADS, L.bytes, (cudaStream_t)stream>>>(params, n, L, shape,
									      spots, xc, yc);
	return sp_cuda_status(cudaGetLastError(), __func__);
}
