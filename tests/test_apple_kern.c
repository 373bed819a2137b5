/* Host emulation of the APPLE CUDA kernels' per-thread bodies (apple_kern.h) against the CPU kernels, bit for bit. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../codelets/apple/apple.h"
#include "../codelets/apple/apple_kern.h"
#include "../codelets/apple/mrc.h"
#include "cpuisa.h"
#include "npyread.h"
#include "testutil.h"

/*
 * DESIGN.  apple_cuda.cu and apple_cuda_image.cu run each function of apple_kern.h as one GPU
 * thread; here the same functions run as host loops, one "thread" after
 * another, in the kernels' launch order, and the results must equal
 * apple_cpu.c's bit for bit (the bodies use the CPU's operations in the
 * CPU's order; the build has -ffp-contract=off).  Where GPU threads race
 * (union-find merges and path compression) the threads run in a shuffled
 * order, several seeds: the labelling must not depend on it.  This checks
 * the kernels' arithmetic, indexing and launch sequence as written here on
 * every build; it cannot see device-only faults (races inside a thread's
 * body, launch errors): test_apple_cuda does, on a GPU.  Inputs: the 2k
 * shared micrograph (ASPIRE's run), its SVM segmentation, and random
 * images and blob fields of other sizes.
 */

static unsigned long long rng = 0x9e3779b97f4a7c15ULL;

static uint32_t urand32(void)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)(rng >> 33);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n > 0 ? n : 1);
	assert_non_null(p);
	return p;
}

/* A random permutation of 0..n-1 (the order the emulated threads run in). */
static int32_t *shuffled(int32_t n)
{
	int32_t *perm = xmalloc(sizeof *perm * (size_t)n);
	for (int32_t i = 0; i < n; i++)
		perm[i] = i;
	for (int32_t i = n - 1; i > 0; i--) {
		int32_t j = (int32_t)(urand32() % (uint32_t)(i + 1)), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	return perm;
}

/* ---- the emulated launch sequences (as apple_cuda*.cu enqueue them) ---- */

static void emu_preprocess(const apple_params_t *p, const apple_sizes_t *s, const float *mic,
			   int nx, double *im)
{
	const int sy = s->sidey, sx = s->sidex, ny = s->ny, ox = s->nx;
	const int kx = apk_resample_ksize(sx, ox), ky = apk_resample_ksize(sy, ny);
	const float *src = mic + (size_t)p->margin_top * nx + p->margin_left;
	int32_t *bx = xmalloc(sizeof(int32_t) * 2 * (size_t)ox), *by = xmalloc(sizeof(int32_t) * 2 * (size_t)ny);
	double *kkx = xmalloc(sizeof(double) * (size_t)kx * ox), *kky = xmalloc(sizeof(double) * (size_t)ky * ny);
	float *tmp = xmalloc(sizeof(float) * (size_t)sy * ox), *res = xmalloc(sizeof(float) * (size_t)ny * ox);
	double kern[225];
	apk_taps_t taps;

	/* the two coeffs_kernel launches, columns then rows */
	for (int xx = 0; xx < ox; xx++)
		apk_resample_coeffs(xx, sx, ox, kx, bx, kkx);
	for (int yy = 0; yy < ny; yy++)
		apk_resample_coeffs(yy, sy, ny, ky, by, kky);
	for (int y = 0; y < sy; y++)
		for (int xx = 0; xx < ox; xx++)
			tmp[(size_t)y * ox + xx] = apk_resample_dot(src + (size_t)y * nx, 1,
								    kkx + (size_t)xx * kx,
								    bx[2 * xx], bx[2 * xx + 1]);
	for (int yy = 0; yy < ny; yy++)
		for (int xx = 0; xx < ox; xx++)
			res[(size_t)yy * ox + xx] = apk_resample_dot(tmp + xx, (size_t)ox,
								     kky + (size_t)yy * ky,
								     by[2 * yy], by[2 * yy + 1]);
	apple_lowpass_kernel(kern);
	apk_taps_from(kern, &taps);
	for (int i = 0; i < ny; i++)
		for (int j = 0; j < ox; j++)
			im[(size_t)i * ox + j] = apk_lowpass_px(&taps, res, ny, ox, i, j);
	free(bx);
	free(by);
	free(kkx);
	free(kky);
	free(tmp);
	free(res);
}

static void emu_moments(const double *im, int ny, int nx, int q, double *mean, double *std)
{
	const int nw = nx - q + 1, nwy = ny - q + 1;
	double *rs = xmalloc(sizeof(double) * (size_t)ny * nw), *rs2 = xmalloc(sizeof(double) * (size_t)ny * nw);

	for (int i = 0; i < ny; i++)
		for (int c = 0; c < nw; c++)
			apk_rowsums(im, nx, q, nw, i, c, rs, rs2);
	for (int r = 0; r < nwy; r++)
		for (int c = 0; c < nw; c++)
			apk_colsums(rs, rs2, q, nw, 1.0 / ((double)q * q), r, c, mean, std);
	free(rs);
	free(rs2);
}

/* One block of `lanes` threads per container: scan, then a tree merge. */
static void emu_refs(const apple_sizes_t *s, const double *mean, const double *std, int lanes,
		     int32_t *ref)
{
	const int ncx = s->ncx;
	apk_best_t *b = xmalloc(sizeof *b * (size_t)lanes);

	for (int k = 0; k < s->ncy * ncx; k++) {
		int r0, r1, c0, c1;
		apk_container_range(s->ny, s->nx, s->query, s->container, k / ncx, k % ncx, &r0, &r1,
				    &c0, &c1);
		for (int l = 0; l < lanes; l++)
			apk_refs_scan(mean, std, s->nwx, r0, r1, c0, c1, l, lanes, &b[l]);
		for (int stride = 1; stride < lanes; stride *= 2)
			for (int l = 0; l + stride < lanes; l += 2 * stride)
				apk_best_merge(&b[l], &b[l + stride]);
		apk_refs_write(&b[0], s->nwx, r0, c0, ref + 8 * (size_t)k);
	}
	free(b);
}

static void emu_ccl(const uint8_t *mask, int want, int h, int w, int conn8, int32_t *par)
{
	const int32_t n = h * w;
	int32_t *perm = shuffled(n);

	for (int32_t p = 0; p < n; p++)
		apk_ccl_init(mask, want, p, par);
	for (int32_t i = 0; i < n; i++)
		apk_ccl_merge(mask, want, h, w, conn8, perm[i], par);
	for (int32_t i = 0; i < n; i++)
		apk_ccl_compress(perm[n - 1 - i], par);
	free(perm);
}

static void emu_fill(const uint8_t *a, int h, int w, int32_t *par, uint8_t *flag, uint8_t *filled)
{
	const int32_t n = h * w;
	emu_ccl(a, 0, h, w, 0, par);
	memset(flag, 0, (size_t)n);
	for (int32_t p = 0; p < n; p++)
		apk_fill_mark(a, h, w, p, par, flag);
	for (int32_t p = 0; p < n; p++)
		apk_fill_out(a, p, par, flag, filled);
}

static void emu_morphology(const apple_sizes_t *s, const uint8_t *seg, uint8_t *out)
{
	const int nwy = s->nwy, nwx = s->nwx, W = nwx + 2;
	const int32_t n = nwy * nwx;
	uint8_t *filled = xmalloc((size_t)n), *a2 = xmalloc((size_t)n), *flag = xmalloc((size_t)n);
	uint8_t *ero = xmalloc((size_t)n);
	int32_t *par = xmalloc(sizeof(int32_t) * (size_t)n), *d2 = xmalloc(sizeof(int32_t) * (size_t)n);
	int32_t *g = xmalloc(sizeof(int32_t) * (size_t)(nwy + 2) * W);
	int32_t *st = xmalloc(sizeof(int32_t) * 2 * (size_t)W * nwy);
	int anyzero = 0;

	emu_fill(seg, nwy, nwx, par, flag, filled);
	for (int32_t p = 0; p < n; p++)
		if (!filled[p])
			anyzero = 1;
	if (!anyzero) {
		for (int32_t p = 0; p < n; p++)
			apk_clear_corner(seg, nwx, p, a2);
		emu_fill(a2, nwy, nwx, par, flag, filled);
	}
	for (int x = 0; x < W; x++)
		apk_edt_col(filled, nwy, nwx, x, g);
	for (int y = 1; y <= nwy; y++)
		apk_edt_row(g, nwy, nwx, y, st + 2 * (size_t)W * (y - 1), st + 2 * (size_t)W * (y - 1) + W,
			    d2);
	const long long rmin = (long long)s->min_size * s->min_size,
			rmax = (long long)s->max_size * s->max_size;
	for (int32_t p = 0; p < n; p++)
		apk_erode(d2, rmin, p, ero);
	emu_ccl(ero, 1, nwy, nwx, 1, par);
	memset(flag, 0, (size_t)n);
	for (int32_t p = 0; p < n; p++)
		apk_hit_mark(ero, d2, rmax, p, par, flag);
	for (int32_t p = 0; p < n; p++)
		apk_hit_out(ero, p, par, flag, out);
	free(filled);
	free(a2);
	free(flag);
	free(ero);
	free(par);
	free(d2);
	free(g);
	free(st);
}

/* ---- the 2k micrograph ---- */

static struct {
	apple_params_t p;
	apple_sizes_t s;
	apple_mrc_t hdr;
	float *mic;
	double *im, *mean, *std;
} K;

static int setup_2k(void **state)
{
	char path[1024];
	sp_err_t err = { 0 };
	(void)state;

	if (apple_mrc_load_f32(shared_path(path, sizeof path, "data/apple/synth_2k_float32.mrc"),
			       &K.hdr, &K.mic, &err) != 0)
		return -1;
	K.p.particle_size = 78;
	apple_params_defaults(&K.p);
	if (apple_params_derive(&K.p, K.hdr.ny, K.hdr.nx, &K.s, &err) != 0)
		return -1;
	const int n = K.s.nx, nw = K.s.nwx;
	double *work = malloc(sizeof(double) * apple_preprocess_work_size(&K.p, &K.s));
	K.im = malloc(sizeof(double) * (size_t)K.s.ny * n);
	K.mean = malloc(sizeof(double) * (size_t)K.s.nwy * nw);
	K.std = malloc(sizeof(double) * (size_t)K.s.nwy * nw);
	if (work == NULL || K.im == NULL || K.mean == NULL || K.std == NULL)
		return -1;
	apple_preprocess(&K.p, &K.s, K.mic, K.hdr.ny, K.hdr.nx, K.im, NULL, work);
	free(work);
	if ((work = malloc(sizeof(double) * 2 * (size_t)K.s.ny * nw)) == NULL)
		return -1;
	apple_moments(K.im, K.s.ny, n, K.s.query, K.mean, K.std, work);
	free(work);
	return 0;
}

static int teardown_2k(void **state)
{
	(void)state;
	free(K.mic);
	free(K.im);
	free(K.mean);
	free(K.std);
	return 0;
}

/* Index of the first differing double (bitwise), or -1. */
static long first_diff(const double *a, const double *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(double)) != 0)
			return (long)i;
	return -1;
}

static void test_preprocess_2k(void **state)
{
	const size_t n = (size_t)K.s.ny * K.s.nx;
	double *im = xmalloc(sizeof(double) * n);
	(void)state;

	emu_preprocess(&K.p, &K.s, K.mic, K.hdr.nx, im);
	long d = first_diff(im, K.im, n);
	if (d >= 0)
		print_message("# pixel %ld: kernel %.17g, CPU %.17g\n", d, im[d], K.im[d]);
	assert_int_equal(d, -1);
	free(im);
}

static void test_moments_2k(void **state)
{
	const size_t nw2 = (size_t)K.s.nwy * K.s.nwx;
	double *mean = xmalloc(sizeof(double) * nw2), *std = xmalloc(sizeof(double) * nw2);
	(void)state;

	emu_moments(K.im, K.s.ny, K.s.nx, K.s.query, mean, std);
	assert_int_equal(first_diff(mean, K.mean, nw2), -1);
	assert_int_equal(first_diff(std, K.std, nw2), -1);
	free(mean);
	free(std);
}

static void test_refs_2k(void **state)
{
	const int nref = K.s.nref;
	int32_t *ref = xmalloc(sizeof(int32_t) * 2 * (size_t)nref), *emu = xmalloc(sizeof(int32_t) * 2 * (size_t)nref);
	const int lanes[] = { 1, 7, 32, 256 };
	(void)state;

	apple_refs_select(&K.s, K.mean, K.std, ref);
	for (size_t l = 0; l < sizeof lanes / sizeof lanes[0]; l++) {
		memset(emu, 0xff, sizeof(int32_t) * 2 * (size_t)nref);
		emu_refs(&K.s, K.mean, K.std, lanes[l], emu);
		assert_memory_equal(emu, ref, sizeof(int32_t) * 2 * (size_t)nref);
	}
	free(ref);
	free(emu);
}

/* Ties: a constant image makes every window equal; the first position of
 * each container must win, whatever the lanes. */
static void test_refs_ties(void **state)
{
	apple_sizes_t s = K.s;
	const size_t nn = (size_t)s.nwy * s.nwx;
	double *mean = xmalloc(sizeof(double) * nn), *std = xmalloc(sizeof(double) * nn);
	int32_t *ref = xmalloc(sizeof(int32_t) * 2 * (size_t)s.nref), *emu = xmalloc(sizeof(int32_t) * 2 * (size_t)s.nref);
	(void)state;

	for (size_t i = 0; i < nn; i++) {
		mean[i] = (double)(urand32() % 3); /* many ties, not all */
		std[i] = 1.0;
	}
	apple_refs_select(&s, mean, std, ref);
	emu_refs(&s, mean, std, 64, emu);
	assert_memory_equal(emu, ref, sizeof(int32_t) * 2 * (size_t)s.nref);
	free(mean);
	free(std);
	free(ref);
	free(emu);
}

static void check_morphology(const apple_sizes_t *s, const uint8_t *seg, const char *what)
{
	const size_t n2 = (size_t)s->nwy * s->nwx;
	uint8_t *cpu = xmalloc(n2), *w8 = xmalloc(n2), *emu = xmalloc(n2);
	int32_t *w32 = xmalloc(sizeof(int32_t) * apple_morphology_work_size(s->nwy, s->nwx));
	size_t ones = 0, diff = 0;

	apple_morphology(s, seg, cpu, w8, w32);
	for (int seed = 0; seed < 3; seed++) {
		emu_morphology(s, seg, emu);
		for (size_t i = 0; i < n2; i++)
			diff += emu[i] != cpu[i];
	}
	for (size_t i = 0; i < n2; i++)
		ones += cpu[i] != 0;
	print_message("# %s: %d x %d, %zu pixels kept, %zu differences over 3 orders\n", what,
		      s->nwy, s->nwx, ones, diff);
	assert_int_equal(diff, 0);
	free(cpu);
	free(w8);
	free(emu);
	free(w32);
}

static void test_morphology_2k(void **state)
{
	uint8_t *svm = npy_read_shared("data/apple/ref_2k_seg_svm.npy", "|u1", K.s.nwy, K.s.nwx, 1);
	(void)state;

	check_morphology(&K.s, svm, "2k SVM segmentation");
	free(svm);
}

/* Random fields of discs, rings (holes to fill) and specks, several sizes;
 * plus the all-particle field (the fill leaves no 0: the corner rule). */
static void test_morphology_random(void **state)
{
	/* rows x columns: wide, square, tall */
	const int sizes[][2] = { { 37, 52 }, { 120, 120 }, { 301, 217 } };
	(void)state;

	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		apple_sizes_t s = { 0 };
		const int h = sizes[k][0], w = sizes[k][1];
		uint8_t *seg = xmalloc((size_t)h * w);
		s.nwy = h;
		s.nwx = w;
		s.min_size = 2 + (int)k;
		s.max_size = 6 + 3 * (int)k;
		memset(seg, 0, (size_t)h * w);
		for (int b = 0; b < (h < w ? h : w) / 3; b++) {
			int cy = (int)(urand32() % (uint32_t)h), cx = (int)(urand32() % (uint32_t)w);
			int r = 1 + (int)(urand32() % (uint32_t)(2 * s.max_size)), ring = urand32() % 3 == 0;
			for (int y = cy - r; y <= cy + r; y++)
				for (int x = cx - r; x <= cx + r; x++) {
					int d = (y - cy) * (y - cy) + (x - cx) * (x - cx);
					if (y < 0 || x < 0 || y >= h || x >= w || d > r * r)
						continue;
					if (!ring || d >= (r - 2) * (r - 2))
						seg[(size_t)y * w + x] = 1;
				}
		}
		for (int i = 0; i < h * w / 50; i++)
			seg[urand32() % (uint32_t)(h * w)] ^= 1;
		check_morphology(&s, seg, "random blobs");
		memset(seg, 1, (size_t)h * w);
		check_morphology(&s, seg, "all particle");
		s.max_size = 2 * (h > w ? h : w); /* nothing reaches the large disk: the eroded L survives */
		check_morphology(&s, seg, "all particle, large max_size");
		s.max_size = 6 + 3 * (int)k;
		memset(seg, 0, (size_t)h * w);
		check_morphology(&s, seg, "all noise");
		free(seg);
	}
}

/* Component labels by breadth-first flood fill (the slow obvious way):
 * lab[p] = 1 + index of the component's first pixel in raster order. */
static void flood_label(const uint8_t *mask, int want, int h, int w, int conn8, int32_t *lab)
{
	const int32_t n = h * w;
	int32_t *queue = xmalloc(sizeof(int32_t) * (size_t)n);

	for (int32_t p = 0; p < n; p++)
		lab[p] = 0;
	for (int32_t p0 = 0; p0 < n; p0++) {
		if (!apk_member(mask, want, p0) || lab[p0])
			continue;
		int32_t head = 0, tail = 0;
		lab[p0] = p0 + 1;
		queue[tail++] = p0;
		while (head < tail) {
			int32_t p = queue[head++];
			int y = p / w, x = p % w;
			for (int dy = -1; dy <= 1; dy++)
				for (int dx = -1; dx <= 1; dx++) {
					int yy = y + dy, xx = x + dx;
					if ((dy == 0 && dx == 0) || (!conn8 && dy != 0 && dx != 0) || yy < 0 ||
					    xx < 0 || yy >= h || xx >= w)
						continue;
					int32_t q = yy * w + xx;
					if (apk_member(mask, want, q) && !lab[q]) {
						lab[q] = p0 + 1;
						queue[tail++] = q;
					}
				}
		}
	}
	free(queue);
}

/* The union-find labelling, in shuffled thread orders, against the flood
 * fill: every member's root is its component's first pixel. */
static void test_ccl(void **state)
{
	const int dims[][2] = { { 1, 1 }, { 1, 57 }, { 64, 1 }, { 97, 131 }, { 256, 256 } };
	const unsigned dens[] = { 30, 50, 59, 75 }; /* percent ones: around percolation */
	(void)state;

	for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
		for (size_t k = 0; k < sizeof dens / sizeof dens[0]; k++) {
			const int h = dims[d][0], w = dims[d][1];
			const int32_t n = h * w;
			uint8_t *mask = xmalloc((size_t)n);
			int32_t *par = xmalloc(sizeof(int32_t) * (size_t)n), *lab = xmalloc(sizeof(int32_t) * (size_t)n);
			for (int32_t p = 0; p < n; p++)
				mask[p] = urand32() % 100 < dens[k];
			for (int conn8 = 0; conn8 <= 1; conn8++)
				for (int want = 0; want <= 1; want++) {
					long bad = 0;
					flood_label(mask, want, h, w, conn8, lab);
					emu_ccl(mask, want, h, w, conn8, par);
					for (int32_t p = 0; p < n; p++)
						bad += par[p] != lab[p] - 1;
					if (bad)
						print_message("# %d x %d, %u%%, conn %d, want %d: %ld pixels\n", h,
							      w, dens[k], conn8 ? 8 : 4, want, bad);
					assert_int_equal(bad, 0);
				}
			free(mask);
			free(par);
			free(lab);
		}
}

/* A random micrograph of other proportions: margins, crop, a resize whose
 * scale is not 2, and a container grid that does not tile the image. */
/* A wide and a tall micrograph with uneven margins (odd sides inside
 * them): the preprocessing, moments and references of the kernels'
 * bodies against the CPU's. */
static void check_preprocess_moments(int ny, int nx)
{
	apple_params_t p = { 0 };
	apple_sizes_t s;
	sp_err_t err = { 0 };
	float *mic = xmalloc(sizeof(float) * (size_t)ny * nx);

	for (size_t i = 0; i < (size_t)ny * nx; i++)
		mic[i] = (float)(urand32() % 20000) * 0.05f - 300.0f;
	p.particle_size = 40;
	p.container_size = 90;
	apple_params_defaults(&p);
	p.margin_left = 13;
	p.margin_top = 7;
	p.margin_right = 29;
	p.margin_bottom = 3;
	assert_int_equal(apple_params_derive(&p, ny, nx, &s, &err), 0);
	assert_int_equal(s.sidey, ny - 10);
	assert_int_equal(s.sidex, nx - 42);
	const size_t nn = (size_t)s.ny * s.nx, nw2 = (size_t)s.nwy * s.nwx;
	double *cpu = xmalloc(sizeof(double) * nn), *emu = xmalloc(sizeof(double) * nn);
	double *work = xmalloc(sizeof(double) * apple_preprocess_work_size(&p, &s));
	apple_preprocess(&p, &s, mic, ny, nx, cpu, NULL, work);
	emu_preprocess(&p, &s, mic, nx, emu);
	assert_int_equal(first_diff(emu, cpu, nn), -1);
	free(work);

	double *m1 = xmalloc(sizeof(double) * nw2), *s1 = xmalloc(sizeof(double) * nw2);
	double *m2 = xmalloc(sizeof(double) * nw2), *s2 = xmalloc(sizeof(double) * nw2);
	work = xmalloc(sizeof(double) * 2 * (size_t)s.ny * s.nwx);
	apple_moments(cpu, s.ny, s.nx, s.query, m1, s1, work);
	emu_moments(cpu, s.ny, s.nx, s.query, m2, s2);
	assert_int_equal(first_diff(m1, m2, nw2), -1);
	assert_int_equal(first_diff(s1, s2, nw2), -1);
	int32_t *r1 = xmalloc(sizeof(int32_t) * 2 * (size_t)s.nref), *r2 = xmalloc(sizeof(int32_t) * 2 * (size_t)s.nref);
	apple_refs_select(&s, m1, s1, r1);
	emu_refs(&s, m1, s1, 32, r2);
	assert_memory_equal(r1, r2, sizeof(int32_t) * 2 * (size_t)s.nref);
	print_message("# %d x %d micrograph: inside the margins %d x %d -> %d x %d, q %d, windows "
		      "%d x %d, %d references\n",
		      ny, nx, s.sidey, s.sidex, s.ny, s.nx, s.query, s.nwy, s.nwx, s.nref);
	free(mic);
	free(cpu);
	free(emu);
	free(work);
	free(m1);
	free(s1);
	free(m2);
	free(s2);
	free(r1);
	free(r2);
}

static void test_preprocess_moments_random(void **state)
{
	(void)state;
	check_preprocess_moments(733, 811);
	check_preprocess_moments(811, 533);
}

/* ---- score: the fused route (score_fused_kernel, q = 2m) ---------------- */

static double urand_pm(void) /* uniform in [-0.5, 0.5) (urand32(): 31 bits) */
{
	return (double)urand32() / 2147483648.0 - 0.5;
}

/* score_fused_kernel's launch for nq queries W [nq][ns] against nref
 * references R [nref][ns] (interleaved complex): a block per (query,
 * group of npair references), each phase's threads in a shuffled order. */
static void emu_score_fused(int m, const double *tab, const double *R, int nref, const double *W,
			    int nq, double *resp)
{
	const int q = 2 * m, npair = apk_score_npair(m), ns = q * (m + 1);
	const double inv = 1.0 / ((double)q * q);
	double *sm = xmalloc(sizeof(double) * (size_t)npair * apk_score_pair_doubles(m));

	for (int k = 0; k < nq; k++)
		for (int r0 = 0; r0 < nref; r0 += npair) {
			const int npv = nref - r0 < npair ? nref - r0 : npair;
			const double *Wk = W + (size_t)2 * ns * k;
			const int n1 = npv * apk_score_pair_threads(m), n2 = npv * q;
			int32_t *perm = shuffled(n1);
			for (int i = 0; i < n1; i++)
				apk_score_phase1(m, tab, R, Wk, r0, npv, perm[i], sm);
			free(perm);
			perm = shuffled(n2);
			for (int i = 0; i < n2; i++)
				apk_score_phase2(m, tab, npv, perm[i], sm);
			free(perm);
			for (int t = 0; t < npair; t++) /* the block's other threads: no-ops */
				apk_score_phase3(m, R, Wk, r0, npv, t, sm, inv, resp + (size_t)k * nref);
		}
	free(sm);
}

/* The response of one pair the slow, obvious way: the circular
 * cross-correlation cc[x][y] = (1/q^2) sum over k of P[k] e^{+2 pi i k.x/q}
 * from the full spectrum (Hermitian extension of the half), in long
 * double; max(cc) - P[0]/q^2. */
static double slow_response(int q, const double *R, const double *W)
{
	const int nh = q / 2 + 1;
	long double best = -INFINITY;
	for (int x = 0; x < q; x++)
		for (int y = 0; y < q; y++) {
			long double acc = 0;
			for (int a = 0; a < q; a++)
				for (int b = 0; b < q; b++) {
					int bb = b < nh ? b : q - b, aa = b < nh ? a : (q - a) % q;
					long double pr, pi;
					const double *r = R + 2 * ((size_t)aa * nh + bb), *w = W + 2 * ((size_t)aa * nh + bb);
					pr = (long double)r[0] * w[0] + (long double)r[1] * w[1];
					pi = (long double)r[1] * w[0] - (long double)r[0] * w[1];
					if (b >= nh)
						pi = -pi; /* P[-k] = conj(P[k]) */
					long double ang = 2 * 3.14159265358979323846264338327950288L *
							  (long double)((a * x + b * y) % q) / q;
					acc += pr * cosl(ang) - pi * sinl(ang);
				}
			if (acc > best)
				best = acc;
		}
	long double p0 = (long double)R[0] * W[0] + (long double)R[1] * W[1];
	return (double)((best - p0) / ((long double)q * q));
}

/* Every q of the fused route: the emulated kernel gives the CPU lanes
 * route's responses (lane_pairs() of each available SIMD variant) to the
 * bit, on random spectra, with nref not a multiple of the pairs per
 * block; and a few pairs agree with the slow transform within 1e-13 of
 * the largest. */
static void test_score_fused(void **state)
{
	enum { NREF = 19, NQ = 3 };
	int nroute = 0;
	(void)state;

	for (int q = 4; q <= 64; q += 2) {
		const int m = apk_score_fused_m(q);
		if (m == 0)
			continue;
		nroute++;
		assert_int_equal(apple_score_lane_m(q), m); /* the CPU's lanes route has this q */
		const size_t ns = (size_t)q * (m + 1);
		double tab[APPLE_LANE_TAB], emu[NQ * NREF];
		double *R = xmalloc(sizeof(double) * 2 * ns * NREF), *W = xmalloc(sizeof(double) * 2 * ns * NQ);
		double *Rl = xmalloc(sizeof(double) * 8 * ns), *Y = xmalloc(sizeof(double) * 8 * ns);
		double *wl = xmalloc(sizeof(double) * 2 * ns);
		apple_score_lane_tab(m, tab);
		for (size_t i = 0; i < 2 * ns * NREF; i++)
			R[i] = urand_pm();
		for (size_t i = 0; i < 2 * ns * NQ; i++)
			W[i] = urand_pm();
		emu_score_fused(m, tab, R, NREF, W, NQ, emu);
		int ran = 0;
		for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
			const apple_score_simd_t *v = apple_score_simd(isa);
			if (v == NULL)
				continue;
			const int w = v->width;
			for (int k = 0; k < NQ; k++) {
				for (size_t e = 0; e < ns; e++) { /* the query's re, im planes */
					wl[e] = W[2 * ns * k + 2 * e];
					wl[ns + e] = W[2 * ns * k + 2 * e + 1];
				}
				for (int g = 0; g * w < NREF; g++) {
					double out[4];
					for (int l = 0; l < w; l++)
						for (size_t e = 0; e < ns; e++) {
							const int r = g * w + l;
							Rl[e * w + l] = r < NREF ? R[2 * ns * r + 2 * e] : 0.0;
							Rl[(ns + e) * w + l] = r < NREF ? R[2 * ns * r + 2 * e + 1] : 0.0;
						}
					assert_int_equal(v->lane_pairs(q, tab, Rl, wl, wl + ns, Y,
								       1.0 / ((double)q * q), out), 0);
					for (int l = 0; l < w && g * w + l < NREF; l++)
						assert_memory_equal(&emu[k * NREF + g * w + l], &out[l],
								    sizeof(double));
				}
			}
			ran++;
		}
		assert_true(ran >= 1);
		double big = 0.0;
		for (int i = 0; i < NQ * NREF; i++)
			big = fabs(emu[i]) > big ? fabs(emu[i]) : big;
		for (int i = 0; i < 3; i++) { /* pairs (0, 0), (1, 9), (2, 18) */
			const int k = i, r = 9 * i;
			double ref = slow_response(q, R + 2 * ns * r, W + 2 * ns * k);
			assert_true(fabs(emu[k * NREF + r] - ref) <= 1e-13 * big);
		}
		free(R);
		free(W);
		free(Rl);
		free(Y);
		free(wl);
	}
	assert_int_equal(nroute, 11); /* q = 2m, m = 3, 5, ..., 23 */
	print_message("# fused score: %d q, the lanes route's bits; slow transform within 1e-13\n",
		      nroute);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_preprocess_2k),
		cmocka_unit_test(test_moments_2k),
		cmocka_unit_test(test_refs_2k),
		cmocka_unit_test(test_refs_ties),
		cmocka_unit_test(test_ccl),
		cmocka_unit_test(test_morphology_2k),
		cmocka_unit_test(test_morphology_random),
		cmocka_unit_test(test_preprocess_moments_random),
		cmocka_unit_test(test_score_fused),
	};
	char path[1024];
	FILE *f;

	if ((f = fopen(shared_path(path, sizeof path, "data/apple/synth_2k_float32.mrc"), "rb")) == NULL) {
		printf("1..0 # SKIP %s not found (set SP_SHARED)\n", path);
		return 0;
	}
	fclose(f);
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup_2k, teardown_2k);
}
