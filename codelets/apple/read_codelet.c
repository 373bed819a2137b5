/* StarPU glue of apple.read: an MRC or TIFF micrograph into a registered float32 buffer. */
#include <stdlib.h>

#include "sizes.h"
#include "stage.h"
#include "apple_glue.h"

struct apple_read_arg {
	sp_taskctx_t *ctx;
	apple_mic_val_t *v;
};

static void read_cpu(void *buffers[], void *cl_arg)
{
	struct apple_read_arg *a = cl_arg;
	sp_err_t err = { 0 };
	if (sp_status_failed(a->ctx->status))
		return;
	float *px = (float *)STARPU_VECTOR_GET_PTR(buffers[0]);
	if (apple_micfile_read_f32(a->v->path, &a->v->hdr, px, &err) != 0) {
		sp_status_set_err(a->ctx->status, &err);
		return;
	}
	/* A blank micrograph (every pixel the same: a detector or a transfer
	 * fault) has nothing to pick: every window's features are equal, the
	 * classification comes out uniform and APPLE would retrain in vain
	 * (minutes at 4k).  Said at once, as the item's failure. */
	const size_t n = (size_t)a->v->hdr.nx * (size_t)a->v->hdr.ny;
	size_t i = 1;
	while (i < n && px[i] == px[0])
		i++;
	if (n > 0 && i == n)
		sp_status_set(a->ctx->status, SP_EINVAL,
			      "%s: the micrograph is blank (every pixel is %g): nothing to pick",
			      a->v->path, (double)px[0]);
}

/* File I/O runs on CPU workers only. */
SP_CODELET(read_cl, "apple_read", read_cpu, SP_NO_CUDA, NULL, NULL, 1, STARPU_W);

static void mic_free(sp_value_t *v)
{
	apple_mic_val_t *m = (apple_mic_val_t *)v;
	if (m->h != NULL)
		starpu_data_unregister(m->h);
	sp_item_buffer_put(m->data, (size_t)m->hdr.ny * (size_t)m->hdr.nx * sizeof(float));
	free(m->arg);
	free(m->path);
	free(m);
}

/* The whole pick of a micrograph, from its size: APPLE_BYTES_PER_PIXEL was
 * measured as peak resident memory over pixels on simulated 4k micrographs
 * (doc/reliability.md), with a margin. */
#define APPLE_BYTES_PER_PIXEL 24.0
/* The micrograph is one StarPU vector of floats: at most SP_VECTOR_MAX_NX
 * pixels (apple_micfile_open() bounds the bytes only). */
static int pixels_check(const char *path, const apple_micfile_t *hdr, sp_err_t *err)
{
	if (!sp_vector_nx_ok((size_t)hdr->ny * (size_t)hdr->nx))
		return sp_seterr(err, SP_ESHAPE,
				 "%s: %d x %d pixels, more than the %zu a StarPU vector holds", path,
				 hdr->ny, hdr->nx, SP_VECTOR_MAX_NX);
	return 0;
}

static int read_estimate(sp_item_t *item, const sp_gstage_t *st, sp_estimate_t *e, sp_err_t *err)
{
	char *path = sp_item_param(item, st, "file");
	apple_micfile_t hdr;
	if (path == NULL)
		return sp_seterr(err, SP_ENOMEM, "out of memory");
	int rc = apple_micfile_open(path, &hdr, err);
	if (rc == 0)
		rc = pixels_check(path, &hdr, err);
	free(path);
	if (rc != 0)
		return rc;
	e->size = (double)hdr.nx * (double)hdr.ny;
	e->bytes += (unsigned long long)(APPLE_BYTES_PER_PIXEL * e->size);
	return 0;
}

static int read_run(sp_item_t *item, const sp_gstage_t *st, sp_value_t *const *in,
		    sp_value_t **out)
{
	sp_status_t *status = sp_item_status(item);
	apple_mic_val_t *m = calloc(1, sizeof *m);
	sp_err_t err = { 0 };
	(void)in;
	if (m == NULL)
		return SP_ENOMEM;
	m->base.type = "apple.micrograph";
	m->base.free_cb = mic_free;
	*out = &m->base;
	m->path = sp_item_param(item, st, "file");
	m->arg = calloc(1, sizeof *m->arg);
	if (m->path == NULL || m->arg == NULL)
		return SP_ENOMEM;
	/* The header now (sizes, mode, truncation); the pixels by a task. */
	if (apple_micfile_open(m->path, &m->hdr, &err) != 0 || pixels_check(m->path, &m->hdr, &err) != 0)
		return sp_status_set_err(status, &err);
	size_t n = (size_t)m->hdr.ny * (size_t)m->hdr.nx;
	if (sp_item_buffer_get((void **)&m->data, n * sizeof(float)) != 0) {
		m->data = NULL;
		return sp_status_set(status, SP_ENOMEM, "%s: cannot allocate %zu bytes", m->path,
				     n * sizeof(float));
	}
	starpu_vector_data_register(&m->h, STARPU_MAIN_RAM, (uintptr_t)m->data, (uint32_t)n,
				    sizeof(float));
	m->arg->v = m;
	m->arg->ctx = sp_item_taskctx(item, st, "apple_read");
	if (m->arg->ctx == NULL)
		return SP_ENOMEM;
	return sp_task_insert(m->arg->ctx, &read_cl, STARPU_W, m->h, STARPU_CL_ARGS_NFREE, m->arg,
			      sizeof *m->arg);
}

static const sp_param_spec_t read_params[] = {
	{ "file", SP_PT_PATH, NULL, 0, -1, NULL,
	  "micrograph: MRC (modes 0, 1, 2, 6, 12; one section) or, named .tif/.tiff, TIFF "
	  "(one grey page; 8/16-bit integer or 32-bit float; LZW or uncompressed, ...)", 0 },
};
static const sp_port_spec_t read_outputs[] = {
	{ "micrograph", "apple.micrograph", "the micrograph, float32 [rows][columns]" },
};

const sp_stage_kind_t sp_apple_read_kind = {
	.name = "apple.read",
	.help = "Read a cryo-EM micrograph (MRC or TIFF)",
	SP_KIND_TEXT_PARAMS(read_params),
	SP_KIND_OUTPUTS(read_outputs),
	.impl = SP_IMPL_CPU,
	.codelets = "apple_read",
	.run = read_run,
	.estimate = read_estimate,
};
