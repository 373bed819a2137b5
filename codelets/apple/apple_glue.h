/* APPLE-Picker StarPU glue: the values that flow between the apple stages. */
#ifndef SP_APPLE_GLUE_H
#define SP_APPLE_GLUE_H

#include <starpu.h>

#include "item.h"
#include "apple.h"
#include "micfile.h"

/* Port type "apple.micrograph": the micrograph as float32 [ny][nx]. */
typedef struct apple_mic_val {
	sp_value_t base;
	apple_micfile_t hdr; /* MRC or TIFF: sizes and how to read */
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
	double *score; /* [maxpick]: apple_pick_scores(), written by the pick task */
	int maxpick;
	int npick;     /* written by the pick task (read after the handle) */
	starpu_data_handle_t h; /* xy, and npick's ordering */
	struct apple_job *job;  /* the stages' shared job (a reference) */
	const char *path;       /* the micrograph's, borrowed from the job */
} apple_picks_val_t;

/*
 * Nominal costs of the compute tasks (apple_job.c), for StarPU's
 * performance models (STARPU_FLOPS, and the size column through size_base)
 * and the GPU times tools/sim-node estimates from them.  Functions of the
 * task's shape, known when it is submitted, but for the classification's
 * number of support vectors (see classify_declare_flops()); each
 * function's comment states its formula.  flops: multiply, add, divide,
 * comparison 1 each (a multiply-add 2); an FFT of N real points
 * 2.5 N log2 N.  bytes: what the CUDA twin's steps read and write in
 * device memory, each array element once per step (intermediates
 * included, the micrograph only in its crop).
 */

/* Nonzero taps of apple_lowpass_kernel() (x^2 + 2 y^2 <= 35.8). */
#define APPLE_LOWPASS_TAPS 79
/* One exp() of the classification: CUDA's exp(double) on its usual path
 * (PTX for sm_80) is 14 FMAs, an add and a range test. */
#define APPLE_EXP_FLOPS 30

double apple_prepare_flops(const apple_sizes_t *s);
double apple_prepare_bytes(const apple_sizes_t *s);
/* A score task over nquery query windows. */
double apple_score_flops(const apple_sizes_t *s, int nquery);
double apple_score_bytes(const apple_sizes_t *s, int nquery);
/* A classify task over nrows rows of window positions, against nsv support
 * vectors. */
double apple_classify_flops(const apple_sizes_t *s, int nrows, int nsv);
double apple_classify_bytes(const apple_sizes_t *s, int nrows, int nsv);
double apple_morph_flops(const apple_sizes_t *s);
double apple_morph_bytes(const apple_sizes_t *s);

#endif /* SP_APPLE_GLUE_H */
