/* APPLE-Picker CUDA kernels: the image steps (preprocess, moments,
 * references, morphology), whose bodies are apple_kern.h's, shared with or
 * twinned by the CPU code and run on the host by tests/test_apple_kern.c. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "cuda_handles.h"
extern "C" {
#include "apple.h"
#include "error.h"
}
#include "apple_kern.h"
#include "apple_cuda_util.h"

#define BODY_THREADS 256
#define REF_THREADS 256

/* Grid-stride loop of `count` threads (size_t index i). */
#define FOR_EACH(i, count)                                                             \
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(count); \
	     i += (size_t)gridDim.x * blockDim.x)

static __global__ void coeffs_kernel(int insize, int outsize, int ksize, int32_t *bounds,
				     double *kk)
{
	FOR_EACH(xx, outsize)
		apk_resample_coeffs((int)xx, insize, outsize, ksize, bounds, kk);
}

/* dst[y][xx] (rows, cols_out) = window dot of src row y (stride 1 between
 * taps) or src column xx (stride ld) */
static __global__ void hpass_kernel(const float *__restrict__ src, size_t ld, int rows, int nout,
				    const int32_t *__restrict__ bounds, const double *__restrict__ kk,
				    int ksize, float *__restrict__ dst)
{
	FOR_EACH(i, (size_t)rows * nout) {
		int y = (int)(i / nout), xx = (int)(i % nout);
		dst[i] = apk_resample_dot(src + (size_t)y * ld, 1, kk + (size_t)xx * ksize,
					  bounds[2 * xx], bounds[2 * xx + 1]);
	}
}

static __global__ void vpass_kernel(const float *__restrict__ tmp, int ny, int nx,
				    const int32_t *__restrict__ bounds, const double *__restrict__ kk,
				    int ksize, float *__restrict__ res)
{
	FOR_EACH(i, (size_t)ny * nx) {
		int yy = (int)(i / nx), xx = (int)(i % nx);
		res[i] = apk_resample_dot(tmp + xx, (size_t)nx, kk + (size_t)yy * ksize,
					  bounds[2 * yy], bounds[2 * yy + 1]);
	}
}

static __global__ void lowpass_kernel(const __grid_constant__ apk_taps_t taps,
				      const float *__restrict__ res, int ny, int nx,
				      double *__restrict__ im)
{
	FOR_EACH(i, (size_t)ny * nx)
		im[i] = apk_lowpass_px(&taps, res, ny, nx, (int)(i / nx), (int)(i % nx));
}

/* Offsets of the preprocess scratch: bounds and kk of the columns, of the
 * rows, tmp, res; returns the total. */
static size_t pre_layout(const apple_sizes_t *s, size_t off[6])
{
	size_t ny = (size_t)s->ny, nx = (size_t)s->nx, sy = (size_t)s->sidey, o = 0;
	const size_t sz[6] = { 2 * nx * sizeof(int32_t),
			       (size_t)apk_resample_ksize(s->sidex, s->nx) * nx * sizeof(double),
			       2 * ny * sizeof(int32_t),
			       (size_t)apk_resample_ksize(s->sidey, s->ny) * ny * sizeof(double),
			       sy * nx * sizeof(float), ny * nx * sizeof(float) };
	for (int i = 0; i < 6; i++) {
		off[i] = o;
		o = align_up(o + sz[i]);
	}
	return o;
}

extern "C" size_t apple_preprocess_cuda_scratch(const apple_sizes_t *s)
{
	size_t off[6];
	return pre_layout(s, off);
}

extern "C" int apple_preprocess_cuda(const apple_params_t *p, const apple_sizes_t *s,
				     const float *micrograph, int ny, int nx, double *im,
				     void *scratch, struct CUstream_st *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t off[6];
	double kern[225];
	apk_taps_t taps;

	if (p == NULL || s == NULL || micrograph == NULL || im == NULL || scratch == NULL ||
	    s->ny < 1 || s->nx < 1 || s->sidey < s->ny || s->sidex < s->nx ||
	    p->margin_top + s->sidey > ny || p->margin_left + s->sidex > nx)
		return SP_EINVAL;
	pre_layout(s, off);
	int32_t *bx = (int32_t *)((char *)scratch + off[0]);
	double *kkx = (double *)((char *)scratch + off[1]);
	int32_t *by = (int32_t *)((char *)scratch + off[2]);
	double *kky = (double *)((char *)scratch + off[3]);
	float *tmp = (float *)((char *)scratch + off[4]), *res = (float *)((char *)scratch + off[5]);
	const int n_y = s->ny, n_x = s->nx, sidey = s->sidey, sidex = s->sidex;
	const int kx = apk_resample_ksize(sidex, n_x), ky = apk_resample_ksize(sidey, n_y);
	const float *src = micrograph + (size_t)p->margin_top * nx + p->margin_left;

	apple_lowpass_kernel(kern);
	apk_taps_from(kern, &taps);
	coeffs_kernel<<<grid_for((size_t)n_x, BODY_THREADS), BODY_THREADS, 0, st>>>(sidex, n_x, kx,
										    bx, kkx);
	coeffs_kernel<<<grid_for((size_t)n_y, BODY_THREADS), BODY_THREADS, 0, st>>>(sidey, n_y, ky,
										    by, kky);
	hpass_kernel<<<grid_for((size_t)sidey * n_x, BODY_THREADS), BODY_THREADS, 0, st>>>(
		src, (size_t)nx, sidey, n_x, bx, kkx, kx, tmp);
	vpass_kernel<<<grid_for((size_t)n_y * n_x, BODY_THREADS), BODY_THREADS, 0, st>>>(
		tmp, n_y, n_x, by, kky, ky, res);
	lowpass_kernel<<<grid_for((size_t)n_y * n_x, BODY_THREADS), BODY_THREADS, 0, st>>>(
		taps, res, n_y, n_x, im);
	return sp_cuda_status(cudaGetLastError(), __func__);
}

static __global__ void rowsums_kernel(const double *__restrict__ im, int ny, int nx, int q,
				      int nw, double *__restrict__ rs, double *__restrict__ rs2)
{
	FOR_EACH(i, (size_t)ny * nw)
		apk_rowsums(im, nx, q, nw, (int)(i / nw), (int)(i % nw), rs, rs2);
}

static __global__ void colsums_kernel(const double *__restrict__ rs, const double *__restrict__ rs2,
				      int q, int nwy, int nw, double inv, double *__restrict__ mean,
				      double *__restrict__ std)
{
	FOR_EACH(i, (size_t)nwy * nw)
		apk_colsums(rs, rs2, q, nw, inv, (int)(i / nw), (int)(i % nw), mean, std);
}

extern "C" size_t apple_moments_cuda_scratch(int ny, int nx, int q)
{
	size_t nw = nx >= q ? (size_t)(nx - q + 1) : 0;
	return 2 * align_up((size_t)(ny > 0 ? ny : 0) * nw * sizeof(double));
}

extern "C" int apple_moments_cuda(const double *im, int ny, int nx, int q, double *mean,
				  double *std, void *scratch, struct CUstream_st *stream)
{
	cudaStream_t st = (cudaStream_t)stream;

	if (im == NULL || mean == NULL || std == NULL || scratch == NULL || q < 1 || ny < q ||
	    nx < q)
		return SP_EINVAL;
	const int nw = nx - q + 1, nwy = ny - q + 1;
	double *rs = (double *)scratch;
	double *rs2 = (double *)((char *)scratch + align_up((size_t)ny * nw * sizeof(double)));
	rowsums_kernel<<<grid_for((size_t)ny * nw, BODY_THREADS), BODY_THREADS, 0, st>>>(
		im, ny, nx, q, nw, rs, rs2);
	colsums_kernel<<<grid_for((size_t)nwy * nw, BODY_THREADS), BODY_THREADS, 0, st>>>(
		rs, rs2, q, nwy, nw, 1.0 / ((double)q * q), mean, std);
	return sp_cuda_status(cudaGetLastError(), __func__);
}

/* One block per container: every thread scans a stride of the range, then
 * a tree merge in shared memory (apk_best_merge: ties to the earlier). */
static __global__ void refs_kernel(const double *__restrict__ mean, const double *__restrict__ std,
				   int ny, int nx, int q, int cs, int nw, int ncx,
				   int32_t *__restrict__ ref)
{
	__shared__ apk_best_t best[REF_THREADS];
	const int k = blockIdx.x, lane = threadIdx.x;
	int r0, r1, c0, c1;

	apk_container_range(ny, nx, q, cs, k / ncx, k % ncx, &r0, &r1, &c0, &c1);
	apk_refs_scan(mean, std, nw, r0, r1, c0, c1, lane, blockDim.x, &best[lane]);
	__syncthreads();
	for (int stride = 1; stride < (int)blockDim.x; stride *= 2) {
		if (lane % (2 * stride) == 0 && lane + stride < (int)blockDim.x)
			apk_best_merge(&best[lane], &best[lane + stride]);
		__syncthreads();
	}
	if (lane == 0)
		apk_refs_write(&best[0], nw, r0, c0, ref + 8 * (size_t)k);
}

extern "C" int apple_refs_select_cuda(const apple_sizes_t *s, const double *mean,
				      const double *std, int32_t *ref, struct CUstream_st *stream)
{
	if (s == NULL || mean == NULL || std == NULL || ref == NULL || s->container < 1)
		return SP_EINVAL;
	if (s->ncy < 1 || s->ncx < 1)
		return SP_EINVAL;
	refs_kernel<<<s->ncy * s->ncx, REF_THREADS, 0, (cudaStream_t)stream>>>(
		mean, std, s->ny, s->nx, s->query, s->container, s->nwx, s->ncx, ref);
	return sp_cuda_status(cudaGetLastError(), __func__);
}

/* ---- morphology ---- */

/* Kernels of a conditional pass return at once when *skip is nonzero
 * (skip NULL: always run); this keeps apple_morphology()'s "refill with
 * the corner cleared when the fill left no 0" on the device, with no
 * synchronisation. */
#define SKIP_IF(skip)                  \
	do {                           \
		if ((skip) && *(skip)) \
			return;        \
	} while (0)

static __global__ void ccl_init_kernel(const uint8_t *mask, int want, int32_t n, int32_t *par,
				       const int *skip)
{
	SKIP_IF(skip);
	FOR_EACH(p, n)
		apk_ccl_init(mask, want, (int32_t)p, par);
}

static __global__ void ccl_merge_kernel(const uint8_t *mask, int want, int h, int w, int conn8,
					int32_t *par, const int *skip)
{
	SKIP_IF(skip);
	FOR_EACH(p, (size_t)h * w)
		apk_ccl_merge(mask, want, h, w, conn8, (int32_t)p, par);
}

static __global__ void ccl_compress_kernel(int32_t n, int32_t *par, const int *skip)
{
	SKIP_IF(skip);
	FOR_EACH(p, n)
		apk_ccl_compress((int32_t)p, par);
}

static __global__ void zero_kernel(uint8_t *a, int32_t n, const int *skip)
{
	SKIP_IF(skip);
	FOR_EACH(p, n)
		a[p] = 0;
}

static __global__ void fill_mark_kernel(const uint8_t *a, int h, int w, const int32_t *par,
					uint8_t *flag, const int *skip)
{
	SKIP_IF(skip);
	FOR_EACH(p, (size_t)h * w)
		apk_fill_mark(a, h, w, (int32_t)p, par, flag);
}

static __global__ void fill_out_kernel(const uint8_t *a, int32_t n, const int32_t *par,
				       const uint8_t *flag, uint8_t *filled, int *anyzero,
				       const int *skip)
{
	SKIP_IF(skip);
	FOR_EACH(p, n) {
		apk_fill_out(a, (int32_t)p, par, flag, filled);
		if (anyzero != NULL && !filled[p])
			*anyzero = 1; /* a benign race: every writer stores 1 */
	}
}

static __global__ void clear_corner_kernel(const uint8_t *seg, int w, int32_t n, uint8_t *out,
					   const int *skip)
{
	SKIP_IF(skip);
	FOR_EACH(p, n)
		apk_clear_corner(seg, w, (int32_t)p, out);
}

static __global__ void edt_col_kernel(const uint8_t *a, int h, int w, int32_t *g)
{
	FOR_EACH(x, w + 2)
		apk_edt_col(a, h, w, (int)x, g);
}

static __global__ void edt_row_kernel(const int32_t *g, int h, int w, int32_t *st, int32_t *d2)
{
	const size_t W = (size_t)w + 2;
	FOR_EACH(i, h)
		apk_edt_row(g, h, w, (int)i + 1, st + 2 * W * i, st + 2 * W * i + W, d2);
}

static __global__ void erode_kernel(const int32_t *d2, long long rmin, int32_t n, uint8_t *ero)
{
	FOR_EACH(p, n)
		apk_erode(d2, rmin, (int32_t)p, ero);
}

static __global__ void hit_mark_kernel(const uint8_t *ero, const int32_t *d2, long long rmax,
				       int32_t n, const int32_t *par, uint8_t *hit)
{
	FOR_EACH(p, n)
		apk_hit_mark(ero, d2, rmax, (int32_t)p, par, hit);
}

static __global__ void hit_out_kernel(const uint8_t *ero, int32_t n, const int32_t *par,
				      const uint8_t *hit, uint8_t *out)
{
	FOR_EACH(p, n)
		apk_hit_out(ero, (int32_t)p, par, hit, out);
}

/* Offsets: filled, a2, ero, flag (bytes [n2]), par, d2 (int32 [n2]), g
 * (int32 [nwy + 2][nwx + 2]), st (int32 [nwy][2 (nwx + 2)]), anyzero (int). */
static size_t morph_layout(int nwy, int nwx, size_t off[9])
{
	size_t n2 = (size_t)nwy * nwx, W = (size_t)nwx + 2, o = 0;
	const size_t sz[9] = { n2, n2, n2, n2, 4 * n2, 4 * n2, 4 * W * ((size_t)nwy + 2),
			       4 * 2 * W * (size_t)nwy, sizeof(int) };
	for (int i = 0; i < 9; i++) {
		off[i] = o;
		o = align_up(o + sz[i]);
	}
	return o;
}

extern "C" size_t apple_morphology_cuda_scratch(int nwy, int nwx)
{
	size_t off[9];
	return nwy < 1 || nwx < 1 ? 0 : morph_layout(nwy, nwx, off);
}

/* Hole filling of a [h][w] into filled (apk_fill_*), skipped when *skip. */
static void fill_holes_cuda(const uint8_t *a, int h, int w, int32_t *par, uint8_t *flag,
			    uint8_t *filled, int *anyzero, const int *skip, cudaStream_t st)
{
	const int32_t n = h * w;
	const unsigned g = grid_for((size_t)n, BODY_THREADS);
	ccl_init_kernel<<<g, BODY_THREADS, 0, st>>>(a, 0, n, par, skip);
	ccl_merge_kernel<<<g, BODY_THREADS, 0, st>>>(a, 0, h, w, 0, par, skip);
	ccl_compress_kernel<<<g, BODY_THREADS, 0, st>>>(n, par, skip);
	zero_kernel<<<g, BODY_THREADS, 0, st>>>(flag, n, skip);
	fill_mark_kernel<<<g, BODY_THREADS, 0, st>>>(a, h, w, par, flag, skip);
	fill_out_kernel<<<g, BODY_THREADS, 0, st>>>(a, n, par, flag, filled, anyzero, skip);
}

extern "C" int apple_morphology_cuda(const apple_sizes_t *s, const uint8_t *seg, uint8_t *out,
				     void *scratch, struct CUstream_st *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	size_t off[9];

	if (s == NULL || seg == NULL || out == NULL || scratch == NULL || s->nwy < 1 || s->nwx < 1 ||
	    (long long)s->nwy * s->nwx > 0x7fffffffLL)
		return SP_EINVAL;
	const int nwy = s->nwy, nwx = s->nwx;
	const int32_t n = nwy * nwx;
	const unsigned g = grid_for((size_t)n, BODY_THREADS);
	morph_layout(nwy, nwx, off);
	char *b = (char *)scratch;
	uint8_t *filled = (uint8_t *)(b + off[0]), *a2 = (uint8_t *)(b + off[1]);
	uint8_t *ero = (uint8_t *)(b + off[2]), *flag = (uint8_t *)(b + off[3]);
	int32_t *par = (int32_t *)(b + off[4]), *d2 = (int32_t *)(b + off[5]);
	int32_t *gcol = (int32_t *)(b + off[6]), *strow = (int32_t *)(b + off[7]);
	int *anyzero = (int *)(b + off[8]);

	if (sp_cuda_status(cudaMemsetAsync(anyzero, 0, sizeof(int), st), "cudaMemsetAsync") != 0)
		return SP_ECUDA;
	fill_holes_cuda(seg, nwy, nwx, par, flag, filled, anyzero, NULL, st);
	/* no 0 left: refill seg with its top-left 100 x 100 cleared */
	clear_corner_kernel<<<g, BODY_THREADS, 0, st>>>(seg, nwx, n, a2, anyzero);
	fill_holes_cuda(a2, nwy, nwx, par, flag, filled, NULL, anyzero, st);
	edt_col_kernel<<<grid_for((size_t)nwx + 2, 64), 64, 0, st>>>(filled, nwy, nwx, gcol);
	edt_row_kernel<<<grid_for((size_t)nwy, 64), 64, 0, st>>>(gcol, nwy, nwx, strow, d2);
	erode_kernel<<<g, BODY_THREADS, 0, st>>>(d2, (long long)s->min_size * s->min_size, n, ero);
	ccl_init_kernel<<<g, BODY_THREADS, 0, st>>>(ero, 1, n, par, NULL);
	ccl_merge_kernel<<<g, BODY_THREADS, 0, st>>>(ero, 1, nwy, nwx, 1, par, NULL);
	ccl_compress_kernel<<<g, BODY_THREADS, 0, st>>>(n, par, NULL);
	zero_kernel<<<g, BODY_THREADS, 0, st>>>(flag, n, NULL);
	hit_mark_kernel<<<g, BODY_THREADS, 0, st>>>(ero, d2, (long long)s->max_size * s->max_size, n,
						    par, flag);
	hit_out_kernel<<<g, BODY_THREADS, 0, st>>>(ero, n, par, flag, out);
	return sp_cuda_status(cudaGetLastError(), __func__);
}
