/* StarPU glue of apple.write: the picks as RELION STAR (ASPIRE's, RELION's or
 * cryoSPARC's columns) and, on request, EMAN BOX and CSV files. */
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "stage.h"
#include "apple_glue.h"
#include "micfile.h"
#include "preview.h"
#include "star.h"

struct apple_write_arg {
	sp_taskctx_t *ctx;
	apple_picks_val_t *pv;
	char *star, *box, *csv, *png;
	const char *star_tmp, *box_tmp, *csv_tmp, *png_tmp; /* temporaries of the item's output set */
	int box_size;
	int preview_size;
	int format; /* apple_star_format_t of the STAR */
};

/* apple.write's parameters parsed once (star, box and csv are per-item paths). */
struct write_params {
	long long box_size;
	int star_format; /* aspire|relion|cryosparc: apple_star_format_t's order */
	int csv;         /* also <star less .star>.csv */
	int preview;     /* also <star less .star>.png */
	long long preview_size;
};

/* A file beside `star`: its name with ext (".csv", ".png") for .star (or
 * ext appended). */
static char *sibling_name(const char *star, const char *ext)
{
	size_t n = strlen(star), e = strlen(ext);
	if (n > 5 && strcmp(star + n - 5, ".star") == 0)
		n -= 5;
	char *s = malloc(n + e + 1);
	if (s != NULL) {
		memcpy(s, star, n);
		memcpy(s + n, ext, e + 1);
	}
	return s;
}

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
	size_t n = (size_t)a->pv->npick;
	/* cryoSPARC matches picks to micrographs by file name */
	const char *slash = strrchr(a->pv->path, '/');
	const char *mic = slash != NULL ? slash + 1 : a->pv->path;
	/* All are renamed into place together when the item has succeeded. */
	if (apple_picks_write_into(a->star_tmp, a->star, (apple_star_format_t)a->format, mic, xy,
				   a->pv->score, n, &err) != 0 ||
	    (a->box_tmp != NULL &&
	     apple_box_write_into(a->box_tmp, a->box, xy, n, box, &err) != 0) ||
	    (a->csv_tmp != NULL && apple_picks_write_into(a->csv_tmp, a->csv, APPLE_STAR_CSV, mic,
							  xy, a->pv->score, n, &err) != 0)) {
		sp_status_set_err(a->ctx->status, &err);
		return;
	}
	if (a->png_tmp != NULL) {
		/* The micrograph again: the preview is optional, its pixels were
		 * released after preprocessing. */
		apple_micfile_t hdr;
		float *img = NULL;
		int rc = apple_micfile_load_f32(a->pv->path, &hdr, &img, &err);
		if (rc == 0)
			rc = apple_preview_write_into(a->png_tmp, a->png, img, hdr.ny, hdr.nx, xy, n,
						      a->pv->params.particle_size, a->preview_size,
						      &err);
		free(img);
		if (rc != 0) {
			sp_status_set_err(a->ctx->status, &err);
			return;
		}
	}
	sp_item_report_num(a->ctx->item, "picks", a->pv->npick);
}

SP_CODELET(write_cl, "apple_write", write_cpu, SP_NO_CUDA, NULL, NULL, 1, STARPU_R);

static void write_free(sp_value_t *v)
{
	apple_write_val_t *w = (apple_write_val_t *)v;
	sp_task_join(&w->task);
	free(w->arg.star);
	free(w->arg.box);
	free(w->arg.csv);
	free(w->arg.png);
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
	const struct write_params *wp = st->typed;
	w->arg.csv = wp->csv && w->arg.star != NULL ? sibling_name(w->arg.star, ".csv") : strdup("");
	w->arg.png = wp->preview && w->arg.star != NULL ? sibling_name(w->arg.star, ".png") : strdup("");
	w->arg.preview_size = (int)wp->preview_size;
	w->arg.box_size = (int)wp->box_size;
	w->arg.format = wp->star_format;
	w->arg.ctx = sp_item_taskctx(item, st, "apple_write");
	if (w->arg.star == NULL || w->arg.box == NULL || w->arg.csv == NULL || w->arg.png == NULL ||
	    w->arg.ctx == NULL)
		return SP_ENOMEM;
	sp_err_t err = { 0 };
	if (sp_item_output(item, w->arg.star, &w->arg.star_tmp, &err) != 0 ||
	    (w->arg.box[0] != '\0' && sp_item_output(item, w->arg.box, &w->arg.box_tmp, &err) != 0) ||
	    (w->arg.csv[0] != '\0' && sp_item_output(item, w->arg.csv, &w->arg.csv_tmp, &err) != 0) ||
	    (w->arg.png[0] != '\0' && sp_item_output(item, w->arg.png, &w->arg.png_tmp, &err) != 0))
		return sp_status_set_err(sp_item_status(item), &err);
	return sp_task_insert_joinable(w->arg.ctx, &w->task, &write_cl, STARPU_R, w->arg.pv->h,
				       STARPU_CL_ARGS_NFREE, &w->arg, sizeof w->arg);
}

/* --skip-existing: the STAR and BOX files parse, whole (star.h). */
static int write_verify(const sp_gstage_t *st, const char *param, const char *path,
			sp_err_t *err)
{
	(void)st;
	return strcmp(param, "box") == 0 ? apple_box_verify(path, err)
					 : apple_star_verify(path, err);
}

static const sp_param_spec_t write_params[] = {
	{ "star", SP_PT_OUTPUT, NULL, 0, -1, NULL, "RELION STAR file of the centres (x = column)", 0 },
	{ "star_format", SP_PT_ENUM, "aspire", 0, -1, "aspire|relion|cryosparc",
	  "STAR columns: aspire: X Y (ASPIRE's file byte for byte); relion: X Y "
	  "_rlnAutopickFigureOfMerit; cryosparc: _rlnMicrographName X Y _rlnAutopickFigureOfMerit",
	  SP_AT(struct write_params, star_format) },
	{ "csv", SP_PT_BOOL, "false", 0, -1, NULL,
	  "also write the picks as CSV (x,y,score) beside the STAR file, named as it with .csv",
	  SP_AT(struct write_params, csv) },
	{ "preview", SP_PT_BOOL, "false", 0, -1, NULL,
	  "also write a PNG of the micrograph with the picks circled beside the STAR file, "
	  "named as it with .png (ASPIRE's --create_jpg)", SP_AT(struct write_params, preview) },
	{ "preview_size", SP_PT_INT, "1024", 16, 16384, NULL,
	  "longest side of the preview in pixels at most (the micrograph binned by whole factors)",
	  SP_AT(struct write_params, preview_size) },
	{ "box", SP_PT_OUTPUT, "", 0, -1, NULL, "EMAN BOX file (\"\": not written)", 0 },
	{ "box_size", SP_PT_INT, "0", 0, 100000, NULL, "BOX side; 0: particle_size",
	  SP_AT(struct write_params, box_size) },
};
static const sp_port_spec_t write_inputs[] = {
	{ "picks", "apple.picks", "particle centres" },
};

const sp_stage_kind_t sp_apple_write_kind = {
	.name = "apple.write",
	.help = "Write particle picks as RELION STAR (and EMAN BOX, CSV, a PNG preview)",
	SP_KIND_PARAMS(write_params, struct write_params),
	SP_KIND_INPUTS(write_inputs),
	.impl = SP_IMPL_CPU,
	.codelets = "apple_write",
	.run = write_run,
	.verify = write_verify,
};
