/* Unit tests of the APPLE-Picker CPU kernels against ASPIRE's intermediates on the 2k micrograph and naive references. */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>
#include <fftw3.h>

#include "../codelets/apple/apple.h"
#include "cpuisa.h"
#include "npyread.h"
#include "testutil.h"

/*
 * DESIGN.  ../shared/data/apple/ holds ASPIRE's run on a simulated 2048^2
 * micrograph (particle_size 78, tau 147/1470): the preprocessed image
 * (float32 dump), score map, SVM and morphology segmentations and the
 * picks.  The group setup runs the whole chain once, timing each step, and
 * the tests compare each step's output, chained (our input) and, where the
 * reference dumped the input, fed with the reference's input so that each
 * step's own agreement shows.  Small random images check the kernels
 * against slow obvious implementations (direct sums, erosion by
 * definition, flood-fill labelling).
 */

static void *xmalloc(size_t n)
{
	void *p = malloc(n > 0 ? n : 1);
	assert_non_null(p);
	return p;
}

/* A work area holding garbage, as a worker's kept buffer does (tbuf.h):
 * the kernels must not read what they did not write. */
static void *xgarbage(size_t n)
{
	void *p = xmalloc(n);
	memset(p, 0xa5, n > 0 ? n : 1);
	return p;
}

/* apple_pick() in a work area filled with garbage (the codelet's is a
 * worker's buffer, holding whatever its last task left). */
static int pick_poisoned(const apple_params_t *p, const apple_sizes_t *s, const uint8_t *seg,
			 int *xy, int maxpick)
{
	const size_t nb = apple_pick_work_size(s);
	void *work = xgarbage(nb);
	int n = apple_pick(p, s, seg, xy, maxpick, work);
	free(work);
	return n;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- test-local readers: MRC mode 2, NPY ('<f4', '|u1', '<i2'), STAR ---- */

static float *read_mrc_f32(const char *path, int *ny, int *nx)
{
	FILE *f = fopen(path, "rb");
	int32_t hdr[256];
	float *d;

	if (f == NULL || fread(hdr, 4, 256, f) != 256)
		return NULL;
	*nx = hdr[0];
	*ny = hdr[1];
	if (hdr[3] != 2 || hdr[2] != 1 || fseek(f, 1024 + hdr[23], SEEK_SET) != 0) {
		fclose(f);
		return NULL;
	}
	d = xmalloc(sizeof *d * (size_t)*nx * *ny);
	if (fread(d, sizeof *d, (size_t)*nx * *ny, f) != (size_t)*nx * *ny) {
		free(d);
		d = NULL;
	}
	fclose(f);
	return d;
}

/* Reads the coordinate pairs of a STAR file (lines of two numbers). */
static int read_star(const char *rel, double *xy, int max)
{
	char path[1024], line[256];
	FILE *f = fopen(shared_path(path, sizeof path, rel), "r");
	int n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof line, f) != NULL) {
		double x, y;
		if (sscanf(line, "%lf %lf", &x, &y) == 2 && n < max) {
			xy[2 * n] = x;
			xy[2 * n + 1] = y;
			n++;
		}
	}
	fclose(f);
	return n;
}

/* ---- the 2k chain, run once ---- */

static struct chain {
	apple_params_t p;
	apple_sizes_t s;
	int ny, nx;
	float *mic, *pre32;
	double *im, *mean, *std, *resp;
	int32_t *ref, *score;
	apple_svm_t *svm;
	uint8_t *seg, *morph;
	int xy[2 * 1024], npick;
	double t[8];
} C;

static const char *step_names[] = {"preprocess", "moments", "refs+score (FFT)", "training set",
				   "SVM train", "classify", "morphology", "pick"};

static int setup_chain(void **state)
{
	char path[1024];
	sp_err_t err;
	double t0;
	(void)state;

	C.mic = read_mrc_f32(shared_path(path, sizeof path, "data/apple/synth_2k_float32.mrc"),
			     &C.ny, &C.nx);
	if (C.mic == NULL)
		return -1;
	C.p.particle_size = 78;
	apple_params_defaults(&C.p);
	if (apple_params_derive(&C.p, C.ny, C.nx, &C.s, &err) != 0)
		return -1;
	const apple_sizes_t *s = &C.s;
	/* the reference's arrays are square: so are this micrograph's sizes */
	if (s->ny != s->nx || s->nwy != s->nwx)
		return -1;
	const int n = s->nx, nw = s->nwx, q = s->query, nq = s->gy * s->gx;

	/* 1 preprocess */
	double *work = xgarbage(sizeof(double) * apple_preprocess_work_size(&C.p, s));
	C.im = xmalloc(sizeof(double) * (size_t)n * n);
	C.pre32 = xmalloc(sizeof(float) * (size_t)n * n);
	t0 = now();
	apple_preprocess(&C.p, s, C.mic, C.ny, C.nx, C.im, C.pre32, work);
	C.t[0] = now() - t0;
	free(work);

	/* 2 moments */
	C.mean = xmalloc(sizeof(double) * (size_t)nw * nw);
	C.std = xmalloc(sizeof(double) * (size_t)nw * nw);
	work = xgarbage(sizeof(double) * 2 * (size_t)n * nw);
	t0 = now();
	apple_moments(C.im, n, n, q, C.mean, C.std, work);
	C.t[1] = now() - t0;
	free(work);

	/* 3 score, in two halves as two tasks would */
	C.ref = xmalloc(sizeof(int32_t) * 2 * (size_t)s->nref);
	C.resp = xmalloc(sizeof(double) * (size_t)nq * s->nref);
	C.score = xmalloc(sizeof(int32_t) * (size_t)nq);
	double *spec = xmalloc(sizeof(double) * 2 * apple_score_spec_size(q) * (size_t)s->nref);
	apple_score_fft_t *fft = apple_score_fft_init(q);
	assert_non_null(fft);
	t0 = now();
	apple_refs_select(s, C.mean, C.std, C.ref);
	apple_score_refs_fft(fft, C.im, n, q, C.ref, s->nref, spec);
	apple_score_responses(fft, C.im, n, q, s->gx, spec, s->nref, 0, nq / 2, C.resp);
	apple_score_responses(fft, C.im, n, q, s->gx, spec, s->nref, nq / 2, nq,
			      C.resp + (size_t)(nq / 2) * s->nref);
	apple_score_finish(C.resp, nq, s->nref, C.score);
	C.t[2] = now() - t0;
	apple_score_fft_free(&fft);
	free(spec);

	/* 4-5 training set, SVM, classification (two row ranges) */
	size_t nb = (size_t)(n / q) * (n / q);
	double *feat = xgarbage(sizeof(double) * 2 * nb);
	unsigned char *w8 = xgarbage(2 * (size_t)n * n);
	int npos, nneg;
	t0 = now();
	if (apple_training_set(s, C.im, C.score, s->tau1, s->tau2, feat, &npos, &nneg, w8) != 0)
		return -1;
	C.t[3] = now() - t0;
	t0 = now();
	C.svm = apple_svm_new(feat, npos, nneg);
	C.t[4] = now() - t0;
	free(feat);
	free(w8);
	if (C.svm == NULL)
		return -1;
	C.seg = xmalloc((size_t)nw * nw);
	t0 = now();
	apple_classify_rows(C.svm, C.mean, C.std, nw, 0, nw / 3, C.seg);
	apple_classify_rows(C.svm, C.mean, C.std, nw, nw / 3, nw, C.seg + (size_t)(nw / 3) * nw);
	C.t[5] = now() - t0;

	/* 6 morphology */
	C.morph = xmalloc((size_t)nw * nw);
	uint8_t *m8 = xgarbage((size_t)nw * nw);
	int32_t *m32 = xgarbage(sizeof(int32_t) * apple_morphology_work_size(nw, nw));
	t0 = now();
	apple_morphology(s, C.seg, C.morph, m8, m32);
	C.t[6] = now() - t0;
	free(m8);
	free(m32);

	/* 7 pick */
	t0 = now();
	C.npick = pick_poisoned(&C.p, s, C.morph, C.xy, 1024);
	C.t[7] = now() - t0;

	double tot = 0;
	for (int i = 0; i < 8; i++) {
		print_message("# time %-18s %8.3f s\n", step_names[i], C.t[i]);
		tot += C.t[i];
	}
	print_message("# time %-18s %8.3f s  (%d training examples: %d particle, %d noise; %d SVs)\n",
		      "total", tot, npos + nneg, npos, nneg, C.svm->nsv);
	return 0;
}

static int teardown_chain(void **state)
{
	(void)state;
	free(C.mic);
	free(C.pre32);
	free(C.im);
	free(C.mean);
	free(C.std);
	free(C.resp);
	free(C.ref);
	free(C.score);
	apple_svm_free(&C.svm);
	free(C.seg);
	free(C.morph);
	return 0;
}

/* ---- the 2k tests ---- */

static void test_params(void **state)
{
	apple_params_t p = {.particle_size = 78};
	apple_sizes_t s;
	sp_err_t err;
	(void)state;

	apple_params_defaults(&p);
	assert_int_equal(p.max_particle_size, 156);
	assert_int_equal(p.min_particle_size, 19);
	assert_int_equal(p.minimum_overlap_amount, 7);
	assert_int_equal(p.query_image_size, 52);
	assert_int_equal(apple_params_derive(&p, 2048, 2048, &s, &err), 0);
	assert_int_equal(s.particle, 39);
	assert_int_equal(s.max_size, 78);
	assert_int_equal(s.min_size, 9);
	assert_int_equal(s.query, 26);
	assert_int_equal(s.moa, 3);
	assert_int_equal(s.container, 225);
	assert_int_equal(s.nx, 924);
	assert_int_equal(s.nwx, 899);
	assert_int_equal(s.gy, 70);
	assert_int_equal(s.nref, 64);
	assert_int_equal(s.tau1, 147); /* scaled: the 4k defaults exceed 70^2 windows */
	assert_int_equal(s.tau2, 1470);
	/* a 4k micrograph keeps ASPIRE's defaults */
	assert_int_equal(apple_params_derive(&p, 4096, 4096, &s, &err), 0);
	assert_int_equal(s.tau1, 710);
	assert_int_equal(s.tau2, 7100);
	assert_int_equal(s.nx, 1948);
	/* a rectangle, 3072 rows x 4096 columns, is kept whole: 2873 x 3897
	 * inside the margins, binned 1436 x 1948; query grid 110 x 149 (q 26);
	 * containers 6 x 8 (225), 192 references */
	assert_int_equal(apple_params_derive(&p, 3072, 4096, &s, &err), 0);
	assert_int_equal(s.sidey, 2873);
	assert_int_equal(s.sidex, 3897);
	assert_int_equal(s.ny, 1436);
	assert_int_equal(s.nx, 1948);
	assert_int_equal(s.nwy, 1411);
	assert_int_equal(s.nwx, 1923);
	assert_int_equal(s.gy, 109);
	assert_int_equal(s.gx, 148);
	assert_int_equal(s.ncy, 6);
	assert_int_equal(s.ncx, 8);
	assert_int_equal(s.nref, 192);
	/* too narrow for two containers along the short side */
	assert_int_equal(apple_params_derive(&p, 4096, 500, &s, &err), SP_EINVAL);
	assert_non_null(strstr(err.msg, "too small"));
	p.particle_size = 4;
	assert_int_equal(apple_params_derive(&p, 2048, 2048, &s, &err), SP_EINVAL);
	assert_non_null(strstr(err.msg, "particle_size"));
	/* the response cube is bounded (issue 41): query_image_size 4 with
	 * container_size 78 asks 923 x 923 windows x 2116 references */
	p.particle_size = 78;
	p.query_image_size = 4;
	p.container_size = 78;
	assert_int_equal(apple_params_derive(&p, 2048, 2048, &s, &err), SP_EINVAL);
	assert_non_null(strstr(err.msg, "query_image_size 4 and container_size 78 make 923 x 923 "
					"query windows x 2116 references"));
	p.query_image_size = 12; /* 307 x 307 x 2116: 2.0e8, allowed */
	assert_int_equal(apple_params_derive(&p, 2048, 2048, &s, &err), 0);
	assert_true((double)s.gy * s.gx * s.nref <= APPLE_MAX_CORRELATIONS);
}

/* A rectangle's preprocessing and moments against the square's (the path
 * checked against ASPIRE above): the 2k micrograph extended by `extra`
 * columns (wide) or rows (tall) of other micrograph content.  With even
 * sides inside the margins (margin 101 on the extended side's far end, and
 * on the square's) both resize by exactly 2, so every output whose
 * resampling window (4 input pixels either side) and low-pass window (7
 * pixels) stay clear of the square's far edge is the same double, bit for
 * bit; the rest differs because the image goes on. */
static void check_rect_extends_square(int tall, int extra)
{
	const int n0 = C.ny; /* the 2k micrograph is square */
	const int ny = tall ? n0 + extra : n0, nx = tall ? n0 : n0 + extra;
	float *mic = xmalloc(sizeof(float) * (size_t)ny * nx);
	apple_params_t p = C.p, q = C.p;
	apple_sizes_t sr, sq;
	sp_err_t err = { 0 };

	for (int y = 0; y < ny; y++)
		for (int x = 0; x < nx; x++) {
			int sy = y, sx = x; /* the square, then content from its middle */
			if (sy >= n0)
				sy = sy - n0 + 300;
			if (sx >= n0)
				sx = sx - n0 + 300;
			mic[(size_t)y * nx + x] = C.mic[(size_t)sy * n0 + sx];
		}
	p.margin_right = q.margin_right = 101;
	p.margin_bottom = q.margin_bottom = 101;
	assert_int_equal(apple_params_derive(&q, n0, n0, &sq, &err), 0);
	assert_int_equal(apple_params_derive(&p, ny, nx, &sr, &err), 0);
	assert_int_equal(sq.sidey % 2 + sq.sidex % 2 + sr.sidey % 2 + sr.sidex % 2, 0);
	assert_int_equal(tall ? sr.nx : sr.ny, sq.nx);
	assert_true((tall ? sr.ny : sr.nx) > sq.nx);

	double *w = xmalloc(sizeof(double) * apple_preprocess_work_size(&p, &sr));
	double *imr = xmalloc(sizeof(double) * (size_t)sr.ny * sr.nx);
	double *imq = xmalloc(sizeof(double) * (size_t)sq.ny * sq.nx);
	apple_preprocess(&p, &sr, mic, ny, nx, imr, NULL, w);
	free(w);
	w = xmalloc(sizeof(double) * apple_preprocess_work_size(&q, &sq));
	apple_preprocess(&q, &sq, C.mic, n0, n0, imq, NULL, w);
	free(w);

	const int keep = sq.nx - 12; /* outputs clear of the square's far edge */
	size_t same = 0, total = 0, beyond = 0;
	for (int i = 0; i < (tall ? keep : sq.ny); i++)
		for (int j = 0; j < (tall ? sq.nx : keep); j++) {
			double a = imr[(size_t)i * sr.nx + j], b = imq[(size_t)i * sq.nx + j];
			same += memcmp(&a, &b, sizeof a) == 0;
			total++;
		}
	/* the edge zone of the square differs: the rectangle's image goes on */
	for (int i = 0; i < sq.ny; i++)
		for (int j = sq.nx - 3; j < sq.nx; j++) {
			int r = tall ? j : i, c = tall ? i : j;
			beyond += imr[(size_t)r * sr.nx + c] != imq[(size_t)r * sq.nx + c];
		}

	/* moments of the windows inside the shared region */
	const int qq = sq.query;
	double *mr = xmalloc(sizeof(double) * (size_t)sr.nwy * sr.nwx);
	double *dr = xmalloc(sizeof(double) * (size_t)sr.nwy * sr.nwx);
	double *mq = xmalloc(sizeof(double) * (size_t)sq.nwy * sq.nwx);
	double *dq = xmalloc(sizeof(double) * (size_t)sq.nwy * sq.nwx);
	w = xmalloc(sizeof(double) * 2 * (size_t)sr.ny * sr.nwx);
	apple_moments(imr, sr.ny, sr.nx, qq, mr, dr, w);
	free(w);
	w = xmalloc(sizeof(double) * 2 * (size_t)sq.ny * sq.nwx);
	apple_moments(imq, sq.ny, sq.nx, qq, mq, dq, w);
	size_t msame = 0, mtotal = 0;
	for (int r = 0; r < (tall ? keep - qq : sq.nwy); r++)
		for (int c = 0; c < (tall ? sq.nwx : keep - qq); c++) {
			size_t a = (size_t)r * sr.nwx + c, b = (size_t)r * sq.nwx + c;
			msame += mr[a] == mq[b] && dr[a] == dq[b];
			mtotal++;
		}
	print_message("# %s %d x %d: %zu/%zu preprocessed pixels and %zu/%zu window moments "
		      "identical to the square's; %zu of the square's last %d x 3 edge pixels "
		      "differ\n",
		      tall ? "tall" : "wide", ny, nx, same, total, msame, mtotal, beyond, sq.ny);
	assert_int_equal(same, total);
	assert_int_equal(msame, mtotal);
	assert_true(beyond > (size_t)sq.ny);
	free(w);
	free(mic);
	free(imr);
	free(imq);
	free(mr);
	free(dr);
	free(mq);
	free(dq);
}

static void test_rect_extends_square(void **state)
{
	(void)state;
	check_rect_extends_square(0, 512);
	check_rect_extends_square(1, 700);
}

static void test_lowpass_kernel(void **state)
{
	char path[1024];
	double k[225], v;
	FILE *f = fopen(shared_path(path, sizeof path,
				    "data/apple/aspire_gaussian_kernel_15x15_sigma0.5.txt"),
			"r");
	int nexact = 0;
	double dmax = 0;
	(void)state;

	assert_non_null(f);
	apple_lowpass_kernel(k);
	for (int i = 0; i < 225; i++) {
		assert_int_equal(fscanf(f, "%lf", &v), 1);
		nexact += v == k[i];
		if (fabs(v - k[i]) > dmax)
			dmax = fabs(v - k[i]);
	}
	fclose(f);
	print_message("# low-pass kernel: %d/225 entries bit-identical, max |diff| %.1e\n", nexact,
		      dmax);
	assert_true(dmax <= 1e-16);
}

static void test_preprocess(void **state)
{
	const int n = C.s.nx;
	float *ref = npy_read_shared("data/apple/ref_2k_preprocessed_f32.npy", "<f4", n, n, sizeof(float));
	size_t ndiff = 0, nn = (size_t)n * n;
	double dmax = 0, rmax = 0;
	(void)state;

	for (size_t i = 0; i < nn; i++) {
		double d = fabs((double)C.pre32[i] - ref[i]);
		ndiff += C.pre32[i] != ref[i];
		if (d > dmax)
			dmax = d;
		if (fabs(ref[i]) > rmax)
			rmax = fabs(ref[i]);
	}
	print_message("# preprocess: %zu/%zu float32 values differ, max |diff| %.2e (rel %.1e)\n",
		      ndiff, nn, dmax, dmax / rmax);
	free(ref);
	/* float32 rounding of a double result: at most one float32 ulp */
	assert_true(dmax / rmax <= 2.4e-7);
}

static void test_score(void **state)
{
	const int g = C.s.gy;
	int16_t *ref = npy_read_shared("data/apple/ref_2k_score.npy", "<i2", g, g, sizeof(int16_t));
	int ndiff = 0;
	(void)state;

	for (int i = 0; i < g * g; i++)
		ndiff += C.score[i] != ref[i];
	print_message("# score: %d/%d query scores differ\n", ndiff, g * g);
	free(ref);
	assert_int_equal(ndiff, 0);
}

static size_t count_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	size_t d = 0;
	for (size_t i = 0; i < n; i++)
		d += (a[i] != 0) != (b[i] != 0);
	return d;
}

static void test_svm(void **state)
{
	const int nw = C.s.nwx;
	uint8_t *ref = npy_read_shared("data/apple/ref_2k_seg_svm.npy", "|u1", nw, nw, 1);
	size_t nd = count_diff(C.seg, ref, (size_t)nw * nw), npart = 0;
	(void)state;

	for (size_t i = 0; i < (size_t)nw * nw; i++)
		npart += C.seg[i] != 0;
	assert_int_equal(apple_seg_uniform(C.seg, (size_t)nw * nw), 0);
	print_message("# svm segmentation: %zu/%zu pixels differ (particle fraction %.6f)\n", nd,
		      (size_t)nw * nw, (double)npart / ((double)nw * nw));
	free(ref);
	assert_true(nd <= 10);
}

static void test_morphology(void **state)
{
	const int nw = C.s.nwx;
	uint8_t *svm = npy_read_shared("data/apple/ref_2k_seg_svm.npy", "|u1", nw, nw, 1);
	uint8_t *ref = npy_read_shared("data/apple/ref_2k_seg_morph.npy", "|u1", nw, nw, 1);
	uint8_t *out = xmalloc((size_t)nw * nw), *m8 = xmalloc((size_t)nw * nw);
	int32_t *m32 = xmalloc(sizeof(int32_t) * apple_morphology_work_size(nw, nw));
	(void)state;

	apple_morphology(&C.s, svm, out, m8, m32);
	size_t fed = count_diff(out, ref, (size_t)nw * nw);
	size_t chained = count_diff(C.morph, ref, (size_t)nw * nw);
	print_message("# morphology: %zu pixels differ fed with the reference SVM segmentation, "
		      "%zu chained\n", fed, chained);
	free(svm);
	free(ref);
	free(out);
	free(m8);
	free(m32);
	assert_int_equal(fed, 0);
}

static int match_picks(const int *xy, int n, const double *ref, int nref)
{
	int same = n == nref;
	for (int i = 0; same && i < n; i++)
		same = xy[2 * i] == (int)ref[2 * i] && xy[2 * i + 1] == (int)ref[2 * i + 1];
	return same;
}

/* Precision and recall against the truth (match radius particle_size / 4). */
static void truth_score(const char *what, const int *xy, int n)
{
	static double truth[2 * 1024];
	int nt = read_star("data/apple/synth_2k_float32_truth.star", truth, 1024), tp = 0, found = 0;
	const double r = 78.0 / 4;

	for (int i = 0; i < n; i++) {
		int hit = 0;
		for (int j = 0; j < nt && !hit; j++)
			hit = hypot(xy[2 * i] - truth[2 * j], xy[2 * i + 1] - truth[2 * j + 1]) <= r;
		tp += hit;
	}
	for (int j = 0; j < nt; j++) {
		int hit = 0;
		for (int i = 0; i < n && !hit; i++)
			hit = hypot(xy[2 * i] - truth[2 * j], xy[2 * i + 1] - truth[2 * j + 1]) <= r;
		found += hit;
	}
	print_message("# %s: %d picks, precision %.3f, recall %.3f (%d true particles)\n", what, n,
		      n ? (double)tp / n : 0.0, nt ? (double)found / nt : 0.0, nt);
}

static void test_pick(void **state)
{
	const int nw = C.s.nwx;
	static double ref[2 * 1024];
	static int xy[2 * 1024];
	uint8_t *morph = npy_read_shared("data/apple/ref_2k_seg_morph.npy", "|u1", nw, nw, 1);
	int nref = read_star("data/apple/ref_2k_applepick.star", ref, 1024);
	(void)state;

	int n = pick_poisoned(&C.p, &C.s, morph, xy, 1024);
	int fed = match_picks(xy, n, ref, nref);
	int chained = match_picks(C.xy, C.npick, ref, nref);
	print_message("# pick: %d picks fed with the reference morphology (reference %d): %s; "
		      "chained %d: %s\n", n, nref, fed ? "identical" : "DIFFERENT", C.npick,
		      chained ? "identical" : "different");
	truth_score("reference quirks", xy, n);
	apple_params_t pf = C.p;
	pf.fix_quirks = 1;
	int nf = pick_poisoned(&pf, &C.s, morph, xy, 1024), common = 0;
	truth_score("fix_quirks", xy, nf);
	for (int i = 0; i < nf; i++)
		for (int j = 0; j < nref; j++)
			if (xy[2 * i] == (int)ref[2 * j] && xy[2 * i + 1] == (int)ref[2 * j + 1]) {
				common++;
				break;
			}
	print_message("# fix_quirks: %d of its %d picks are among the reference's %d\n", common,
		      nf, nref);
	free(morph);
	assert_true(fed);
}

/* The picks' scores (the STAR's _rlnAutopickFigureOfMerit): each is the SVM
 * decision at the pick's window, found here by searching the window whose
 * forward mapping (apple_pick()'s) gives the pick, signed as the
 * classification: positive exactly where the window was classified
 * particle. */
static void test_pick_scores(void **state)
{
	(void)state;
	const int nw = C.s.nwx, lo = C.s.query / 2 - 1;
	double *score = xmalloc(sizeof(double) * (size_t)(C.npick > 0 ? C.npick : 1));
	uint8_t one;
	int positive = 0;

	assert_true(C.npick > 10);
	apple_pick_scores(&C.p, &C.s, C.svm, C.mean, C.std, C.xy, C.npick, score);
	for (int k = 0; k < C.npick; k++) {
		int found = -1;
		for (int r = 0; r < nw && found < 0; r++)
			for (int c = 0; c < nw; c++)
				if (2 * (c - lo + 2 * lo + 1) + C.p.margin_left == C.xy[2 * k] &&
				    2 * (r - lo + 2 * lo + 1) + C.p.margin_top == C.xy[2 * k + 1]) {
					found = r * nw + c;
					break;
				}
		assert_true(found >= 0);
		apple_classify_rows(C.svm, C.mean + found, C.std + found, 1, 0, 1, &one);
		assert_true(isfinite(score[k]));
		assert_true(score[k] != 0.0);
		assert_int_equal(score[k] > 0, one);
		assert_int_equal(one, C.seg[found]);
		positive += score[k] > 0;
	}
	print_message("# pick scores: %d of %d picks' windows classified particle\n", positive,
		      C.npick);
	free(score);
}

/* ---- small random images against slow obvious implementations ---- */

static uint64_t rng = 88172645463325252ULL;
static double urand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static void test_moments_direct(void **state)
{
	const int n = 37, q = 8, nw = n - q + 1;
	double *im = xmalloc(sizeof(double) * n * n), *mean = xmalloc(sizeof(double) * nw * nw);
	double *std = xmalloc(sizeof(double) * nw * nw), *work = xmalloc(sizeof(double) * 2 * n * nw);
	double dm = 0, ds = 0;
	(void)state;

	for (int i = 0; i < n * n; i++)
		im[i] = 1000.0 + 30.0 * urand();
	apple_moments(im, n, n, q, mean, std, work);
	for (int r = 0; r < nw; r++)
		for (int c = 0; c < nw; c++) {
			double s = 0, s2 = 0;
			for (int a = 0; a < q; a++)
				for (int b = 0; b < q; b++)
					s += im[(r + a) * n + c + b];
			s /= q * q;
			for (int a = 0; a < q; a++)
				for (int b = 0; b < q; b++)
					s2 += (im[(r + a) * n + c + b] - s) * (im[(r + a) * n + c + b] - s);
			s2 = sqrt(s2 / (q * q));
			if (fabs(mean[r * nw + c] - s) > dm)
				dm = fabs(mean[r * nw + c] - s);
			if (fabs(std[r * nw + c] - s2) / s2 > ds)
				ds = fabs(std[r * nw + c] - s2) / s2;
		}
	print_message("# moments vs direct (values ~1000 +- 30): max |mean diff| %.1e, max std "
		      "rel diff %.1e\n", dm, ds);
	assert_true(dm <= 1e-10);
	assert_true(ds <= 1e-8);
	free(im);
	free(mean);
	free(std);
	free(work);
}

static void test_response_direct(void **state)
{
	const int n = 60, q = 10, g = 2 * n / q - 1, nref = 3;
	int32_t ref[6] = {3, 7, 20, 1, 45, 33};
	double *im = xmalloc(sizeof(double) * n * n);
	double *spec = xmalloc(sizeof(double) * 2 * apple_score_spec_size(q) * nref);
	double *resp = xmalloc(sizeof(double) * g * g * nref), *resp2 = xmalloc(sizeof(double) * g * g * nref);
	apple_score_fft_t *f = apple_score_fft_init(q);
	double dmax = 0;
	(void)state;

	assert_non_null(f);
	for (int i = 0; i < n * n; i++)
		im[i] = urand() - 0.3;
	apple_score_refs_fft(f, im, n, q, ref, nref, spec);
	apple_score_responses(f, im, n, q, g, spec, nref, 0, g * g, resp);
	/* an arbitrary split gives the same bits */
	apple_score_responses(f, im, n, q, g, spec, nref, 0, 17, resp2);
	apple_score_responses(f, im, n, q, g, spec, nref, 17, g * g, resp2 + 17 * nref);
	assert_memory_equal(resp, resp2, sizeof(double) * g * g * nref);
	for (int k = 0; k < g * g; k++)
		for (int r = 0; r < nref; r++) {
			int wr = (k / g) * q / 2, wc = (k % g) * q / 2;
			double mx = -INFINITY, sum = 0;
			for (int dy = 0; dy < q; dy++)
				for (int dx = 0; dx < q; dx++) {
					double cc = 0;
					for (int y = 0; y < q; y++)
						for (int x = 0; x < q; x++)
							cc += im[(ref[2 * r] + (y + dy) % q) * n + ref[2 * r + 1] + (x + dx) % q] *
							      im[(wr + y) * n + wc + x];
					sum += cc;
					if (cc > mx)
						mx = cc;
				}
			double d = fabs(resp[k * nref + r] - (mx - sum / (q * q)));
			if (d > dmax)
				dmax = d;
		}
	print_message("# responses vs direct cross-correlation: max |diff| %.1e\n", dmax);
	assert_true(dmax <= 1e-12);
	/* threshold and counts */
	int32_t score[121];
	assert_true(g * g <= 121);
	apple_score_finish(resp, g * g, nref, score);
	double mn = resp[0], mx = resp[0];
	for (int t = 0; t < g * g * nref; t++) {
		mn = resp[t] < mn ? resp[t] : mn;
		mx = resp[t] > mx ? resp[t] : mx;
	}
	for (int k = 0; k < g * g; k++) {
		int c = 0;
		for (int r = 0; r < nref; r++)
			c += resp[k * nref + r] >= mn + (mx - mn) / 20;
		assert_int_equal(score[k], c);
	}
	apple_score_fft_free(&f);
	assert_null(f);
	free(im);
	free(spec);
	free(resp);
	free(resp2);
}

/* The score's SIMD variants (src/base/cpuisa.h) against the scalar loops
 * they replace (the same bits; tolerance: none), and the inverse against
 * FFTW's 2-D c2r plan: an odd last reference goes through the two-pass c2r,
 * the same bits; pairs of references share one complex row pass, within
 * 1e-13 of the largest response (double rounding of a 676-point transform,
 * ~1e-15, with room). */
/* The preprocessing's SIMD loops (low-pass row, window sums, their
 * column pass) of every variant against the obvious scalar loops, to the
 * bit: widths that leave 0 to 3 columns past the last vector, a kernel
 * with holes, a negative variance clamped to 0 (constant rows), a NaN
 * kept in its own lane.  The preprocessing and moments of whole images
 * are also checked against the reference data above. */
static void test_prep_variants(void **state)
{
	enum { NY = 40, NX = 45, Q = 6 };
	double *res = xmalloc(sizeof(double) * NY * NX);
	double *im = xmalloc(sizeof(double) * NY * NX), *ir = xmalloc(sizeof(double) * NY * NX);
	float *o32 = xmalloc(sizeof(float) * NY * NX), *o32r = xmalloc(sizeof(float) * NY * NX);
	double *row = xmalloc(sizeof(double) * NX), *a = xmalloc(sizeof(double) * NY * NX);
	double *b = xmalloc(sizeof(double) * NY * NX), *ar = xmalloc(sizeof(double) * NX);
	double *br = xmalloc(sizeof(double) * NX), *m = xmalloc(sizeof(double) * NX);
	double *sd = xmalloc(sizeof(double) * NX), *mr = xmalloc(sizeof(double) * NX);
	double *sdr = xmalloc(sizeof(double) * NX);
	int ku[25], kv[25], nk = 0, ran = 0;
	double kval[25];
	(void)state;

	for (int u = -2; u <= 2; u++) /* a 5 x 5 kernel without its corners */
		for (int w = -2; w <= 2; w++)
			if (u * u + w * w < 8) {
				ku[nk] = u;
				kv[nk] = w;
				kval[nk++] = urand() - 0.3;
			}
	for (int k = 0; k < NY * NX; k++)
		res[k] = (float)(100 * urand() - 20); /* float32 values */
	for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
		const apple_score_simd_t *v = apple_score_simd(isa);
		if (v == NULL)
			continue;
		ran++;
		for (int j1 = NX - 6; j1 >= NX - 9; j1--) { /* 0 .. 3 past the vectors */
			for (int i = 2; i < NY - 2; i++) {
				for (int j = 2; j < j1; j++) {
					double acc = 0.0;
					for (int t = 0; t < nk; t++)
						acc += kval[t] * res[(i + ku[t]) * NX + j + kv[t]];
					ir[i * NX + j] = acc;
					o32r[i * NX + j] = (float)acc;
				}
				v->lowpass_row(res, NX, i, 2, j1, nk, ku, kv, kval, im, o32);
				assert_memory_equal(im + i * NX + 2, ir + i * NX + 2,
						    sizeof(double) * (size_t)(j1 - 2));
				assert_memory_equal(o32 + i * NX + 2, o32r + i * NX + 2,
						    sizeof(float) * (size_t)(j1 - 2));
			}
		}
		for (int nw = NX - Q + 1; nw >= NX - Q - 2; nw--) {
			for (int r = 0; r < NY; r++) {
				for (int x = 0; x < NX; x++)
					row[x] = r == 3 ? 7.25 : r == 5 && x == 9 ? NAN : 50 * urand() - 10;
				v->window_sums(row, nw, Q, a + (size_t)r * nw, b + (size_t)r * nw);
				for (int c = 0; c < nw; c++) {
					double sa = 0.0, sb = 0.0;
					for (int k = 0; k < Q; k++) {
						sa += row[c + k];
						sb += row[c + k] * row[c + k];
					}
					ar[c] = sa;
					br[c] = sb;
				}
				assert_memory_equal(a + (size_t)r * nw, ar, sizeof(double) * (size_t)nw);
				assert_memory_equal(b + (size_t)r * nw, br, sizeof(double) * (size_t)nw);
			}
			/* rows 3 .. 3+Q-1 of a window holding the constant row alone are
			 * not constant; make a block of constant rows for the clamp */
			for (int r = 20; r < 20 + Q; r++)
				for (int c = 0; c < nw; c++) {
					a[(size_t)r * nw + c] = 6 * 7.25;
					b[(size_t)r * nw + c] = 6 * 7.25 * 7.25 + (c % 3 == 0 ? -1e-12 : 0.0);
				}
			const double inv = 1.0 / (Q * Q);
			for (int r = 0; r + Q <= NY; r++) {
				v->window_cols(a, b, nw, r, Q, inv, m, sd);
				for (int c = 0; c < nw; c++) {
					double sa = 0.0, sb = 0.0;
					for (int k = 0; k < Q; k++) {
						sa += a[(size_t)(r + k) * nw + c];
						sb += b[(size_t)(r + k) * nw + c];
					}
					double mu = sa * inv, var = sb * inv - mu * mu;
					mr[c] = mu;
					sdr[c] = sqrt(var > 0.0 ? var : 0.0);
				}
				for (int c = 0; c < nw; c++) { /* NaN == NaN by bits */
					assert_memory_equal(&m[c], &mr[c], sizeof(double));
					assert_memory_equal(&sd[c], &sdr[c], sizeof(double));
				}
				if (r == 20)
					assert_true(sd[0] == 0.0); /* clamped */
			}
		}
	}
	assert_true(ran > 0);
	free(res);
	free(im);
	free(ir);
	free(o32);
	free(o32r);
	free(row);
	free(a);
	free(b);
	free(ar);
	free(br);
	free(m);
	free(sd);
	free(mr);
	free(sdr);
}

/* A 160 x 160 image's responses for q (5 references: an odd count, not a
 * multiple of any lane width) through one route of apple_score_responses()
 * against FFTW's 2-D c2r of each product, max, minus P[0], over q^2:
 * within 1e-13 of the largest response.  FFTW's route pairs references,
 * so its odd last one goes through the two-pass c2r alone: bit-identical
 * to the 2-D plan at q = 26, where that plan runs the same codelets (it
 * happens at 6, 10, 30, 34, 46 too, not at 28 or 50: FFTW's choice). */
static void check_inverse(int q, int lanes)
{
	enum { N = 160, NREF = 5 };
	const int g = 2 * N / q - 1, ns = (int)apple_score_spec_size(q);
	const int32_t ref[2 * NREF] = { 5, 9, 70, 41, 33, 88, 60, 60, 0, 0 };
	double *im = xmalloc(sizeof(double) * N * N);
	double *spec = xmalloc(sizeof(double) * 2 * ns * NREF);
	double *resp = xmalloc(sizeof(double) * g * g * NREF);
	fftw_complex *in = fftw_malloc(sizeof(fftw_complex) * ns), *wsp = fftw_malloc(sizeof(fftw_complex) * ns);
	double *real = fftw_malloc(sizeof(double) * q * q);
	apple_score_fft_t *f = apple_score_fft_init(q);
	assert_non_null(f);
	apple_score_fft_set_lanes(f, lanes);
	if (lanes && !apple_score_fft_lanes(f)) {
		assert_int_equal(apple_score_lane_m(q), 0);
		print_message("# inverse q = %d: no lanes route (as documented)\n", q);
		goto out;
	}
	if (!lanes)
		assert_int_equal(apple_score_fft_lanes(f), 0);
	for (int i = 0; i < N * N; i++)
		im[i] = urand() - 0.3;
	apple_score_refs_fft(f, im, N, q, ref, NREF, spec);
	for (int i = 0; i < g * g * NREF; i++)
		resp[i] = NAN;
	apple_score_responses(f, im, N, q, g, spec, NREF, 0, g * g, resp);
	fftw_plan fwd = fftw_plan_dft_r2c_2d(q, q, real, wsp, FFTW_ESTIMATE);
	fftw_plan inv = fftw_plan_dft_c2r_2d(q, q, in, real, FFTW_ESTIMATE);
	int same = 0, same_odd = 0;
	double dmax = 0, rmax = 0;
	for (int k = 0; k < g * g; k++) {
		for (int y = 0; y < q; y++)
			memcpy(real + y * q, im + ((k / g) * q / 2 + y) * N + (k % g) * q / 2,
			       sizeof(double) * q);
		fftw_execute(fwd);
		for (int r = 0; r < NREF; r++) {
			const double *Rr = spec + 2 * ns * r, *Wk = (const double *)wsp;
			for (int t = 0; t < ns; t++) {
				in[t][0] = Rr[2 * t] * Wk[2 * t] + Rr[2 * t + 1] * Wk[2 * t + 1];
				in[t][1] = Rr[2 * t + 1] * Wk[2 * t] - Rr[2 * t] * Wk[2 * t + 1];
			}
			double p0 = in[0][0];
			fftw_execute(inv);
			double m = real[0];
			for (int t = 1; t < q * q; t++)
				m = real[t] > m ? real[t] : m;
			double want = (m - p0) * (1.0 / (q * q)), got = resp[k * NREF + r];
			int eq = memcmp(&want, &got, sizeof(double)) == 0;
			same += eq;
			same_odd += eq && r == NREF - 1;
			dmax = fmax(dmax, isnan(got) ? INFINITY : fabs(got - want));
			rmax = fmax(rmax, fabs(want));
		}
	}
	print_message("# inverse q = %d, %s route: %d of %d responses bit-identical to the 2-D "
		      "plan's, max |diff| %.1e of max |response| %.1e\n", q, lanes ? "lanes" : "fftw",
		      same, g * g * NREF, dmax, rmax);
	if (!lanes && q == 26) /* FFTW's 2-D plan runs the two passes' codelets here */
		assert_int_equal(same_odd, g * g);
	assert_true(dmax <= 1e-13 * rmax);
	fftw_destroy_plan(fwd);
	fftw_destroy_plan(inv);
out:
	apple_score_fft_free(&f);
	fftw_free(in);
	fftw_free(wsp);
	fftw_free(real);
	free(im);
	free(spec);
	free(resp);
}

/* Every variant's lane_pairs() on the same references (packed at its
 * width, zeros past the last) and queries: bit-identical results, every q
 * of the route; a q outside it answers -1. */
static void check_lane_variants(void)
{
	enum { NREF = 7, NQ = 3 };
	int nroute = 0;
	for (int q = 4; q <= 64; q += 2) {
		const int m = apple_score_lane_m(q);
		const size_t ns = (size_t)q * (q / 2 + 1);
		double tab[APPLE_LANE_TAB], first[NQ][NREF], *R = xmalloc(sizeof(double) * 2 * ns * NREF);
		double *Wq = xmalloc(sizeof(double) * 2 * ns * NQ), *Rl = xmalloc(sizeof(double) * 8 * ns);
		double *Y = xmalloc(sizeof(double) * 8 * ns);
		int ran = 0;
		nroute += m > 0;
		apple_score_lane_tab(m > 0 ? m : 3, tab);
		for (size_t i = 0; i < 2 * ns * NREF; i++)
			R[i] = urand() - 0.5;
		for (size_t i = 0; i < 2 * ns * NQ; i++)
			Wq[i] = urand() - 0.5;
		for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
			const apple_score_simd_t *v = apple_score_simd(isa);
			if (v == NULL)
				continue;
			const int w = v->width;
			for (int g = 0; g * w < NREF; g++) {
				for (int l = 0; l < w; l++)
					for (size_t e = 0; e < 2 * ns; e++) /* re block, im block */
						Rl[e * w + l] = g * w + l < NREF ? R[2 * ns * (g * w + l) + e] : 0.0;
				for (int k = 0; k < NQ; k++) {
					double out[4];
					int rc = v->lane_pairs(q, tab, Rl, Wq + 2 * ns * k, Wq + 2 * ns * k + ns,
							       Y, 1.0 / (q * q), out);
					if (m == 0) {
						assert_int_equal(rc, -1);
						continue;
					}
					assert_int_equal(rc, 0);
					for (int l = 0; l < w && g * w + l < NREF; l++) {
						if (ran == 0)
							first[k][g * w + l] = out[l];
						else
							assert_memory_equal(&first[k][g * w + l], &out[l],
									    sizeof(double));
					}
				}
			}
			ran++;
		}
		assert_true(ran >= 1);
		free(R);
		free(Wq);
		free(Rl);
		free(Y);
	}
	assert_int_equal(nroute, 23); /* 2m: m = 3..23, 29, 31; 4m: 3..13; 8m: 3..7; 48 */
	print_message("# lanes: every variant's responses bit-identical, all %d q of the route\n",
		      nroute);
}

static void test_score_variants(void **state)
{
	enum { NS = 364, NMAX = 700 };
	double *R = xmalloc(sizeof(double) * 2 * NS), *W = xmalloc(sizeof(double) * 2 * NS);
	double *P = xmalloc(sizeof(double) * 2 * NS), *Pr = xmalloc(sizeof(double) * 2 * NS);
	double *R2 = xmalloc(sizeof(double) * 2 * NS), *P2 = xmalloc(sizeof(double) * 2 * NS);
	double *Pr2 = xmalloc(sizeof(double) * 2 * NS);
	double *a = xmalloc(sizeof(double) * NMAX);
	static const size_t sizes[] = { 1, 2, 3, 5, 182, 364 };
	int ran = 0;
	(void)state;

	for (int i = 0; i < 2 * NS; i++) {
		R[i] = urand() - 0.5;
		W[i] = 3 * urand() - 1.5;
	}
	for (int i = 0; i < 2 * NS; i++)
		R2[i] = 2 * urand() - 1;
	for (int t = 0; t < 2 * NS; t += 2) {
		Pr[t] = R[t] * W[t] + R[t + 1] * W[t + 1];
		Pr[t + 1] = R[t + 1] * W[t] - R[t] * W[t + 1];
		Pr2[t] = R2[t] * W[t] + R2[t + 1] * W[t + 1];
		Pr2[t + 1] = R2[t + 1] * W[t] - R2[t] * W[t + 1];
	}
	for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
		const apple_score_simd_t *v = apple_score_simd(isa);
		if (v == NULL) {
			print_message("# variant %s: not on this CPU or build, not run\n", sp_isa_name(isa));
			continue;
		}
		for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
			memset(P, 0xAA, sizeof(double) * 2 * NS);
			/* one product, then two (the second of R against W: Pr) */
			for (size_t t = 0; t < 2 * NS; t++)
				P2[t] = NAN;
			v->product(R, NULL, W, P, P2, sizes[z]);
			assert_memory_equal(P, Pr, sizeof(double) * 2 * sizes[z]);
			for (size_t t = 0; t < 2 * NS; t++)
				assert_true(isnan(P2[t])); /* P2 untouched */
			memset(P, 0xAA, sizeof(double) * 2 * NS);
			v->product(R2, R, W, P, P2, sizes[z]);
			assert_memory_equal(P, Pr2, sizeof(double) * 2 * sizes[z]);
			assert_memory_equal(P2, Pr, sizeof(double) * 2 * sizes[z]);
			/* nothing written past ns values */
			if (sizes[z] < NS) {
				assert_memory_not_equal(P + 2 * sizes[z], Pr2 + 2 * sizes[z], sizeof(double));
				assert_memory_not_equal(P2 + 2 * sizes[z], Pr + 2 * sizes[z], sizeof(double));
			}
		}
		for (size_t n = 1; n <= NMAX; n += n < 40 ? 1 : 219) {
			for (int pos = 0; pos < 3; pos++) {
				for (size_t t = 0; t < n; t++)
					a[t] = -1 - urand();
				size_t at = pos == 0 ? 0 : pos == 1 ? n - 1 : (size_t)(urand() * (double)n) % n;
				a[at] = -0.5;
				assert_true(v->max_of(a, n) == -0.5);
			}
		}
		/* max2_of: the real and the imaginary parts' maxima, anywhere */
		for (size_t n = 1; 2 * n <= NMAX; n += n < 40 ? 1 : 113) {
			for (int pos = 0; pos < 3; pos++) {
				for (size_t t = 0; t < 2 * n; t++)
					a[t] = -1 - urand();
				size_t at = pos == 0 ? 0 : pos == 1 ? n - 1 : (size_t)(urand() * (double)n) % n;
				size_t ai = (at * 7 + (size_t)pos) % n;
				a[2 * at] = -0.5;
				a[2 * ai + 1] = -0.25;
				double m[2];
				v->max2_of(a, n, m);
				assert_true(m[0] == -0.5 && m[1] == -0.25);
			}
		}
		/* pack_row: two half rows as one full row, q even and odd */
		for (int qq = 2; qq <= 30; qq++) {
			double y1[2 * 16], y2[2 * 16], z[2 * 30], zr[2 * 30];
			for (int t = 0; t < 2 * (qq / 2 + 1); t++) {
				y1[t] = urand() - 0.5;
				y2[t] = urand() - 0.5;
			}
			for (int t = 0; t < 2 * qq; t++)
				z[t] = zr[t] = NAN;
			zr[0] = y1[0];
			zr[1] = y2[0];
			if (qq % 2 == 0) {
				zr[qq] = y1[qq];
				zr[qq + 1] = y2[qq];
			}
			for (int k = 1; 2 * k < qq; k++) { /* Y1 + i Y2, and its conjugate mirror */
				zr[2 * k] = y1[2 * k] - y2[2 * k + 1];
				zr[2 * k + 1] = y1[2 * k + 1] + y2[2 * k];
				zr[2 * (qq - k)] = y1[2 * k] + y2[2 * k + 1];
				zr[2 * (qq - k) + 1] = y2[2 * k] - y1[2 * k + 1];
			}
			v->pack_row(y1, y2, z, qq);
			assert_memory_equal(z, zr, sizeof(double) * 2 * qq);
		}
		print_message("# variant %s: product, maxima and row packing as the scalar loops\n",
			      sp_isa_name(isa));
		ran++;
	}
	assert_true(ran >= 1);

	/* the inverse (apple_score_responses) against the 2-D plan, both
	 * routes: q = 2m, 4m (12, 28, 52) and 8m (24, 40, 56) with m odd (34,
	 * 46, 58 and 62: FFTW's route through Rader's algorithm), 48 (16 x 3);
	 * 8, 16, 32, 50, 54 and 64 have no lanes route */
	static const int qs[] = { 26, 10, 30, 6, 34, 46, 58, 62, 12, 28, 52, 24, 40, 56, 16, 32, 48, 8, 50, 54, 64 };
	for (size_t qi = 0; qi < sizeof qs / sizeof *qs; qi++)
		for (int lanes = 1; lanes >= 0; lanes--)
			check_inverse(qs[qi], lanes);
	check_lane_variants();

	free(R);
	free(W);
	free(P);
	free(Pr);
	free(R2);
	free(P2);
	free(Pr2);
	free(a);
}

static void test_erosion_definition(void **state)
{
	const int h = 41, w = 53;
	uint8_t *a = xmalloc(h * w);
	int32_t *d2 = xmalloc(sizeof(int32_t) * h * w);
	int32_t *work = xmalloc(sizeof(int32_t) * ((h + 2) * (w + 2) + 3 * (w + 2) + 6));
	(void)state;

	for (int trial = 0; trial < 3; trial++) {
		double dens = 0.9 + 0.04 * trial;
		for (int i = 0; i < h * w; i++)
			a[i] = urand() < dens;
		apple_edt2(a, h, w, d2, work);
		for (int r = 1; r <= 6; r++)
			for (int y = 0; y < h; y++)
				for (int x = 0; x < w; x++) {
					int fits = 1; /* disk erosion, outside counts as 0 */
					for (int dy = -r; dy <= r && fits; dy++)
						for (int dx = -r; dx <= r && fits; dx++) {
							if (dx * dx + dy * dy > r * r)
								continue;
							int yy = y + dy, xx = x + dx;
							fits = yy >= 0 && yy < h && xx >= 0 && xx < w &&
							       a[yy * w + xx];
						}
					assert_int_equal(d2[y * w + x] > r * r, fits);
				}
	}
	free(a);
	free(d2);
	free(work);
}

/* apple_edt2() against the definition, value for value: the squared
 * distance from each pixel to the nearest 0 pixel of the image padded by
 * one 0 all round, by a search over every 0, on images from nearly all 1
 * (long parabola stacks in the row phase) to sparse, in odd shapes. */
static void test_edt_brute(void **state)
{
	const int shapes[4][2] = { { 37, 61 }, { 64, 9 }, { 5, 90 }, { 73, 73 } };
	(void)state;
	for (int sh = 0; sh < 4; sh++) {
		const int h = shapes[sh][0], w = shapes[sh][1];
		uint8_t *a = xmalloc((size_t)h * w);
		int32_t *d2 = xmalloc(sizeof(int32_t) * (size_t)h * w);
		int32_t *work = xmalloc(sizeof(int32_t) *
					((size_t)(h + 2) * (w + 2) + 3 * (size_t)(h > w ? h : w) + 6));
		for (int trial = 0; trial < 4; trial++) {
			const double dens = trial == 3 ? 1.0 : 0.5 + 0.2 * trial; /* 1.0: all 1 */
			for (int i = 0; i < h * w; i++)
				a[i] = urand() < dens;
			apple_edt2(a, h, w, d2, work);
			for (int y = 0; y < h; y++)
				for (int x = 0; x < w; x++) {
					/* the padding: rows -1 and h, columns -1 and w */
					long long best = (long long)(y + 1) * (y + 1);
					long long e[3] = { (long long)(h - y) * (h - y),
							   (long long)(x + 1) * (x + 1),
							   (long long)(w - x) * (w - x) };
					for (int k = 0; k < 3; k++)
						best = e[k] < best ? e[k] : best;
					for (int yy = 0; yy < h; yy++)
						for (int xx = 0; xx < w; xx++)
							if (!a[yy * w + xx]) {
								long long d = (long long)(yy - y) * (yy - y) +
									      (long long)(xx - x) * (xx - x);
								best = d < best ? d : best;
							}
					if (d2[y * w + x] != best)
						print_message("# %d x %d, trial %d, (%d, %d): %d, want %lld\n",
							      h, w, trial, y, x, d2[y * w + x], best);
					assert_int_equal(d2[y * w + x], best);
				}
		}
		free(a);
		free(d2);
		free(work);
	}
}

static void test_label_floodfill(void **state)
{
	const int h = 47, w = 39;
	uint8_t *a = xmalloc(h * w);
	int32_t *lab = xmalloc(sizeof(int32_t) * h * w), *par = xmalloc(sizeof(int32_t) * h * w);
	int32_t *ref = xmalloc(sizeof(int32_t) * h * w), *stack = xmalloc(sizeof(int32_t) * h * w);
	(void)state;

	for (int trial = 0; trial < 4; trial++) {
		for (int i = 0; i < h * w; i++)
			a[i] = urand() < 0.3 + 0.1 * trial;
		int n = apple_label8(a, h, w, lab, par), nr = 0;
		memset(ref, 0, sizeof(int32_t) * h * w);
		for (int p = 0; p < h * w; p++) {
			if (!a[p] || ref[p])
				continue;
			int sp = 0;
			ref[p] = ++nr;
			stack[sp++] = p;
			while (sp > 0) {
				int c = stack[--sp], y = c / w, x = c % w;
				for (int dy = -1; dy <= 1; dy++)
					for (int dx = -1; dx <= 1; dx++) {
						int yy = y + dy, xx = x + dx;
						if (yy < 0 || yy >= h || xx < 0 || xx >= w)
							continue;
						if (a[yy * w + xx] && !ref[yy * w + xx]) {
							ref[yy * w + xx] = nr;
							stack[sp++] = yy * w + xx;
						}
					}
			}
		}
		assert_int_equal(n, nr);
		assert_memory_equal(lab, ref, sizeof(int32_t) * h * w);
	}
	free(a);
	free(lab);
	free(par);
	free(ref);
	free(stack);
}

/* The reference's route for the moments (FFT convolution with a zero-padded
 * box filter, size n + q - 1) against apple_moments() on the 2k image. */
static void test_moments_fft_route(void **state)
{
	const int n = C.s.nx, q = C.s.query, nw = C.s.nwx, N = n + q - 1, nh = N / 2 + 1;
	double *a = fftw_malloc(sizeof(double) * N * N), *e[2];
	fftw_complex *fa = fftw_malloc(sizeof(fftw_complex) * N * nh);
	fftw_complex *fb = fftw_malloc(sizeof(fftw_complex) * N * nh);
	fftw_plan fwd = fftw_plan_dft_r2c_2d(N, N, a, fa, FFTW_ESTIMATE);
	fftw_plan fwdb = fftw_plan_dft_r2c_2d(N, N, a, fb, FFTW_ESTIMATE);
	fftw_plan inv = fftw_plan_dft_c2r_2d(N, N, fa, a, FFTW_ESTIMATE);
	double dm = 0, ds = 0, mref = 0, sref = 0;
	(void)state;

	memset(a, 0, sizeof(double) * N * N);
	for (int i = 0; i < q; i++)
		for (int j = 0; j < q; j++)
			a[i * N + j] = 1.0 / (q * q);
	fftw_execute(fwdb);
	for (int pw = 0; pw < 2; pw++) {
		memset(a, 0, sizeof(double) * N * N);
		for (int i = 0; i < n; i++)
			for (int j = 0; j < n; j++) {
				double v = C.im[(size_t)i * n + j];
				a[i * N + j] = pw ? v * v : v;
			}
		fftw_execute(fwd);
		for (int t = 0; t < N * nh; t++) {
			double re = fa[t][0] * fb[t][0] - fa[t][1] * fb[t][1];
			double im = fa[t][0] * fb[t][1] + fa[t][1] * fb[t][0];
			fa[t][0] = re / ((double)N * N);
			fa[t][1] = im / ((double)N * N);
		}
		fftw_execute(inv);
		e[pw] = xmalloc(sizeof(double) * N * N);
		memcpy(e[pw], a, sizeof(double) * N * N);
	}
	for (int r = 0; r < nw; r++)
		for (int c = 0; c < nw; c++) {
			size_t o = (size_t)(r + q - 1) * N + c + q - 1;
			double mu = e[0][o], var = e[1][o] - mu * mu, sd = sqrt(var > 0 ? var : 0);
			dm = fmax(dm, fabs(mu - C.mean[(size_t)r * nw + c]));
			ds = fmax(ds, fabs(sd - C.std[(size_t)r * nw + c]));
			mref = fmax(mref, fabs(mu));
			sref = fmax(sref, sd);
		}
	print_message("# moments, direct sums vs the reference's FFT route: max |mean diff| %.1e "
		      "(rel %.1e), max |std diff| %.1e (rel %.1e of max std)\n", dm, dm / mref, ds,
		      ds / sref);
	assert_true(dm / mref <= 1e-12);
	assert_true(ds / sref <= 1e-8);
	fftw_destroy_plan(fwd);
	fftw_destroy_plan(fwdb);
	fftw_destroy_plan(inv);
	fftw_free(a);
	fftw_free(fa);
	fftw_free(fb);
	free(e[0]);
	free(e[1]);
}

/* Flood-fill labelling (8-connected, raster order of first pixel). */
static int flood_label(const uint8_t *a, int h, int w, int32_t *ref, int32_t *stack)
{
	int nr = 0;

	memset(ref, 0, sizeof(int32_t) * h * w);
	for (int p = 0; p < h * w; p++) {
		if (!a[p] || ref[p])
			continue;
		int sp = 0;
		ref[p] = ++nr;
		stack[sp++] = p;
		while (sp > 0) {
			int c = stack[--sp], y = c / w, x = c % w;
			for (int dy = -1; dy <= 1; dy++)
				for (int dx = -1; dx <= 1; dx++) {
					int yy = y + dy, xx = x + dx;
					if (yy < 0 || yy >= h || xx < 0 || xx >= w)
						continue;
					if (a[yy * w + xx] && !ref[yy * w + xx]) {
						ref[yy * w + xx] = nr;
						stack[sp++] = yy * w + xx;
					}
				}
		}
	}
	return nr;
}

/* Disk erosion by definition, the outside counting as 0. */
static void erode_def(const uint8_t *a, int h, int w, int r, uint8_t *out)
{
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			int fits = 1;
			for (int dy = -r; dy <= r && fits; dy++)
				for (int dx = -r; dx <= r && fits; dx++) {
					if (dx * dx + dy * dy > r * r)
						continue;
					int yy = y + dy, xx = x + dx;
					fits = yy >= 0 && yy < h && xx >= 0 && xx < w && a[yy * w + xx];
				}
			out[y * w + x] = (uint8_t)fits;
		}
}

/* Hole filling by definition: background pixels that iterated 4-neighbour
 * growth from the border never reaches. */
static void fill_def(const uint8_t *a, int h, int w, uint8_t *out)
{
	uint8_t *reach = xmalloc((size_t)h * w);
	int changed = 1;

	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++)
			reach[y * w + x] = !a[y * w + x] && (y == 0 || x == 0 || y == h - 1 || x == w - 1);
	while (changed) {
		changed = 0;
		for (int y = 0; y < h; y++)
			for (int x = 0; x < w; x++) {
				int p = y * w + x;
				if (a[p] || reach[p])
					continue;
				if ((x > 0 && reach[p - 1]) || (x + 1 < w && reach[p + 1]) ||
				    (y > 0 && reach[p - w]) || (y + 1 < h && reach[p + w])) {
					reach[p] = 1;
					changed = 1;
				}
			}
	}
	for (int p = 0; p < h * w; p++)
		out[p] = !reach[p];
	free(reach);
}

static void test_morphology_definition(void **state)
{
	const int nw = 120;
	apple_sizes_t s = { .nwy = nw, .nwx = nw, .min_size = 2, .max_size = 7};
	uint8_t *seg = xmalloc(nw * nw), *out = xmalloc(nw * nw), *m8 = xmalloc(nw * nw);
	uint8_t *fil = xmalloc(nw * nw), *e = xmalloc(nw * nw), *o = xmalloc(nw * nw);
	int32_t *m32 = xmalloc(sizeof(int32_t) * apple_morphology_work_size(nw, nw));
	int32_t *lab = xmalloc(sizeof(int32_t) * nw * nw), *stack = xmalloc(sizeof(int32_t) * nw * nw);
	(void)state;

	for (int trial = 0; trial < 4; trial++) {
		/* random disks, some with holes; trial 3: all ones (the 100 x 100 rule) */
		memset(seg, trial == 3, nw * nw);
		for (int k = 0; trial < 3 && k < 40; k++) {
			int cy = (int)(urand() * nw), cx = (int)(urand() * nw), r = 1 + (int)(urand() * 11);
			int hole = urand() < 0.4 ? r / 3 : -1;
			for (int y = cy - r; y <= cy + r; y++)
				for (int x = cx - r; x <= cx + r; x++) {
					int d = (y - cy) * (y - cy) + (x - cx) * (x - cx);
					if (y < 0 || y >= nw || x < 0 || x >= nw || d > r * r)
						continue;
					seg[y * nw + x] = d > hole * hole || hole < 0;
				}
		}
		apple_morphology(&s, seg, out, m8, m32);

		fill_def(seg, nw, nw, fil);
		int full = 1;
		for (int p = 0; p < nw * nw; p++)
			full &= fil[p];
		if (full) {
			memcpy(e, seg, nw * nw);
			for (int y = 0; y < 100; y++)
				memset(e + y * nw, 0, 100);
			fill_def(e, nw, nw, fil);
		}
		erode_def(fil, nw, nw, s.min_size, e);
		erode_def(fil, nw, nw, s.max_size, o);
		int nl = flood_label(e, nw, nw, lab, stack), nkept = 0, nremoved = 0;
		uint8_t *big = xmalloc((size_t)nl + 1);
		memset(big, 0, (size_t)nl + 1);
		for (int p = 0; p < nw * nw; p++)
			if (o[p])
				big[lab[p]] = 1;
		for (int p = 0; p < nw * nw; p++)
			e[p] = e[p] && !big[lab[p]];
		for (int l = 1; l <= nl; l++)
			big[l] ? nremoved++ : nkept++;
		free(big);
		print_message("# morphology by definition, trial %d: %d components kept, %d removed\n",
			      trial, nkept, nremoved);
		assert_memory_equal(out, e, nw * nw);
	}
	free(seg);
	free(out);
	free(m8);
	free(fil);
	free(e);
	free(o);
	free(m32);
	free(lab);
	free(stack);
}

/* Blobs placed so that the two quirks show: the last component (E) is
 * never used by the reference; C and D are too close (both dropped). */
static void test_pick_quirks(void **state)
{
	const apple_sizes_t *s = &C.s;
	const int nw = s->nwx, lo = s->query / 2 - 1;
	uint8_t *seg = xmalloc((size_t)nw * nw);
	const int cen[5][2] = {{100, 100}, {100, 300}, {400, 200}, {400, 207}, {700, 700}};
	int xy[20];
	apple_params_t p = C.p;
	(void)state;

	memset(seg, 0, (size_t)nw * nw);
	for (int b = 0; b < 5; b++)
		for (int y = -2; y <= 2; y++)
			for (int x = -2; x <= 2; x++)
				seg[(size_t)(cen[b][0] + y + lo) * nw + cen[b][1] + x + lo] = 1;
	int n = pick_poisoned(&p, s, seg, xy, 10);
	assert_int_equal(n, 2);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(xy[2 * k], 2 * (cen[k][1] + 2 * lo + 1) + p.margin_left);
		assert_int_equal(xy[2 * k + 1], 2 * (cen[k][0] + 2 * lo + 1) + p.margin_top);
	}
	p.fix_quirks = 1;
	n = pick_poisoned(&p, s, seg, xy, 10);
	assert_int_equal(n, 3);
	const int want[3] = {0, 1, 4};
	for (int k = 0; k < 3; k++) {
		assert_int_equal(xy[2 * k], 2 * (cen[want[k]][1] + 2 * lo + 1) + p.margin_left);
		assert_int_equal(xy[2 * k + 1], 2 * (cen[want[k]][0] + 2 * lo + 1) + p.margin_top);
	}
	/* maxpick smaller than the count: the count is still returned */
	assert_int_equal(pick_poisoned(&p, s, seg, xy, 1), 3);

	/* A component larger than max_size^2, between the first two blobs and
	 * the others in raster order: dropped before the centres are taken,
	 * so the picks are those above in both modes (the reference labels
	 * again without it; apple_pick renumbers the labels left, which must
	 * come to the same).  Kept, it would add a centre and shift the labels
	 * of blobs 2-4. */
	const int side = s->max_size + 1, by = 150, bx = 500;
	assert_true(by + side < 400 - 2 - 1 && bx + side + lo < nw);
	for (int y = 0; y < side; y++)
		memset(seg + (size_t)(by + y + lo) * nw + bx + lo, 1, (size_t)side);
	for (int quirks = 0; quirks <= 1; quirks++) {
		p.fix_quirks = quirks;
		n = pick_poisoned(&p, s, seg, xy, 10);
		assert_int_equal(n, quirks ? 3 : 2);
		for (int k = 0; k < n; k++) {
			const int b = quirks ? want[k] : k;
			assert_int_equal(xy[2 * k], 2 * (cen[b][1] + 2 * lo + 1) + p.margin_left);
			assert_int_equal(xy[2 * k + 1], 2 * (cen[b][0] + 2 * lo + 1) + p.margin_top);
		}
	}
	free(seg);
}

/* The SVM's decision values in lanes (every variant, the chain's trained
 * model and 2k windows) against apple_svm_decision() one window at a time:
 * within 8 eps of sum |coef| (the lanes' exp is libmvec's, a few ulp from
 * exp()'s; the sums are in the same order), the variants bit-identical,
 * and every label equal where the scalar value is farther than that from
 * 0; row lengths around the lane count check the tails. */
static void test_svm_decisions(void **state)
{
	const apple_svm_t *m = C.svm;
	const int nw = C.s.nwx;
	double *d = xmalloc(sizeof(double) * (size_t)nw), *d0 = xmalloc(sizeof(double) * (size_t)nw);
	double scoef = 0.0, worst = 0.0;
	size_t near = 0, nflip = 0;
	int ran = 0;
	(void)state;

	assert_non_null(m);
	for (int i = 0; i < m->nsv; i++)
		scoef += fabs(m->coef[i]);
	const double tol = 8 * DBL_EPSILON * scoef;
	const int lens[] = { 1, 2, 3, 5, 7, nw };
	for (int isa = 0; isa < SP_ISA_COUNT; isa++) {
		const apple_score_simd_t *v = apple_score_simd(isa);
		if (v == NULL)
			continue;
		for (int r = 0; r < nw; r += (r < 4 ? 1 : 97)) {
			const double *mean = C.mean + (size_t)r * nw, *std = C.std + (size_t)r * nw;
			for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
				const int n = lens[li];
				d[n - 1] = NAN;
				v->decisions(m, mean, std, n, d);
				for (int c = 0; c < n; c++) {
					double f0 = (mean[c] - m->mu[0]) / m->scale[0];
					double f1 = (std[c] - m->mu[1]) / m->scale[1];
					double ds = apple_svm_decision(m, f0, f1), e = fabs(d[c] - ds);
					if (!(e <= tol))
						fail_msg("%s row %d window %d of %d: %.17g against %.17g",
							 sp_isa_name(isa), r, c, n, d[c], ds);
					worst = e > worst ? e : worst;
					if (n == nw && isa == 0) {
						near += fabs(ds) <= tol;
						nflip += (d[c] > 0) != (ds > 0);
					}
				}
				if (n == nw) {
					if (ran == 0 && r == 0)
						memcpy(d0, d, sizeof(double) * (size_t)nw);
					else if (r == 0)
						assert_memory_equal(d, d0, sizeof(double) * (size_t)nw);
				}
			}
		}
		ran++;
	}
	assert_true(ran >= 1);
	assert_true(nflip <= near);
	print_message("# svm decisions: %d variant(s), %d SVs, worst %.3g of sum|coef| %.3g; "
		      "%zu label(s) differ, %zu window(s) within the tolerance of 0\n",
		      ran, m->nsv, worst, scoef, nflip, near);
	free(d);
	free(d0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_params),
		cmocka_unit_test(test_rect_extends_square),
		cmocka_unit_test(test_lowpass_kernel),
		cmocka_unit_test(test_preprocess),
		cmocka_unit_test(test_score),
		cmocka_unit_test(test_svm),
		cmocka_unit_test(test_morphology),
		cmocka_unit_test(test_pick),
		cmocka_unit_test(test_pick_scores),
		cmocka_unit_test(test_moments_fft_route),
		cmocka_unit_test(test_morphology_definition),
		cmocka_unit_test(test_pick_quirks),
		cmocka_unit_test(test_moments_direct),
		cmocka_unit_test(test_response_direct),
		cmocka_unit_test(test_score_variants),
		cmocka_unit_test(test_prep_variants),
		cmocka_unit_test(test_svm_decisions),
		cmocka_unit_test(test_erosion_definition),
		cmocka_unit_test(test_edt_brute),
		cmocka_unit_test(test_label_floodfill),
	};
	char path[1024];
	FILE *f;

	if ((f = fopen(shared_path(path, sizeof path, "data/apple/synth_2k_float32.mrc"), "rb")) ==
	    NULL) {
		printf("1..0 # SKIP %s not found (set SP_SHARED)\n", path);
		return 0;
	}
	fclose(f);
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup_chain, teardown_chain);
}
