/* StarPU glue of @name@.scale: one task of y = factor x (scale.h) per item. */
#include <stdlib.h>

#include "stage.h"
#include "scale.h"
#include "@name@_glue.h"

/* The kind's typed parameters: the graph loader parses and checks them once
 * (SP_AT in the specs below); run() reads stage->typed. */
struct scale_params {
	double factor;
};

struct @name@_scale_arg {
	sp_taskctx_t *ctx;
	double factor;
};

static void scale_cpu(void *buffers[], void *cl_arg)
{
	struct @name@_scale_arg *a = cl_arg;
	const double *x = (const double *)STARPU_VECTOR_GET_PTR(buffers[0]);
	double *y = (double *)STARPU_VECTOR_GET_PTR(buffers[1]);

	if (sp_status_failed(a->ctx->status))
		return;
	@name@_scale_cpu(x, y, STARPU_VECTOR_GET_NX(buffers[0]), a->factor);
}

/* A CUDA twin would be SP_CUDA(scale_cuda) here, and .impl = SP_IMPL_CPU_CUDA below. */
SP_CODELET(scale_cl, "@name@_scale", scale_cpu, SP_NO_CUDA, NULL, NULL, 2, STARPU_R, STARPU_W);

/* The output array, as big as the input. */
static int scale_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e, sp_err_t *err)
{
	(void)item;
	(void)st;
	(void)err;
	e->bytes += (unsigned long long)e->size * sizeof(double);
	return 0;
}

static int scale_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	const @name@_array_t *x = (const @name@_array_t *)in[0];
	const struct scale_params *p = st->typed;
	struct @name@_scale_arg *a = calloc(1, sizeof *a);

	if (a == NULL)
		return SP_ENOMEM;
	a->factor = p->factor;
	a->ctx = sp_item_taskctx(item, st, "@name@_scale");
	if (a->ctx == NULL) {
		free(a);
		return SP_ENOMEM;
	}
	/* After the call a belongs to y, which frees it after the task. */
	@name@_array_t *y = @name@_array_new(x->ndim, x->shape, x->n, a);
	if (y == NULL)
		return SP_ENOMEM;
	*out = &y->base;
	return sp_task_insert(a->ctx, &scale_cl, STARPU_R, x->h, STARPU_W, y->h,
			      STARPU_CL_ARGS_NFREE, a, sizeof *a);
}

static const sp_param_spec_t scale_params[] = {
	{ "factor", SP_PT_FLOAT, "1", -1e12, 1e12, NULL, "what every element is multiplied by",
	  SP_AT(struct scale_params, factor) },
};
static const sp_port_spec_t scale_inputs[] = {
	{ "x", "@name@.array", "the array to scale" },
};
static const sp_port_spec_t scale_outputs[] = {
	{ "y", "@name@.array", "factor x, of x's shape" },
};

const sp_stage_kind_t sp_@name@_scale_kind = {
	.name = "@name@.scale",
	.help = "Multiply every element of an array by a factor",
	SP_KIND_PARAMS(scale_params, struct scale_params),
	SP_KIND_INPUTS(scale_inputs),
	SP_KIND_OUTPUTS(scale_outputs),
	.impl = SP_IMPL_CPU,
	.codelets = "@name@_scale",
	.run = scale_run,
	.estimate = scale_estimate,
};
