/* Unit tests of the APPLE-Picker CUDA kernels (preprocess, moments, references, FFT score, SVM, morphology) against their CPU twins. */
#define _POSIX_C_SOURCE 200809L

#include "cudatest.h"

#ifdef SP_HAVE_CUDA
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime_api.h>

#include "../codelets/apple/apple.h"
#include "../codelets/apple/mrc.h"
#include "npyread.h"
#include "testutil.h"

/*
 * DESIGN.  On ASPIRE's preprocessed 2k image (../shared/data/apple, float32
 * 924 x 924) the CPU chain runs once (moments, references, responses,
 * training set, SVM) and each CUDA twin is fed the same inputs.  Tolerances:
 * responses 1e-9 relative (the transforms' rounding, cuFFT against FFTW,
 * is ~1e-15 of the correlations' magnitude, and a response is a difference
 * of correlations: we expect ~1e-12), reference spectra 1e-12 of their
 * largest modulus; score maps after apple_score_finish() and segmentations
 * identical (they move only where a response or a decision value sits
 * within rounding of its threshold; the closest one is printed).  Small
 * random images and a synthetic SVM cover other sizes, a partial last
 * chunk, a query range not starting at 0, and more support vectors than a
 * shared-memory tile.
 */

static cudaStream_t stream;

static int setup(void **state)
{
	(void)state;
	return cudaStreamCreate(&stream) == cudaSuccess ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return cudaStreamDestroy(stream) == cudaSuccess ? 0 : -1;
}

static unsigned long long rng = 88172645463325252ULL;

static double urand(void)
{
	rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
	return (double)(rng >> 11) * 0x1p-53;
}

static void *upload(const void *h, size_t bytes)
{
	void *d = dmalloc(bytes);
	CK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream));
	return d;
}

/* ---- score ---- */

/* Runs the CUDA score (references' spectra and responses, the queries in
 * the given ranges) on im [n][n] and compares with the CPU's; returns the
 * number of differing scores. */
static int compare_score(const char *what, const double *im, int n, int q, int gx, int nq,
			 const int32_t *ref, int nref, int chunk, const int *cuts, int ncut)
{
	const size_t ns = apple_score_spec_size(q), nr = (size_t)nq * nref;
	double *spec = xmalloc(sizeof(double) * 2 * ns * nref);
	double *gspec = xmalloc(sizeof(double) * 2 * ns * nref);
	double *resp = xmalloc(sizeof(double) * nr), *gresp = xmalloc(sizeof(double) * nr);
	int32_t *score = xmalloc(sizeof(int32_t) * nq), *gscore = xmalloc(sizeof(int32_t) * nq);

	/* CPU */
	apple_score_fft_t *f = apple_score_fft_init(q);
	assert_non_null(f);
	apple_score_refs_fft(f, im, n, q, ref, nref, spec);
	apple_score_responses(f, im, n, q, gx, spec, nref, 0, nq, resp);
	apple_score_fft_free(&f);
	apple_score_finish(resp, nq, nref, score);

	/* CUDA: spectra from the CPU's (as the glue feeds them) and our own */
	apple_score_cuda_t *pl = apple_score_cuda_new(q, nref, chunk);
	assert_non_null(pl);
	size_t sb = apple_score_cuda_scratch(q, nref, chunk);
	void *d_scr = dmalloc(sb);
	double *d_im = upload(im, sizeof(double) * (size_t)n * n);
	double *d_spec = upload(spec, sizeof(double) * 2 * ns * nref);
	double *d_gspec = dmalloc(sizeof(double) * 2 * ns * nref);
	int32_t *d_ref = upload(ref, sizeof(int32_t) * 2 * nref);
	double *d_resp = dmalloc(sizeof(double) * nr);
	CK(cudaMemsetAsync(d_resp, 0xff, sizeof(double) * nr, stream)); /* NaN */
	assert_int_equal(apple_score_refs_fft_cuda(pl, d_im, n, q, d_ref, nref, d_gspec, d_scr,
						   (struct CUstream_st *)stream),
			 0);
	for (int c = 0; c < ncut - 1; c++)
		assert_int_equal(apple_score_responses_cuda(pl, d_im, n, q, gx, d_spec, nref, cuts[c],
							    cuts[c + 1],
							    d_resp + (size_t)cuts[c] * nref, d_scr,
							    (struct CUstream_st *)stream),
				 0);
	CK(cudaMemcpyAsync(gspec, d_gspec, sizeof(double) * 2 * ns * nref, cudaMemcpyDeviceToHost,
			   stream));
	CK(cudaMemcpyAsync(gresp, d_resp, sizeof(double) * nr, cudaMemcpyDeviceToHost, stream));
	CK(cudaStreamSynchronize(stream));

	double smax = 0, sdiff = 0;
	for (size_t t = 0; t < 2 * ns * nref; t++) {
		smax = fmax(smax, fabs(spec[t]));
		sdiff = fmax(sdiff, fabs(spec[t] - gspec[t]));
	}
	double rmax = 0, rel = 0, mn = resp[0], mx = resp[0];
	size_t nonfinite = 0;
	for (size_t t = 0; t < nr; t++) {
		rmax = fmax(rmax, fabs(resp[t]));
		mn = fmin(mn, resp[t]);
		mx = fmax(mx, resp[t]);
	}
	for (size_t t = 0; t < nr; t++) {
		nonfinite += !isfinite(gresp[t]);
		/* relative, floored at 1e-6 of the cube's largest (a response ~0) */
		double d = fabs(gresp[t] - resp[t]) / fmax(fabs(resp[t]), 1e-6 * rmax);
		rel = d > rel ? d : rel;
	}
	apple_score_finish(gresp, nq, nref, gscore);
	double thr = mn + (mx - mn) / 20, near = INFINITY;
	for (size_t t = 0; t < nr; t++)
		near = fmin(near, fabs(resp[t] - thr) / fmax(fabs(thr), 1e-300));
	int ndiff = 0;
	for (int k = 0; k < nq; k++)
		ndiff += score[k] != gscore[k];
	print_message("# %s: %d queries x %d refs, chunk %d; spectra max |gpu - cpu| %.3g (of "
		      "%.3g); responses max rel diff %.3g, %zu non-finite; closest response to "
		      "the threshold %.3g relative; %d/%d scores differ\n",
		      what, nq, nref, chunk, sdiff, smax, rel, nonfinite, near, ndiff, nq);
	assert_int_equal(nonfinite, 0);
	assert_true(sdiff <= 1e-12 * smax);
	assert_true(rel <= 1e-9);

	CK(cudaFree(d_scr));
	CK(cudaFree(d_im));
	CK(cudaFree(d_spec));
	CK(cudaFree(d_gspec));
	CK(cudaFree(d_ref));
	CK(cudaFree(d_resp));
	apple_score_cuda_free(&pl);
	assert_null(pl);
	free(spec);
	free(gspec);
	free(resp);
	free(gresp);
	free(score);
	free(gscore);
	return ndiff;
}

/* ---- classification ---- */

/* Classifies rows [r0, r1) of mean/std [nw][nw] both ways, in two launches
 * split at rm; returns the number of differing labels. */
static size_t compare_classify(const char *what, const apple_svm_t *m, const double *mean,
			       const double *std, int nw, int r0, int rm, int r1)
{
	size_t nwin = (size_t)(r1 - r0) * nw, nsvc = apple_svm_cuda_size(m);
	uint8_t *seg = xmalloc(nwin), *gseg = xmalloc(nwin);
	double *svc = xmalloc(sizeof(double) * nsvc);

	apple_classify_rows(m, mean, std, nw, r0, r1, seg);
	apple_svm_cuda_pack(m, svc);
	double *d_svc = upload(svc, sizeof(double) * nsvc);
	double *d_mean = upload(mean, sizeof(double) * (size_t)nw * nw);
	double *d_std = upload(std, sizeof(double) * (size_t)nw * nw);
	uint8_t *d_seg = dmalloc(nwin);
	CK(cudaMemsetAsync(d_seg, 0x55, nwin, stream));
	assert_int_equal(apple_classify_rows_cuda(m, d_svc, d_mean, d_std, nw, r0, rm, d_seg,
						  (struct CUstream_st *)stream),
			 0);
	assert_int_equal(apple_classify_rows_cuda(m, d_svc, d_mean, d_std, nw, rm, r1,
						  d_seg + (size_t)(rm - r0) * nw,
						  (struct CUstream_st *)stream),
			 0);
	CK(cudaMemcpyAsync(gseg, d_seg, nwin, cudaMemcpyDeviceToHost, stream));
	CK(cudaStreamSynchronize(stream));

	size_t nd = 0, npart = 0;
	double worst = 0;
	for (size_t i = 0; i < nwin; i++) {
		npart += seg[i];
		if (seg[i] != gseg[i]) {
			size_t o = (size_t)r0 * nw + i;
			double f0 = (mean[o] - m->mu[0]) / m->scale[0];
			double f1 = (std[o] - m->mu[1]) / m->scale[1];
			worst = fmax(worst, fabs(apple_svm_decision(m, f0, f1)));
			nd++;
		}
	}
	print_message("# %s: %d SVs, %zu windows (particle fraction %.4f), %zu labels differ "
		      "(largest |decision| among them %.3g)\n",
		      what, m->nsv, nwin, (double)npart / (double)nwin, nd, worst);
	CK(cudaFree(d_svc));
	CK(cudaFree(d_mean));
	CK(cudaFree(d_std));
	CK(cudaFree(d_seg));
	free(seg);
	free(gseg);
	free(svc);
	return nd;
}

/* ---- the 2k image ---- */

/* The sizes of the shared 2k micrograph with particle_size 78. */
static void sizes_2k(apple_sizes_t *s)
{
	apple_params_t p = { .particle_size = 78 };
	sp_err_t err;
	apple_params_defaults(&p);
	assert_int_equal(apple_params_derive(&p, 2048, 2048, s, &err), 0);
}

static void test_2k(void **state)
{
	apple_sizes_t s;
	(void)state;

	sizes_2k(&s);
	const int n = s.nx, nw = s.nwx, q = s.query, nq = s.gy * s.gx, nref = s.nref;
	float *pre = npy_read_shared("data/apple/ref_2k_preprocessed_f32.npy", "<f4", n, n, sizeof(float));
	double *im = xmalloc(sizeof(double) * (size_t)n * n);
	for (size_t i = 0; i < (size_t)n * n; i++)
		im[i] = pre[i];
	free(pre);

	double *mean = xmalloc(sizeof(double) * (size_t)nw * nw);
	double *std = xmalloc(sizeof(double) * (size_t)nw * nw);
	double *work = xmalloc(sizeof(double) * 2 * (size_t)n * nw);
	apple_moments(im, n, n, q, mean, std, work);
	free(work);
	int32_t *ref = xmalloc(sizeof(int32_t) * 2 * (size_t)nref);
	apple_refs_select(&s, mean, std, ref);

	/* score: chunks that fit 256 MB, in two calls as two tasks would */
	int chunk = apple_score_cuda_chunk(q, nref, nq, (size_t)256 << 20);
	assert_true(apple_score_cuda_scratch(q, nref, chunk) <= (size_t)256 << 20);
	int cuts[] = { 0, nq / 2 + 1, nq };
	assert_int_equal(compare_score("2k score", im, n, q, s.gx, nq, ref, nref, chunk, cuts, 3),
			 0);

	/* SVM from the CPU chain, then both classifications */
	double *resp = xmalloc(sizeof(double) * (size_t)nq * nref);
	int32_t *score = xmalloc(sizeof(int32_t) * (size_t)nq);
	double *spec = xmalloc(sizeof(double) * 2 * apple_score_spec_size(q) * (size_t)nref);
	apple_score_fft_t *f = apple_score_fft_init(q);
	assert_non_null(f);
	apple_score_refs_fft(f, im, n, q, ref, nref, spec);
	apple_score_responses(f, im, n, q, s.gx, spec, nref, 0, nq, resp);
	apple_score_fft_free(&f);
	apple_score_finish(resp, nq, nref, score);
	double *feat = xmalloc(sizeof(double) * 2 * (size_t)(n / q) * (n / q));
	unsigned char *w8 = xmalloc(2 * (size_t)n * n);
	int npos, nneg;
	assert_int_equal(apple_training_set(&s, im, score, s.tau1, s.tau2, feat, &npos, &nneg, w8),
			 0);
	apple_svm_t *m = apple_svm_new(feat, npos, nneg);
	assert_non_null(m);
	assert_int_equal(compare_classify("2k classification", m, mean, std, nw, 0, nw / 3, nw), 0);

	apple_svm_free(&m);
	free(feat);
	free(w8);
	free(resp);
	free(score);
	free(spec);
	free(ref);
	free(mean);
	free(std);
	free(im);
}

/* ---- small random images, a synthetic SVM ---- */

static void test_random_score(void **state)
{
	static const struct { int n, q, nref, chunk; } cfg[] = {
		{ 80, 14, 7, 9 },   /* q not a multiple of 4, partial last chunk */
		{ 64, 16, 20, 1 },  /* chunk of one query, more references than queries/chunk */
		{ 100, 26, 5, 500 }, /* chunk larger than the range */
	};
	(void)state;

	/* both routes: the fused kernel (q = 14, 26), then cuFFT's for all */
	for (int route = 0; route < 2; route++)
	for (size_t c = 0; c < sizeof cfg / sizeof *cfg; c++) {
		const int n = cfg[c].n, q = cfg[c].q, nref = cfg[c].nref;
		if (route == 1)
			setenv("STARPIPE_APPLE_SCORE", "fftw", 1);
		assert_int_equal(apple_score_cuda_fused(q), route == 0 && q % 4 == 2 ? q / 2 : 0);
		const int g = 2 * n / q - 1, nq = g * g;
		double *im = xmalloc(sizeof(double) * (size_t)n * n);
		int32_t *ref = xmalloc(sizeof(int32_t) * 2 * (size_t)nref);
		for (size_t i = 0; i < (size_t)n * n; i++)
			im[i] = (double)(float)(1000.0 + 50.0 * (urand() - 0.5));
		for (int r = 0; r < nref; r++) {
			ref[2 * r] = (int32_t)(urand() * (n - q + 1));
			ref[2 * r + 1] = (int32_t)(urand() * (n - q + 1));
		}
		int cuts[] = { 0, 3, nq / 2, nq };
		char what[64];
		snprintf(what, sizeof what, "random %dx%d q %d, %s route", n, n, q,
			 apple_score_cuda_fused(q) ? "fused" : "cuFFT");
		assert_int_equal(compare_score(what, im, n, q, g, nq, ref, nref, cfg[c].chunk, cuts,
					       4),
				 0);
		free(im);
		free(ref);
		unsetenv("STARPIPE_APPLE_SCORE");
	}
	/* mismatched plan set, empty range */
	apple_score_cuda_t *pl = apple_score_cuda_new(14, 7, 4);
	assert_non_null(pl);
	assert_int_equal(apple_score_responses_cuda(pl, NULL, 80, 16, 10, NULL, 7, 0, 1, NULL,
						    (void *)1, NULL),
			 SP_EINVAL);
	assert_int_equal(apple_score_responses_cuda(pl, NULL, 80, 14, 10, NULL, 6, 0, 1, NULL,
						    (void *)1, NULL),
			 SP_EINVAL);
	assert_int_equal(apple_score_responses_cuda(pl, NULL, 80, 14, 10, NULL, 7, 5, 5, NULL,
						    (void *)1, NULL),
			 0);
	apple_score_cuda_free(&pl);
	assert_null(apple_score_cuda_new(14, 0, 4));
}

static void test_random_classify(void **state)
{
	const int nw = 60, nsv = 300; /* more SVs than a tile */
	double *mean = xmalloc(sizeof(double) * nw * nw), *std = xmalloc(sizeof(double) * nw * nw);
	apple_svm_t m = { .mu = { 1000, 20 }, .scale = { 3, 2 }, .gamma = 0.5, .rho = 0.05,
			  .nsv = nsv };
	(void)state;

	m.sv = xmalloc(sizeof(double) * 2 * nsv);
	m.coef = xmalloc(sizeof(double) * nsv);
	for (int i = 0; i < nsv; i++) {
		m.sv[2 * i] = 4 * (urand() - 0.5);
		m.sv[2 * i + 1] = 4 * (urand() - 0.5);
		m.coef[i] = 2 * (urand() - 0.5);
	}
	for (int i = 0; i < nw * nw; i++) {
		mean[i] = 1000 + 12 * (urand() - 0.5);
		std[i] = 20 + 8 * (urand() - 0.5);
	}
	for (int lp = 0; lp <= 1; lp++) {
		m.label_pos = lp;
		assert_int_equal(compare_classify("random classification", &m, mean, std, nw, 5, 17,
						  53),
				 0);
	}
	/* no rows: nothing launched; bad range: SP_EINVAL */
	assert_int_equal(apple_classify_rows_cuda(&m, NULL, NULL, NULL, nw, 4, 4, NULL, NULL), 0);
	assert_int_equal(apple_classify_rows_cuda(&m, NULL, NULL, NULL, nw, 5, 4, NULL, NULL),
			 SP_EINVAL);
	free(m.sv);
	free(m.coef);
	free(mean);
	free(std);
}

/* ---- preprocess, moments, references, morphology: bit for bit ---- */

static void *download(const void *d, size_t bytes)
{
	void *h = xmalloc(bytes);
	CK(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, stream));
	CK(cudaStreamSynchronize(stream));
	return h;
}

/* The whole prepare chain on the 2k micrograph (the glue's CUDA prepare
 * task): preprocess, moments, references, each compared with the CPU's. */
static void test_prepare_2k(void **state)
{
	char path[1024];
	apple_params_t p = { .particle_size = 78 };
	apple_sizes_t s;
	apple_mrc_t hdr;
	float *mic = NULL;
	sp_err_t err = { 0 };
	(void)state;

	assert_int_equal(apple_mrc_load_f32(shared_path(path, sizeof path,
							"data/apple/synth_2k_float32.mrc"),
					    &hdr, &mic, &err),
			 0);
	apple_params_defaults(&p);
	assert_int_equal(apple_params_derive(&p, hdr.ny, hdr.nx, &s, &err), 0);
	const int n = s.nx, nw = s.nwx, q = s.query;
	const size_t nn = (size_t)n * n, ww = (size_t)nw * nw;

	double *im = xmalloc(sizeof(double) * nn), *mean = xmalloc(sizeof(double) * ww);
	double *std = xmalloc(sizeof(double) * ww);
	double *work = xmalloc(sizeof(double) * apple_preprocess_work_size(&p, &s));
	int32_t *ref = xmalloc(sizeof(int32_t) * 2 * (size_t)s.nref);
	apple_preprocess(&p, &s, mic, hdr.ny, hdr.nx, im, NULL, work);
	free(work);
	work = xmalloc(sizeof(double) * 2 * (size_t)n * nw);
	apple_moments(im, n, n, q, mean, std, work);
	free(work);
	apple_refs_select(&s, mean, std, ref);

	float *d_mic = upload(mic, sizeof(float) * (size_t)hdr.ny * hdr.nx);
	double *d_im = dmalloc(sizeof(double) * nn), *d_mean = dmalloc(sizeof(double) * ww);
	double *d_std = dmalloc(sizeof(double) * ww);
	int32_t *d_ref = dmalloc(sizeof(int32_t) * 2 * (size_t)s.nref);
	size_t sb = apple_preprocess_cuda_scratch(&s), sm = apple_moments_cuda_scratch(n, n, q);
	void *d_scr = dmalloc(sb > sm ? sb : sm);
	assert_int_equal(apple_preprocess_cuda(&p, &s, d_mic, hdr.ny, hdr.nx, d_im, d_scr,
					       (struct CUstream_st *)stream),
			 0);
	assert_int_equal(apple_moments_cuda(d_im, n, n, q, d_mean, d_std, d_scr,
					    (struct CUstream_st *)stream),
			 0);
	assert_int_equal(apple_refs_select_cuda(&s, d_mean, d_std, d_ref, (struct CUstream_st *)stream),
			 0);
	double *gim = download(d_im, sizeof(double) * nn);
	double *gmean = download(d_mean, sizeof(double) * ww), *gstd = download(d_std, sizeof(double) * ww);
	int32_t *gref = download(d_ref, sizeof(int32_t) * 2 * (size_t)s.nref);
	size_t dim = 0, dm = 0, ds = 0;
	for (size_t i = 0; i < nn; i++)
		dim += memcmp(&im[i], &gim[i], sizeof(double)) != 0;
	for (size_t i = 0; i < ww; i++) {
		dm += memcmp(&mean[i], &gmean[i], sizeof(double)) != 0;
		ds += memcmp(&std[i], &gstd[i], sizeof(double)) != 0;
	}
	print_message("# 2k prepare: %zu/%zu image pixels, %zu/%zu means, %zu/%zu stds differ "
		      "from the CPU's bits\n", dim, nn, dm, ww, ds, ww);
	assert_int_equal(dim, 0);
	assert_int_equal(dm, 0);
	assert_int_equal(ds, 0);
	assert_memory_equal(gref, ref, sizeof(int32_t) * 2 * (size_t)s.nref);
	/* a crop past the micrograph is refused */
	assert_int_equal(apple_preprocess_cuda(&p, &s, d_mic, hdr.ny, s.sidex, d_im, d_scr,
					       (struct CUstream_st *)stream),
			 SP_EINVAL);
	CK(cudaFree(d_mic));
	CK(cudaFree(d_im));
	CK(cudaFree(d_mean));
	CK(cudaFree(d_std));
	CK(cudaFree(d_ref));
	CK(cudaFree(d_scr));
	free(mic);
	free(im);
	free(mean);
	free(std);
	free(ref);
	free(gim);
	free(gmean);
	free(gstd);
	free(gref);
}

static size_t compare_morphology(const apple_sizes_t *s, const uint8_t *seg, const char *what)
{
	const int nw = s->nwx;
	const size_t n2 = (size_t)nw * nw;
	uint8_t *cpu = xmalloc(n2), *w8 = xmalloc(n2);
	int32_t *w32 = xmalloc(sizeof(int32_t) * apple_morphology_work_size(nw, nw));
	size_t diff = 0, ones = 0;

	apple_morphology(s, seg, cpu, w8, w32);
	uint8_t *d_seg = upload(seg, n2), *d_out = dmalloc(n2);
	void *d_scr = dmalloc(apple_morphology_cuda_scratch(nw, nw));
	for (int rep = 0; rep < 3; rep++) { /* the races differ from run to run */
		CK(cudaMemsetAsync(d_out, 0x55, n2, stream));
		assert_int_equal(apple_morphology_cuda(s, d_seg, d_out, d_scr,
						       (struct CUstream_st *)stream),
				 0);
		uint8_t *g = download(d_out, n2);
		for (size_t i = 0; i < n2; i++)
			diff += g[i] != cpu[i];
		free(g);
	}
	for (size_t i = 0; i < n2; i++)
		ones += cpu[i];
	print_message("# %s: nw %d, %zu pixels kept, %zu differ (3 runs)\n", what, nw, ones, diff);
	CK(cudaFree(d_seg));
	CK(cudaFree(d_out));
	CK(cudaFree(d_scr));
	free(cpu);
	free(w8);
	free(w32);
	return diff;
}

static void test_morphology_cuda(void **state)
{
	apple_sizes_t s;
	(void)state;

	sizes_2k(&s);
	uint8_t *svm = npy_read_shared("data/apple/ref_2k_seg_svm.npy", "|u1", s.nwx, s.nwx, 1);
	assert_int_equal(compare_morphology(&s, svm, "2k SVM segmentation"), 0);
	free(svm);

	/* noise fields near percolation (long, branching components), and
	 * the all-particle field (the corner rule) */
	apple_sizes_t r = { .nwy = 700, .nwx = 700, .min_size = 1, .max_size = 4 };
	uint8_t *seg = xmalloc((size_t)r.nwx * r.nwx);
	for (size_t i = 0; i < (size_t)r.nwx * r.nwx; i++)
		seg[i] = urand() < 0.62;
	assert_int_equal(compare_morphology(&r, seg, "random field"), 0);
	memset(seg, 1, (size_t)r.nwx * r.nwx);
	r.max_size = 2000;
	assert_int_equal(compare_morphology(&r, seg, "all particle"), 0);
	free(seg);
}

int main(void)
{
	cuda_skip_without_device();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_score),
		cmocka_unit_test(test_random_classify),
		cmocka_unit_test(test_2k),
		cmocka_unit_test(test_prepare_2k),
		cmocka_unit_test(test_morphology_cuda),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
#endif /* SP_HAVE_CUDA */
