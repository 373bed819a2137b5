/* StarPU glue of @name@.write: an array as an NPY float64 file of its shape, written atomically. */
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "stage.h"
#include "@name@_glue.h"

struct @name@_write_arg {
	sp_taskctx_t *ctx;
	const @name@_array_t *y; /* borrowed: the producer's value outlives ours */
	const char *tmp;         /* the temporary of the item's output set */
	char path[];             /* the expanded `result:` */
};

/* A value with no port: it ties the task and its argument to the item. */
typedef struct @name@_write_val {
	sp_value_t base;
	struct @name@_write_arg *arg;
	struct starpu_task *task; /* not detached: freed by sp_task_join() */
} @name@_write_val_t;

static void write_cpu(void *buffers[], void *cl_arg)
{
	struct @name@_write_arg *a = cl_arg;
	const double *y = (const double *)STARPU_VECTOR_GET_PTR(buffers[0]);
	sp_err_t err = { 0 };

	if (sp_status_failed(a->ctx->status))
		return;
	/* Into the temporary: the item's outputs are renamed into place
	 * together when every stage of the item has succeeded. */
	if (sp_npy_write_f8_into(a->tmp, a->path, y, a->y->ndim, a->y->shape, &err) != 0)
		sp_status_set_err(a->ctx->status, &err);
}

SP_CODELET(write_cl, "@name@_write", write_cpu, SP_NO_CUDA, NULL, NULL, 1, STARPU_R);

static void write_free(sp_value_t *v)
{
	@name@_write_val_t *w = (@name@_write_val_t *)v;
	/* The task may still run: wait for it before freeing its argument. */
	sp_task_join(&w->task);
	free(w->arg);
	free(w);
}

static int write_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	const @name@_array_t *y = (const @name@_array_t *)in[0];
	char *path = sp_item_param(item, st, "result");
	@name@_write_val_t *w = calloc(1, sizeof *w);
	struct @name@_write_arg *a = path != NULL ? calloc(1, sizeof *a + strlen(path) + 1) : NULL;
	sp_err_t err = { 0 };

	if (w == NULL || a == NULL) {
		free(path);
		free(w);
		free(a);
		return SP_ENOMEM;
	}
	strcpy(a->path, path);
	free(path);
	w->base.type = "@name@.write";
	w->base.free_cb = write_free;
	w->arg = a;
	*out = &w->base;
	a->y = y;
	a->ctx = sp_item_taskctx(item, st, "@name@_write");
	if (a->ctx == NULL)
		return SP_ENOMEM;
	if (sp_item_output(item, a->path, &a->tmp, &err) != 0)
		return sp_status_set_err(sp_item_status(item), &err);
	return sp_task_insert_joinable(a->ctx, &w->task, &write_cl, STARPU_R, y->h,
				       STARPU_CL_ARGS_NFREE, a, sizeof *a);
}

/* --skip-existing: an existing output is whole when its NPY header parses
 * and its size is the one its shape says (sp_npy_open). */
static int write_verify(const sp_gstage_t *st, const char *param, const char *path,
			sp_err_t *err)
{
	sp_npy_t h;
	(void)st;
	(void)param;
	return sp_npy_open(path, &h, err);
}

static const sp_param_spec_t write_params[] = {
	{ "result", SP_PT_OUTPUT, NULL, 0, -1, NULL, "output NPY float64 file, of the array's shape", 0 },
};
static const sp_port_spec_t write_inputs[] = {
	{ "y", "@name@.array", "the array to write" },
};

const sp_stage_kind_t sp_@name@_write_kind = {
	.name = "@name@.write",
	.help = "Write an array as an NPY float64 file",
	SP_KIND_TEXT_PARAMS(write_params),
	SP_KIND_INPUTS(write_inputs),
	.impl = SP_IMPL_CPU,
	.codelets = "@name@_write",
	.run = write_run,
	.verify = write_verify,
};
