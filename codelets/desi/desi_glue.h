/* DESI StarPU glue: the values that flow between the desi stages. */
#ifndef SP_DESI_GLUE_H
#define SP_DESI_GLUE_H

#include <starpu.h>

#include "item.h"
#include "frame_io.h"
#include "plan.h"
#include "psf.h"

/* Per-spectrum fields of the frame buffer, [nspec][DESI_NFIELD][nwave]
 * floats: one contiguous block per subbundle, so that each subbundle task
 * writes its own partition and stitching needs no copy. */
enum {
	DESI_F_FLUX,
	DESI_F_IVAR,
	DESI_F_CHI2PIX,
	DESI_F_PIXMASK,
	DESI_F_RES0, /* 2 ndiag + 1 resolution rows follow */
};
#define DESI_NDIAG 5
#define DESI_NFIELD (DESI_F_RES0 + 2 * DESI_NDIAG + 1)
/* The chunks' rows carry one more field after these, the deconvolved flux
 * (desi_batch_t.xflux), when desi.model computes the 2-D model; the frame
 * does not. */

/* Port type "desi.psf". */
typedef struct desi_psf_val {
	sp_value_t base;
	desi_psf_t *psf;
	char *path;
} desi_psf_val_t;

/* Port type "desi.image": IMAGE and IVAR (masked pixels at ivar 0). */
typedef struct desi_image_val {
	sp_value_t base;
	desi_image_t img;
	char *path;
	char *fibermap; /* the fibermap= parameter: "" for the image's own */
	starpu_data_handle_t pix, ivar;
	struct desi_image_arg *arg;
} desi_image_val_t;

/* Port type "desi.frame": the extracted spectra, stitched. */
typedef struct desi_frame_val {
	sp_value_t base;
	desi_plan_t plan;
	float *buf; /* [nspec][DESI_NFIELD][nwave], starpu_malloc'd */
	double *wave;
	starpu_data_handle_t h;
	const char *psf_path, *image_path, *fibermap_path; /* borrowed from the producers */
	double heliocor; /* barycentric factor applied to wave; 0: none */
	int ntiles;      /* the extraction's tiles (subbundles), for a tiled writer */
	struct desi_job *job; /* the extraction stages' shared job (a reference) */
} desi_frame_val_t;

/* sp_stage_kind_t.verify of the kinds that write FITS files (desi.write,
 * desi.model), for --skip-existing: desi_output_verify(). */
int desi_stage_verify(const sp_gstage_t *st, const char *param, const char *path,
		      sp_err_t *err);

#endif /* SP_DESI_GLUE_H */
