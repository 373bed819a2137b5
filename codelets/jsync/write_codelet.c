/* StarPU glue of jsync.write: signs and synchronized rotations as NPY files. */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "npy.h"
#include "fsutil.h"
#include "stage.h"
#include "jsync_glue.h"

struct jsync_write_arg {
	sp_taskctx_t *ctx;
	char *signs_path, *synced_path;
	const char *signs_tmp, *synced_tmp; /* temporaries of the item's output set */
	int64_t P;
};

typedef struct jsync_write_val {
	sp_value_t base;
	struct jsync_write_arg *arg;
	struct starpu_task *task; /* not detached: freed by starpu_task_wait */
} jsync_write_val_t;

struct synced_fill {
	const double *s, *R;
};

/* J R J with J = diag(-1, -1, 1) negates row-major entries 2, 5, 6, 7 of
 * the rotations whose sign is -1.  Produced block by block as the file is
 * written: no second copy of the P x 9 rotations. */
static void synced_fill_cb(void *ctx, int64_t first, int64_t n, double *buf)
{
	const struct synced_fill *f = ctx;
	for (int64_t k = 0; k < n; k++) {
		int64_t e = first + k, p = e / 9, c = e % 9;
		double v = f->R[e];
		if (f->s[p] < 0 && (c == 2 || c == 5 || c == 6 || c == 7))
			v = -v;
		buf[k] = v;
	}
}

static void write_cpu(void *buffers[], void *cl_arg)
{
	struct jsync_write_arg *a = cl_arg;
	const double *s = (const double *)STARPU_VECTOR_GET_PTR(buffers[0]);
	const double *R = (const double *)STARPU_VECTOR_GET_PTR(buffers[1]);
	int64_t shape[3] = { a->P, 3, 3 };
	sp_err_t err = { 0 };

	if (sp_status_failed(a->ctx->status))
		return;
	/* Both files are temporaries of the item's output set: they are renamed
	 * into place together when the item has succeeded. */
	if (sp_npy_write_f8_into(a->signs_tmp, a->signs_path, s, 1, shape, &err) != 0) {
		sp_status_set_err(a->ctx->status, &err);
		return;
	}
	if (a->synced_tmp == NULL)
		return;
	struct synced_fill f = { s, R };
	if (sp_npy_write_f8_fill(a->synced_tmp, a->synced_path, 3, shape, synced_fill_cb, &f,
				 &err) != 0)
		sp_status_set_err(a->ctx->status, &err);
}

SP_CODELET(write_cl, "jsync_write", write_cpu, SP_NO_CUDA, NULL, NULL, 2, STARPU_R, STARPU_R);

static void write_free(sp_value_t *v)
{
	jsync_write_val_t *w = (jsync_write_val_t *)v;
	/* The task may still run: wait for it before freeing its argument. */
	sp_task_join(&w->task);
	if (w->arg != NULL) {
		free(w->arg->signs_path);
		free(w->arg->synced_path);
		free(w->arg);
	}
	free(w);
}

static int write_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		     sp_value_t **out)
{
	jsync_signs_t *s = (jsync_signs_t *)in[0];
	jsync_rijs_t *r = (jsync_rijs_t *)in[1];
	jsync_write_val_t *w = calloc(1, sizeof *w);
	struct jsync_write_arg *a = calloc(1, sizeof *a);

	if (w == NULL || a == NULL) {
		free(w);
		free(a);
		return SP_ENOMEM;
	}
	/* A value with no port: it only ties the argument's lifetime to the item. */
	w->base.type = "jsync.write";
	w->base.free_cb = write_free;
	w->arg = a;
	*out = &w->base;
	a->P = s->P;
	a->signs_path = sp_item_param(item, st, "signs");
	a->synced_path = sp_item_param(item, st, "synced");
	if (a->signs_path == NULL || a->synced_path == NULL)
		return SP_ENOMEM;
	a->ctx = sp_item_taskctx(item, st, "jsync_write");
	if (a->ctx == NULL)
		return SP_ENOMEM;
	sp_err_t err = { 0 };
	if (sp_item_output(item, a->signs_path, &a->signs_tmp, &err) != 0 ||
	    (a->synced_path[0] != '\0' &&
	     sp_item_output(item, a->synced_path, &a->synced_tmp, &err) != 0))
		return sp_status_set_err(sp_item_status(item), &err);
	return sp_task_insert_joinable(a->ctx, &w->task, &write_cl, STARPU_R, s->h, STARPU_R, r->h,
				       STARPU_CL_ARGS_NFREE, a, sizeof *a);
}

/* --skip-existing: an existing output's NPY header parses, its size is the
 * one its shape says (sp_npy_open), and the shape is the parameter's: [P]
 * for the signs, [P, 3, 3] for the synced rotations. */
static int write_verify(const sp_gstage_t *st, const char *param, const char *path,
			sp_err_t *err)
{
	sp_npy_t h;
	(void)st;
	int rc = sp_npy_open(path, &h, err);
	if (rc != 0)
		return rc;
	int synced = strcmp(param, "synced") == 0;
	if (synced ? h.ndim != 3 || h.shape[1] != 3 || h.shape[2] != 3 : h.ndim != 1)
		return sp_seterr(err, SP_ESHAPE, "%s: not of shape %s", path,
				 synced ? "(P, 3, 3)" : "(P,)");
	return 0;
}

static const sp_param_spec_t write_params[] = {
	{ "signs", SP_PT_OUTPUT, NULL, 0, -1, NULL, "output NPY float64 [P]: +1 keep, -1 conjugate", 0 },
	{ "synced", SP_PT_OUTPUT, "", 0, -1, NULL,
	  "output NPY float64 [P, 3, 3]: J R J where the sign is -1 (\"\": not written)", 0 },
};
static const sp_port_spec_t write_inputs[] = {
	{ "signs", "jsync.signs", "signs of the pairs" },
	{ "rijs", "jsync.rijs", "the relative rotations they apply to" },
};

const sp_stage_kind_t sp_jsync_write_kind = {
	.name = "jsync.write",
	.help = "Write signs and synchronized rotations as NPY",
	SP_KIND_TEXT_PARAMS(write_params),
	SP_KIND_INPUTS(write_inputs),
	.impl = SP_IMPL_CPU,
	.codelets = "jsync_write",
	.run = write_run,
	.verify = write_verify,
};
