/* StarPU glue of jsync.power: the power iteration, each product w = S v as chunk tasks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "npy.h"
#include "rng.h"
#include "stage.h"
#include "jsync_glue.h"
#ifdef SP_HAVE_CUDA
#include "cuda_handles.h"
#endif

/*
 * DESIGN: every iteration submits one task per chunk, all reading v (as
 * 64-bit fixed point, see jsync.h) and accumulating into w in STARPU_REDUX
 * mode: each worker adds into its own copy, StarPU merges the copies with
 * the add codelet when the driver acquires w.  Because the sums are integer
 * sums, the merged w does not depend on which worker ran which chunk, so a
 * run on CPUs and a run on GPUs iterate identically.  The O(P) steps between
 * products (normalise, residual, quantise) run in the driver on the acquired
 * host copies.
 */

static void matvec_cpu(void *buffers[], void *cl_arg)
{
	const jsync_chunk_arg_t *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	jsync_matvec_cpu((const uint8_t *)STARPU_VECTOR_GET_PTR(buffers[0]), a->N, a->p0, a->p1,
			 (const int64_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
			 (int64_t *)STARPU_VECTOR_GET_PTR(buffers[2]));
	if (sp_cancel_requested()) /* it may have stopped early: the product is partial */
		sp_status_set(a->ctx->status, SP_ECANCELED, "%s: cancelled", a->ctx->kernel);
}

static void fused_cpu(void *buffers[], void *cl_arg)
{
	const jsync_chunk_arg_t *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	jsync_matvec_fused_cpu((const double *)STARPU_VECTOR_GET_PTR(buffers[0]), a->N, a->p0, a->p1,
			       (const int64_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
			       (int64_t *)STARPU_VECTOR_GET_PTR(buffers[2]));
	if (sp_cancel_requested())
		sp_status_set(a->ctx->status, SP_ECANCELED, "%s: cancelled", a->ctx->kernel);
}

static void zero_cpu(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	memset((void *)STARPU_VECTOR_GET_PTR(buffers[0]), 0,
	       STARPU_VECTOR_GET_NX(buffers[0]) * sizeof(int64_t));
}

/* StarPU submits the reduction's add tasks itself, without STARPU_FLOPS:
 * their count goes on the running task, which StarPU records in the model
 * once the function has returned.  (The zero codelet runs in no task of its
 * own: StarPU calls it directly when it makes a worker's copy of w, so it
 * has no model entry and must not touch the current task.) */
static void add_declare_flops(size_t n)
{
	struct starpu_task *task = starpu_task_get_current();
	if (task != NULL)
		task->flops = jsync_add_flops((double)n);
}

static void add_cpu(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	add_declare_flops(STARPU_VECTOR_GET_NX(buffers[0]));
	int64_t *dst = (int64_t *)STARPU_VECTOR_GET_PTR(buffers[0]);
	const int64_t *src = (const int64_t *)STARPU_VECTOR_GET_PTR(buffers[1]);
	size_t n = STARPU_VECTOR_GET_NX(buffers[0]);
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}

#ifdef SP_HAVE_CUDA
static struct CUstream_st *stream(void)
{
	return (struct CUstream_st *)starpu_cuda_get_local_stream();
}

static void matvec_cuda(void *buffers[], void *cl_arg)
{
	const jsync_chunk_arg_t *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	if (jsync_matvec_cuda((const uint8_t *)STARPU_VECTOR_GET_PTR(buffers[0]), a->N, a->p0, a->p1,
			      (const int64_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
			      (int64_t *)STARPU_VECTOR_GET_PTR(buffers[2]), stream()) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: %s", __func__, sp_cuda_last_error());
}

static void fused_cuda(void *buffers[], void *cl_arg)
{
	const jsync_chunk_arg_t *a = cl_arg;
	if (sp_status_failed(a->ctx->status))
		return;
	if (jsync_matvec_fused_cuda((const double *)STARPU_VECTOR_GET_PTR(buffers[0]), a->N, a->p0,
				    a->p1, (const int64_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
				    (int64_t *)STARPU_VECTOR_GET_PTR(buffers[2]), stream()) != 0)
		sp_status_set(a->ctx->status, SP_ECUDA, "%s: %s", __func__, sp_cuda_last_error());
}

/* Reduction codelets have no status to report into: a failed launch is
 * impossible to recover from mid-reduction, so it aborts with a message. */
static void zero_cuda(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	if (jsync_zero_cuda((int64_t *)STARPU_VECTOR_GET_PTR(buffers[0]),
			    (int64_t)STARPU_VECTOR_GET_NX(buffers[0]), stream()) != 0) {
		fprintf(stderr, "starpipe: %s: %s\n", __func__, sp_cuda_last_error());
		abort();
	}
}

static void add_cuda(void *buffers[], void *cl_arg)
{
	(void)cl_arg;
	add_declare_flops(STARPU_VECTOR_GET_NX(buffers[0]));
	if (jsync_add_cuda((int64_t *)STARPU_VECTOR_GET_PTR(buffers[0]),
			   (const int64_t *)STARPU_VECTOR_GET_PTR(buffers[1]),
			   (int64_t)STARPU_VECTOR_GET_NX(buffers[0]), stream()) != 0) {
		fprintf(stderr, "starpipe: %s: %s\n", __func__, sp_cuda_last_error());
		abort();
	}
}
#endif

/* The size column of the models: the bytes the kernels move (jsync_glue.h),
 * for the footprint's triplet count in the chunk tasks. */
static size_t matvec_size_base(struct starpu_task *task, unsigned nimpl)
{
	(void)nimpl;
	const jsync_chunk_arg_t *a = task->cl_arg;
	return (size_t)jsync_matvec_bytes(jsync_chunk_model_triplets(a->ntriplets));
}

static size_t fused_size_base(struct starpu_task *task, unsigned nimpl)
{
	(void)nimpl;
	const jsync_chunk_arg_t *a = task->cl_arg;
	return (size_t)jsync_fused_bytes(jsync_chunk_model_triplets(a->ntriplets));
}

static size_t zero_size_base(struct starpu_task *task, unsigned nimpl)
{
	(void)nimpl;
	return (size_t)jsync_zero_bytes(starpu_vector_get_nx(STARPU_TASK_GET_HANDLE(task, 0)));
}

static size_t add_size_base(struct starpu_task *task, unsigned nimpl)
{
	(void)nimpl;
	return (size_t)jsync_add_bytes(starpu_vector_get_nx(STARPU_TASK_GET_HANDLE(task, 0)));
}

SP_CODELET(matvec_cl, "jsync_matvec", matvec_cpu, SP_CUDA(matvec_cuda), jsync_chunk_footprint,
	   matvec_size_base, 3, STARPU_R, STARPU_R, STARPU_REDUX);

SP_CODELET(fused_cl, "jsync_matvec_fused", fused_cpu, SP_CUDA(fused_cuda), jsync_chunk_footprint,
	   fused_size_base, 3, STARPU_R, STARPU_R, STARPU_REDUX);

SP_CODELET(zero_cl, "jsync_zero", zero_cpu, SP_CUDA(zero_cuda), NULL, zero_size_base, 1,
	   STARPU_W);

SP_CODELET(add_cl, "jsync_add", add_cpu, SP_CUDA(add_cuda), NULL, add_size_base, 2, STARPU_RW,
	   STARPU_R);

/* jsync.power's parameters, parsed once when the graph is loaded (start is
 * a path that may hold per-item variables: sp_item_param()). */
struct power_params {
	double eps;
	long long max_iters, seed;
};

static void signs_free(sp_value_t *v)
{
	jsync_signs_t *s = (jsync_signs_t *)v;
	if (s->h != NULL)
		starpu_data_unregister(s->h);
	sp_item_buffer_put(s->s, (size_t)s->P * sizeof *s->s);
	free(s);
}

static int start_vector(sp_item_t *item, const sp_gstage_t *st, int64_t P, double *v)
{
	sp_status_t *status = sp_item_status(item);
	char *path = sp_item_param(item, st, "start");
	int ret = 0;

	if (path == NULL)
		return SP_ENOMEM;
	if (path[0] != '\0') {
		sp_err_t err = { 0 };
		int64_t shape[1] = { P };
		double *x = NULL;
		sp_npy_t h;
		if (sp_npy_load_f8(path, 1, shape, &x, &h, &err) != 0) {
			ret = sp_status_set_err(status, &err);
		} else {
			memcpy(v, x, (size_t)P * sizeof *v);
			free(x);
		}
	} else {
		uint64_t s = (uint64_t)((const struct power_params *)st->typed)->seed;
		for (int64_t p = 0; p < P; p++)
			v[p] = (double)(sp_splitmix64(&s) >> 11) * 0x1.0p-53;
	}
	free(path);
	return ret;
}

static double norm2(const double *x, int64_t n)
{
	double s = 0;
	for (int64_t i = 0; i < n; i++)
		s += x[i] * x[i];
	return sqrt(s);
}

/* The iteration's four vectors of P: v, the signs, and the quantised v and w. */
static int power_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e, sp_err_t *err)
{
	(void)item;
	(void)st;
	(void)err;
	e->bytes += (unsigned long long)jsync_npairs((int64_t)e->size) * 4 * sizeof(double);
	return 0;
}

static int power_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	jsync_triplets_t *t = (jsync_triplets_t *)in[0];
	int64_t N = t->N, P = jsync_npairs(N);
	const struct power_params *pp = st->typed;
	double eps = pp->eps;
	long long max_iters = pp->max_iters;
	jsync_signs_t *sg = calloc(1, sizeof *sg);
	double *v = malloc((size_t)P * sizeof *v);
	int64_t *vq = NULL, *wq = NULL;
	starpu_data_handle_t vh = NULL, wh = NULL;
	double res = INFINITY, rayleigh = NAN;
	long long it = 0;
	int ret = 0;

	if (sg == NULL || v == NULL) {
		free(sg);
		free(v);
		return SP_ENOMEM;
	}
	sg->base.type = "jsync.signs";
	sg->base.free_cb = signs_free;
	sg->N = N;
	sg->P = P;
	*out = &sg->base;
	/* from the item buffer pool (an earlier item's of the same N): the
	 * signs are written whole at the end, vq by each quantisation and wq
	 * cleared before each product */
	if (sp_item_buffer_get((void **)&sg->s, (size_t)P * sizeof *sg->s) != 0 ||
	    sp_item_buffer_get((void **)&vq, (size_t)P * sizeof *vq) != 0 ||
	    sp_item_buffer_get((void **)&wq, (size_t)P * sizeof *wq) != 0) {
		ret = sp_status_set(status, SP_ENOMEM, "%s: cannot allocate the power-iteration vectors",
				    sp_item_path(item));
		goto out;
	}
	if ((ret = start_vector(item, st, P, v)) != 0)
		goto out;
	double nv = norm2(v, P);
	if (!(nv > 0) || !isfinite(nv)) {
		ret = sp_status_set(status, SP_EINVAL, "%s: the start vector is zero or not finite",
				    sp_item_path(item));
		goto out;
	}
	for (int64_t p = 0; p < P; p++)
		v[p] /= nv;

	starpu_vector_data_register(&vh, STARPU_MAIN_RAM, (uintptr_t)vq, (uint32_t)P, sizeof *vq);
	starpu_vector_data_register(&wh, STARPU_MAIN_RAM, (uintptr_t)wq, (uint32_t)P, sizeof *wq);
	starpu_data_set_reduction_methods(wh, &add_cl, &zero_cl);

	sp_taskctx_t *ctx = sp_item_taskctx(item, st, t->recompute ? "jsync_matvec_fused" : "jsync_matvec");
	if (ctx == NULL) {
		ret = SP_ENOMEM;
		goto out;
	}
	jsync_chunk_arg_t *args = calloc(t->nchunks, sizeof *args);
	if (args == NULL) {
		ret = SP_ENOMEM;
		goto out;
	}
	for (size_t c = 0; c < t->nchunks; c++) {
		args[c] = t->args[c];
		args[c].ctx = ctx;
	}

	while (it < max_iters && res > eps) {
		/* a stop between two products (each product's tasks poll it too) */
		if (sp_status_failed(status)) {
			ret = status->code;
			break;
		}
		if (sp_cancel_requested()) {
			ret = sp_status_set(status, SP_ECANCELED, "%s: cancelled at iteration %lld",
					    sp_item_path(item), it);
			break;
		}
		starpu_data_acquire(vh, STARPU_W);
		int e = jsync_quantize(v, P, vq);
		starpu_data_release(vh);
		starpu_data_acquire(wh, STARPU_W);
		memset(wq, 0, (size_t)P * sizeof *wq);
		starpu_data_release(wh);

		for (size_t c = 0; c < t->nchunks && ret == 0; c++) {
			double m = jsync_chunk_model_triplets(args[c].ntriplets);
			if (t->recompute)
				ret = sp_task_insert(ctx, &fused_cl, STARPU_R, t->rijs->h, STARPU_R, vh,
						     STARPU_REDUX, wh, STARPU_FLOPS, jsync_fused_flops(m),
						     STARPU_CL_ARGS_NFREE, &args[c], sizeof args[c]);
			else
				ret = sp_task_insert(ctx, &matvec_cl, STARPU_R, t->h[c], STARPU_R, vh,
						     STARPU_REDUX, wh, STARPU_FLOPS, jsync_matvec_flops(m),
						     STARPU_CL_ARGS_NFREE, &args[c], sizeof args[c]);
		}
		if (ret != 0) {
			/* Wait for the chunks already submitted: they use args. */
			starpu_data_acquire(wh, STARPU_R);
			starpu_data_release(wh);
			break;
		}
		starpu_data_acquire(wh, STARPU_R);
		if (sp_status_failed(status)) {
			starpu_data_release(wh);
			ret = status->code;
			break;
		}
#ifdef SP_SIMGRID
		/* No product was computed: run the real run's count of iterations
		 * (--sim-count iterations=N, its report's "iterations"), else max_iters. */
		starpu_data_release(wh);
		it++;
		res = it < sp_sim_count("iterations", max_iters) ? INFINITY : 0;
		continue;
#endif
		/* w = S v exactly up to v's quantisation; then w / ||w||. */
		double scale = ldexp(1.0, -e), nw = 0, dot = 0, d = 0;
		for (int64_t p = 0; p < P; p++) {
			double w = (double)wq[p] * scale;
			nw += w * w;
			dot += w * v[p];
		}
		starpu_data_release(wh);
		nw = sqrt(nw);
		it++;
		rayleigh = dot; /* v is unit: v'Sv */
		if (!(nw > 0)) {
			ret = sp_status_set(status, SP_ENOTCONV,
					    "%s: the sign-matrix product is zero at iteration %lld",
					    sp_item_path(item), it);
			break;
		}
		for (int64_t p = 0; p < P; p++) {
			double w = (double)wq[p] * scale / nw;
			d += (w - v[p]) * (w - v[p]);
			v[p] = w;
		}
		res = sqrt(d);
	}
	sp_taskctx_quiesce(ctx); /* the last tasks' callbacks may still read args */
	free(args);
	if (ret != 0)
		goto out;
	if (res > eps)
		fprintf(stderr, "starpipe: %s: warning: power iteration stopped at max_iters = %lld with "
			"residual %.3g > eps = %.3g\n", sp_item_path(item), max_iters, res, eps);

	/* Global handedness: signs[0] = +1. */
	double g = v[0] < 0 ? -1.0 : 1.0;
	for (int64_t p = 0; p < P; p++)
		sg->s[p] = (v[p] < 0 ? -1.0 : 1.0) * g;
	starpu_vector_data_register(&sg->h, STARPU_MAIN_RAM, (uintptr_t)sg->s, (uint32_t)P,
				    sizeof(double));
	sp_item_report_num(item, "N", (double)N);
	sp_item_report_num(item, "iterations", (double)it);
	sp_item_report_num(item, "residual", res);
	sp_item_report_num(item, "rayleigh_quotient", rayleigh);
	sp_item_report_num(item, "rayleigh_expected_2N_minus_4", (double)(2 * N - 4));
out:
	if (vh != NULL)
		starpu_data_unregister(vh);
	if (wh != NULL)
		starpu_data_unregister(wh);
	sp_item_buffer_put(vq, (size_t)P * sizeof *vq);
	sp_item_buffer_put(wq, (size_t)P * sizeof *wq);
	free(v);
	return ret;
}

static const sp_param_spec_t power_params[] = {
	{ "eps", SP_PT_FLOAT, "1e-2", 0, 1, NULL, "stop when ||v_k+1 - v_k|| <= eps",
	  SP_AT(struct power_params, eps) },
	{ "max_iters", SP_PT_INT, "1000", 1, 1000000, NULL, "iteration limit",
	  SP_AT(struct power_params, max_iters) },
	{ "seed", SP_PT_INT, "0", 0, 9007199254740991.0, NULL,
	  "seed of the uniform random start vector", SP_AT(struct power_params, seed) },
	{ "start", SP_PT_PATH, "", 0, -1, NULL,
	  "NPY float64 [P] start vector (overrides seed), for exact comparisons", 0 },
};
static const sp_port_spec_t power_inputs[] = {
	{ "triplets", "jsync.triplets", "per-triplet choices" },
};
static const sp_port_spec_t power_outputs[] = {
	{ "signs", "jsync.signs", "one sign per pair, signs[0] = +1" },
};

const sp_stage_kind_t sp_jsync_power_kind = {
	.name = "jsync.power",
	.help = "Power iteration on the triplet sign matrix",
	SP_KIND_PARAMS(power_params, struct power_params),
	SP_KIND_INPUTS(power_inputs),
	SP_KIND_OUTPUTS(power_outputs),
	.impl = SP_IMPL_CPU_CUDA,
	.codelets = "jsync_matvec jsync_matvec_fused jsync_zero jsync_add",
	.run = power_run,
	.estimate = power_estimate,
};
