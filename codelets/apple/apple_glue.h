/* APPLE-Picker StarPU glue: the values that flow between the apple stages. */
#ifndef SP_APPLE_GLUE_H
#define SP_APPLE_GLUE_H

#include <starpu.h>

#include "../../src/item.h"
#include "apple.h"
#include "mrc.h"

/* Port type "apple.micrograph": the micrograph as float32 [ny][nx]. */
typedef struct apple_mic_val {
	sp_value_t base;
	apple_mrc_t hdr;
	char *path;
	float *data;
	starpu_data_handle_t h;
	struct apple_read_arg *arg;
} apple_mic_val_t;

/* Port type "apple.picks": particle centres (x, y) in original pixels. */
typedef struct apple_picks_val {
	sp_value_t base;
	apple_params_t params;
	int *xy;       /* [maxpick][2], starpu_malloc'd */
	int maxpick;
	int npick;     /* written by the pick task (read after the handle) */
	starpu_data_handle_t h; /* xy, and npick's ordering */
	struct apple_job *job;  /* the stages' shared job (a reference) */
} apple_picks_val_t;

#endif /* SP_APPLE_GLUE_H */
