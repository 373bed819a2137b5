/* StarPU glue of jsync.read: NPY [P,3,3] float64 into a registered buffer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "sizes.h"
#include "stage.h"
#include "jsync_glue.h"

struct jsync_read_arg {
	sp_taskctx_t *ctx;
	char *path;
	sp_npy_t npy;
	int64_t N;
};

static void read_cpu(void *buffers[], void *cl_arg)
{
	struct jsync_read_arg *a = cl_arg;
	double *R = (double *)STARPU_VECTOR_GET_PTR(buffers[0]);
	sp_err_t err = { 0 };

	if (sp_status_failed(a->ctx->status))
		return;
	if (sp_npy_read_f8(a->path, &a->npy, R, &err) != 0) {
		sp_status_set_err(a->ctx->status, &err);
		return;
	}
	/* Degenerate matrices (all zeros, huge, not orthogonal) would give
	 * signs without meaning and exit 0: the item fails, naming the first. */
	int64_t P = a->npy.shape[0], i, j;
	double dev;
	int64_t p = jsync_first_nonrotation(R, P, JSYNC_ROT_TOL, &dev);
	if (p < P) {
		jsync_pair_ij(a->N, p, &i, &j);
		sp_status_set(a->ctx->status, SP_EFORMAT,
			      "%s: matrix %lld (pair %lld, %lld) is not a rotation: "
			      "||R^T R - I||_F = %.3g, more than %g",
			      a->path, (long long)p, (long long)i, (long long)j, dev, JSYNC_ROT_TOL);
	}
}

/* File I/O runs on CPU workers only: the file system is there. */
SP_CODELET(read_cl, "jsync_read", read_cpu, SP_NO_CUDA, NULL, NULL, 1, STARPU_W);

static void rijs_free(sp_value_t *v)
{
	jsync_rijs_t *r = (jsync_rijs_t *)v;
	if (r->h != NULL)
		starpu_data_unregister(r->h);
	sp_item_buffer_put(r->R, (size_t)r->P * 9 * sizeof *r->R);
	if (r->arg != NULL) {
		free(r->arg->path);
		free(r->arg);
	}
	free(r);
}

/* Opens the NPY header of `path` and checks it holds the P = N(N-1)/2
 * relative rotations of N images. */
static int read_header(const char *path, sp_npy_t *npy, int64_t *N_out, int64_t *P_out,
		       sp_err_t *err)
{
	if (sp_npy_open(path, npy, err) != 0)
		return err->code;
	if (npy->ndim != 3 || npy->shape[1] != 3 || npy->shape[2] != 3)
		return sp_seterr(err, SP_ESHAPE,
				 "%s: expected an array of shape (P, 3, 3) (one 3x3 matrix per pair), "
				 "got %d dimension(s)%s",
				 path, npy->ndim, npy->ndim == 3 ? " with other sizes" : "");
	int64_t P = npy->shape[0];
	int64_t N = (int64_t)llround((1.0 + sqrt(1.0 + 8.0 * (double)P)) / 2.0);
	if (jsync_npairs(N) != P || N < 3)
		return sp_seterr(err, SP_ESHAPE,
				 "%s: %lld matrices is not the number of pairs N(N-1)/2 of N >= 3 images",
				 path, (long long)P);
	if (N > JSYNC_MAX_N)
		return sp_seterr(err, SP_ESHAPE, "%s: N = %lld images is more than the %d supported",
				 path, (long long)N, JSYNC_MAX_N);
	/* the rotations are one StarPU vector of 9 P doubles */
	size_t nr;
	if (sp_mul_size((size_t)P, 9, &nr) || !sp_vector_nx_ok(nr))
		return sp_seterr(err, SP_ESHAPE,
				 "%s: N = %lld images make %lld pairs, 9 x %lld rotation entries: more "
				 "than the %zu values a StarPU vector holds (N <= %d)",
				 path, (long long)N, (long long)P, (long long)P, SP_VECTOR_MAX_NX,
				 JSYNC_MAX_N_VECTOR);
	*N_out = N;
	*P_out = P;
	return 0;
}

/* The rotations, P x 9 doubles, and the process's own baseline. */
static int read_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e, sp_err_t *err)
{
	char *path = sp_item_param(item, st, "file");
	sp_npy_t npy;
	int64_t N = 0, P = 0;
	if (path == NULL)
		return sp_seterr(err, SP_ENOMEM, "out of memory");
	int rc = read_header(path, &npy, &N, &P, err);
	free(path);
	if (rc != 0)
		return rc;
	e->size = (double)N;
	e->bytes += (unsigned long long)P * 9 * sizeof(double);
	return 0;
}

static int read_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		    sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	struct jsync_read_arg *a = calloc(1, sizeof *a);
	jsync_rijs_t *r = calloc(1, sizeof *r);
	sp_err_t err = { 0 };
	(void)in;

	if (a == NULL || r == NULL) {
		free(a);
		free(r);
		return SP_ENOMEM;
	}
	r->base.type = "jsync.rijs";
	r->base.free_cb = rijs_free;
	r->arg = a;
	*out = &r->base;
	a->path = sp_item_param(item, st, "file");
	if (a->path == NULL)
		return SP_ENOMEM;

	/* The header is read here, synchronously, to size the buffer; the data
	 * is read by a task, overlapping with other items' work. */
	int64_t N, P;
	if (read_header(a->path, &a->npy, &N, &P, &err) != 0)
		return sp_status_set_err(status, &err);
	r->N = N;
	r->P = P;
	a->N = N;
	/* from the item buffer pool: the read task fills it whole */
	if (sp_item_buffer_get((void **)&r->R, (size_t)P * 9 * sizeof *r->R) != 0) {
		r->R = NULL;
		return sp_status_set(status, SP_ENOMEM, "%s: cannot allocate %lld bytes", a->path,
				     (long long)P * 72);
	}
	starpu_vector_data_register(&r->h, STARPU_MAIN_RAM, (uintptr_t)r->R, (uint32_t)(P * 9),
				    sizeof(double));
	a->ctx = sp_item_taskctx(item, st, "jsync_read");
	if (a->ctx == NULL)
		return SP_ENOMEM;
	return sp_task_insert(a->ctx, &read_cl, STARPU_W, r->h, STARPU_CL_ARGS_NFREE, a, sizeof *a);
}

static const sp_param_spec_t read_params[] = {
	{ "file", SP_PT_PATH, NULL, 0, -1, NULL,
	  "NPY file of the relative rotations, float64 [P, 3, 3], P = N(N-1)/2", 0 },
};
static const sp_port_spec_t read_outputs[] = {
	{ "rijs", "jsync.rijs", "relative rotations R_ij, pairs i<j in row-major order" },
};

const sp_stage_kind_t sp_jsync_read_kind = {
	.name = "jsync.read",
	.help = "Read relative rotations R[P][3][3] from an NPY file",
	SP_KIND_TEXT_PARAMS(read_params),
	SP_KIND_OUTPUTS(read_outputs),
	.impl = SP_IMPL_CPU,
	.codelets = "jsync_read",
	.run = read_run,
	.estimate = read_estimate,
};
