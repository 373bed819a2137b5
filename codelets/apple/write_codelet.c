/* StarPU glue of apple.write: the picks as RELION STAR and, on request, EMAN BOX files. */
#include <stdlib.h>

#include "../../src/fsutil.h"
#include "../../src/stage.h"
#include "apple_glue.h"
#include "star.h"

struct apple_write_arg {
	sp_taskctx_t *ctx;
	apple_picks_val_t *pv;
	char *star, *box;
	const char *star_tmp, *box_tmp; /* temporaries of the item's output set */
	int box_size;
};

/* apple.write's parameters parsed once (star and box are per-item paths). */
struct write_params {
	long long box_size;
};

typedef struct apple_write_val {
	sp_value_t base;
	struct apple_write_arg arg;
	struct starpu_task *task; /* not detached: waited for before freeing arg */
} apple_write_val_t;

static void write_cpu(void *buffers[], void *cl_arg)
{
	struct apple_write_arg *a = cl_arg;
	const int *xy = (const int *)STARPU_VECTOR_GET_PTR(buffers[0]);
	sp_err_t err = { 0 };
	if (sp_status_failed(a->ctx->status))
		return;
	int box = a->box_size > 0 ? a->box_size : a->pv->params.particle_size;
	/* Both are renamed into place together when the item has succeeded. */
	if (apple_star_write_into(a->star_tmp, a->star, xy, (size_t)a->pv->npick, &err) != 0) {
		sp_status_set_err(a->ctx->status, &err);
		return;
	}
	sp_item_report_num(a->ctx->item, "picks", a->pv->npick);
	if (a->box_tmp != NULL &&
	    apple_box_write_into(a->box_tmp, a->box, xy, (size_t)a->pv->npick, box, &err) != 0)
		sp_status_set_err(a->ctx->status, &err);
}

SP_CODELET(write_cl, "apple_write", write_cpu, SP_NO_CUDA, NULL, NULL, 1, STARPU_R);

static void write_free(sp_value_t *v)
{
	apple_write_val_t *w = (apple_write_val_t *)v;
	sp_task_join(&w->task);
	free(w->arg.star);
	free(w->arg.box);
	free(w);
}

static int write_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	apple_write_val_t *w = calloc(1, sizeof *w);
	if (w == NULL)
		return SP_ENOMEM;
	w->base.type = "apple.write";
	w->base.free_cb = write_free;
	*out = &w->base;
	w->arg.pv = (apple_picks_val_t *)in[0];
	w->arg.star = sp_item_param(item, st, "star");
	w->arg.box = sp_item_param(item, st, "box");
	w->arg.box_size = (int)((const struct write_params *)st->typed)->box_size;
	w->arg.ctx = sp_item_taskctx(item, st, "apple_write");
	if (w->arg.star == NULL || w->arg.box == NULL || w->arg.ctx == NULL)
		return SP_ENOMEM;
	sp_err_t err = { 0 };
	if (sp_item_output(item, w->arg.star, &w->arg.star_tmp, &err) != 0 ||
	    (w->arg.box[0] != '\0' && sp_item_output(item, w->arg.box, &w->arg.box_tmp, &err) != 0))
		return sp_status_set_err(sp_item_status(item), &err);
	struct starpu_task *task = starpu_task_build(&write_cl, STARPU_R, w->arg.pv->h,
						     STARPU_CL_ARGS_NFREE, &w->arg, sizeof w->arg,
						     SP_TASK_ARGS(w->arg.ctx), 0);
	if (task == NULL)
		return SP_ENOMEM;
	int ret = sp_task_submit_joinable(task, w->arg.ctx);
	if (ret != 0)
		return sp_status_set(sp_item_status(item), SP_ESTARPU, "%s: task submission failed (%d)",
				     w->arg.star, ret);
	w->task = task;
	return 0;
}

static const sp_param_spec_t write_params[] = {
	{ "star", SP_PT_OUTPUT, NULL, 0, -1, NULL, "RELION STAR file of the centres (x = column)", 0 },
	{ "box", SP_PT_OUTPUT, "", 0, -1, NULL, "EMAN BOX file (\"\": not written)", 0 },
	{ "box_size", SP_PT_INT, "0", 0, 100000, NULL, "BOX side; 0: particle_size",
	  SP_AT(struct write_params, box_size) },
};
static const sp_port_spec_t write_inputs[] = {
	{ "picks", "apple.picks", "particle centres" },
};

const sp_stage_kind_t sp_apple_write_kind = {
	.name = "apple.write",
	.help = "Write particle picks as RELION STAR (and EMAN BOX)",
	SP_KIND_PARAMS(write_params),
	.params_size = sizeof(struct write_params),
	SP_KIND_INPUTS(write_inputs),
	.impl = SP_IMPL_CPU,
	.codelets = "apple_write",
	.run = write_run,
};
