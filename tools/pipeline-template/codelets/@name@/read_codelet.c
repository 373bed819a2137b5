/* StarPU glue of @name@.read: an NPY float64 file into a registered buffer; the array value's life. */
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "stage.h"
#include "@name@_glue.h"

struct @name@_read_arg {
	sp_taskctx_t *ctx;
	sp_npy_t npy;
	char path[]; /* the expanded `file:`, in the same allocation */
};

static void array_free(sp_value_t *v)
{
	@name@_array_t *a = (@name@_array_t *)v;
	/* Unregistering waits for the tasks that use the buffer; then their
	 * argument can go. */
	if (a->h != NULL)
		starpu_data_unregister(a->h);
	if (a->x != NULL)
		starpu_free(a->x);
	free(a->arg);
	free(a);
}

@name@_array_t *@name@_array_new(int ndim, const int64_t *shape, int64_t n, void *arg)
{
	@name@_array_t *a = calloc(1, sizeof *a);

	if (a == NULL) {
		free(arg);
		return NULL;
	}
	a->base.type = "@name@.array";
	a->base.free_cb = array_free;
	a->arg = arg;
	a->ndim = ndim;
	memcpy(a->shape, shape, (size_t)ndim * sizeof *shape);
	a->n = n;
	if (starpu_malloc((void **)&a->x, (size_t)n * sizeof(double)) != 0) {
		a->x = NULL;
		array_free(&a->base);
		return NULL;
	}
	starpu_vector_data_register(&a->h, STARPU_MAIN_RAM, (uintptr_t)a->x, (uint32_t)n,
				    sizeof(double));
	return a;
}

static void read_cpu(void *buffers[], void *cl_arg)
{
	struct @name@_read_arg *a = cl_arg;
	double *x = (double *)STARPU_VECTOR_GET_PTR(buffers[0]);
	sp_err_t err = { 0 };

	if (sp_status_failed(a->ctx->status))
		return;
	if (sp_npy_read_f8(a->path, &a->npy, x, &err) != 0)
		sp_status_set_err(a->ctx->status, &err);
}

/* File I/O runs on CPU workers only: the file system is there. */
SP_CODELET(read_cl, "@name@_read", read_cpu, SP_NO_CUDA, NULL, NULL, 1, STARPU_W);

/* Opens the header of `path`: a float64 array of at least one element
 * (StarPU registers no empty buffer), at most 2^32 - 1 (a vector's size). */
static int read_header(const char *path, sp_npy_t *npy, int64_t *n, sp_err_t *err)
{
	if (sp_npy_open(path, npy, err) != 0)
		return err->code;
	*n = sp_npy_count(npy);
	if (*n < 1 || *n > (int64_t)UINT32_MAX)
		return sp_seterr(err, SP_ESHAPE, "%s: %lld elements; expected 1 to %u", path,
				 (long long)*n, UINT32_MAX);
	return 0;
}

/* The array's bytes, before the item runs (an item that cannot fit fails
 * before any of its tasks). */
static int read_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e, sp_err_t *err)
{
	char *path = sp_item_param(item, st, "file");
	sp_npy_t npy;
	int64_t n = 0;

	if (path == NULL)
		return sp_seterr(err, SP_ENOMEM, "out of memory");
	int rc = read_header(path, &npy, &n, err);
	free(path);
	if (rc != 0)
		return rc;
	e->size = (double)n;
	e->bytes += (unsigned long long)n * sizeof(double);
	return 0;
}

static int read_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		    sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	char *path = sp_item_param(item, st, "file");
	struct @name@_read_arg *a = path != NULL ? calloc(1, sizeof *a + strlen(path) + 1) : NULL;
	sp_err_t err = { 0 };
	int64_t n = 0;
	(void)in;

	if (a == NULL) {
		free(path);
		return SP_ENOMEM;
	}
	strcpy(a->path, path);
	free(path);
	a->ctx = sp_item_taskctx(item, st, "@name@_read");
	/* The header is read here, synchronously, to size the buffer; the data
	 * is read by a task, overlapping with other items' work. */
	if (a->ctx == NULL || read_header(a->path, &a->npy, &n, &err) != 0) {
		int rc = a->ctx == NULL ? SP_ENOMEM : sp_status_set_err(status, &err);
		free(a);
		return rc;
	}
	/* From here on a belongs to the value, which frees it after the task. */
	@name@_array_t *v = @name@_array_new(a->npy.ndim, a->npy.shape, n, a);
	if (v == NULL)
		return SP_ENOMEM;
	*out = &v->base;
	return sp_task_insert(a->ctx, &read_cl, STARPU_W, v->h, STARPU_CL_ARGS_NFREE, a, sizeof *a);
}

static const sp_param_spec_t read_params[] = {
	{ "file", SP_PT_PATH, NULL, 0, -1, NULL, "NPY file of float64, C order, any shape", 0 },
};
static const sp_port_spec_t read_outputs[] = {
	{ "array", "@name@.array", "the file's array" },
};

const sp_stage_kind_t sp_@name@_read_kind = {
	.name = "@name@.read",
	.help = "Read an array of float64 from an NPY file",
	SP_KIND_TEXT_PARAMS(read_params),
	SP_KIND_OUTPUTS(read_outputs),
	.impl = SP_IMPL_CPU,
	.codelets = "@name@_read",
	.run = read_run,
	.estimate = read_estimate,
};
