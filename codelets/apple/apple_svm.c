/* APPLE-Picker CPU kernels, steps 4-5: the training set and the SVM
 * (libsvm), the classification of every window. */
#include "apple.h"
#include "apple_kern.h"
#include "apple_score_isa.h"
#include "cancel.h"
#include "cpuisa.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libsvm/svm.h>

/* ---- steps 4-5: training set, SVM -------------------------------------- */

typedef struct { int32_t score; int32_t idx; } scored_t;

static int scored_cmp(const void *a, const void *b)
{
	const scored_t *x = a, *y = b;
	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return (x->idx > y->idx) - (x->idx < y->idx);
}

int apple_training_set(const apple_sizes_t *s, const double *im, const int32_t *score, int tau1,
		       int tau2, double *feat, int *npos, int *nneg, unsigned char *work)
{
	const int ny = s->ny, nx = s->nx, q = s->query, h = q / 2, g = s->gy, nq = s->gy * s->gx;
	unsigned char *mp = work, *mn = work + (size_t)ny * nx;
	scored_t *ord = malloc(sizeof *ord * (size_t)nq);

	*npos = *nneg = 0;
	if (ord == NULL)
		return SP_ENOMEM;
	memset(work, 0, 2 * (size_t)ny * nx);
	/* ASPIRE flattens the score in Fortran order (row index fastest) */
	for (int j = 0; j < s->gx; j++)
		for (int i = 0; i < g; i++) {
			ord[j * g + i].score = score[(size_t)i * s->gx + j];
			ord[j * g + i].idx = j * g + i;
		}
	qsort(ord, (size_t)nq, sizeof *ord, scored_cmp);
	for (int t = 0; t < tau2 && t < nq; t++) {
		int i = ord[t].idx % g, j = ord[t].idx / g;
		int r0 = i * h, c0 = j * h, r1 = r0 + q < ny ? r0 + q : ny;
		int c1 = c0 + q < nx ? c0 + q : nx;
		for (int r = r0; r < r1; r++) {
			if (t < tau1)
				memset(mp + (size_t)r * nx + c0, 1, (size_t)(c1 - c0));
			memset(mn + (size_t)r * nx + c0, 1, (size_t)(c1 - c0));
		}
	}
	free(ord);

	const int nby = ny / q, nbx = nx / q;
	int np_ = 0, nn_ = 0;
	double *pos = feat;
	/* count positives first so that negatives follow them; blocks in
	 * column-major order (block row b fastest), as ASPIRE's */
	for (int pass = 0; pass < 2; pass++)
		for (int d = 0; d < nbx; d++)
			for (int b = 0; b < nby; b++) {
				int allp = 1, none = 1;
				for (int c = 0; c < q && (allp || none); c++)
					for (int a = 0; a < q; a++) {
						size_t o = (size_t)(b * q + a) * nx + d * q + c;
						allp &= mp[o] != 0;
						none &= mn[o] == 0;
					}
				if ((pass == 0 && !allp) || (pass == 1 && !none))
					continue;
				double sum = 0.0, ss = 0.0;
				for (int c = 0; c < q; c++)
					for (int a = 0; a < q; a++)
						sum += im[(size_t)(b * q + a) * nx + d * q + c];
				double mu = sum / ((double)q * q);
				for (int c = 0; c < q; c++)
					for (int a = 0; a < q; a++) {
						double e = im[(size_t)(b * q + a) * nx + d * q + c] - mu;
						ss += e * e;
					}
				double *o = pos + 2 * (size_t)(np_ + nn_);
				o[0] = mu;
				o[1] = sqrt(ss / ((double)q * q));
				if (pass == 0)
					np_++;
				else
					nn_++;
			}
	*npos = np_;
	*nneg = nn_;
	return 0;
}

static void svm_quiet(const char *s)
{
	(void)s;
}

apple_svm_t *apple_svm_new(const double *feat, int npos, int nneg)
{
	const int l = npos + nneg;
	apple_svm_t *m;
	struct svm_node *nodes;
	struct svm_node **xs;
	double *y;

	if (npos <= 0 || nneg <= 0)
		return NULL;
	m = calloc(1, sizeof *m);
	nodes = malloc(sizeof *nodes * 3 * (size_t)l);
	xs = malloc(sizeof *xs * (size_t)l);
	y = malloc(sizeof *y * (size_t)l);
	if (m == NULL || nodes == NULL || xs == NULL || y == NULL)
		goto fail;

	/* StandardScaler: population mean and std over the training set */
	for (int f = 0; f < 2; f++) {
		double sum = 0.0, ss = 0.0;
		for (int i = 0; i < l; i++)
			sum += feat[2 * i + f];
		double mu = sum / l;
		for (int i = 0; i < l; i++)
			ss += (feat[2 * i + f] - mu) * (feat[2 * i + f] - mu);
		double sd = sqrt(ss / l);
		m->mu[f] = mu;
		m->scale[f] = sd > 0.0 ? sd : 1.0;
	}
	/* label-0 (negative) rows first: libsvm orders classes by first
	 * appearance, scikit-learn's copy by label value */
	for (int i = 0; i < l; i++) {
		int src = i < nneg ? npos + i : i - nneg;
		struct svm_node *x = nodes + 3 * (size_t)i;
		x[0].index = 1;
		x[0].value = (feat[2 * src] - m->mu[0]) / m->scale[0];
		x[1].index = 2;
		x[1].value = (feat[2 * src + 1] - m->mu[1]) / m->scale[1];
		x[2].index = -1;
		x[2].value = 0.0;
		xs[i] = x;
		y[i] = i < nneg ? 0.0 : 1.0;
	}

	int wl[2] = {0, 1};
	double wt[2] = {(double)l / (2.0 * nneg), (double)l / (2.0 * npos)};
	struct svm_parameter par = {
		.svm_type = C_SVC, .kernel_type = RBF, .degree = 3, .gamma = 0.5, .coef0 = 0.0,
		.cache_size = 200, .eps = 1e-3, .C = 1.0, .nr_weight = 2, .weight_label = wl,
		.weight = wt, .nu = 0.5, .p = 0.1, .shrinking = 1, .probability = 0,
	};
	struct svm_problem prob = {.l = l, .y = y, .x = xs};
	if (svm_check_parameter(&prob, &par) != NULL)
		goto fail;
	svm_set_print_string_function(svm_quiet);
	struct svm_model *model = svm_train(&prob, &par);
	if (model == NULL)
		goto fail;

	m->gamma = par.gamma;
	m->rho = model->rho[0];
	m->nsv = model->l;
	m->label_pos = model->label[0]; /* decision > 0 votes for the first class */
	m->npos = npos;
	m->nneg = nneg;
	m->sv = malloc(sizeof *m->sv * 2 * (size_t)(m->nsv > 0 ? m->nsv : 1));
	m->coef = malloc(sizeof *m->coef * (size_t)(m->nsv > 0 ? m->nsv : 1));
	if (m->sv == NULL || m->coef == NULL) {
		svm_free_and_destroy_model(&model);
		goto fail;
	}
	for (int i = 0; i < m->nsv; i++) {
		const struct svm_node *x = model->SV[i];
		m->sv[2 * i] = 0.0;
		m->sv[2 * i + 1] = 0.0;
		for (; x->index != -1; x++)
			m->sv[2 * i + (x->index - 1)] = x->value;
		m->coef[i] = model->sv_coef[0][i];
	}
	svm_free_and_destroy_model(&model);
	free(nodes);
	free(xs);
	free(y);
	return m;
fail:
	free(nodes);
	free(xs);
	free(y);
	apple_svm_free(&m);
	return NULL;
}

void apple_svm_free(apple_svm_t **mp)
{
	apple_svm_t *m = *mp;

	if (m == NULL)
		return;
	free(m->sv);
	free(m->coef);
	free(m);
	*mp = NULL;
}

double apple_svm_decision(const apple_svm_t *m, double f0, double f1)
{
	/* libsvm: k = exp(-gamma sum (x - sv)^2), sum_k coef_k k - rho, in SV order */
	double sum = 0.0;

	for (int i = 0; i < m->nsv; i++) {
		double d0 = f0 - m->sv[2 * i], d1 = f1 - m->sv[2 * i + 1];
		double d2 = 0.0;
		d2 += d0 * d0;
		d2 += d1 * d1;
		sum += m->coef[i] * exp(-m->gamma * d2);
	}
	return sum - m->rho;
}

/* The SVM's decision value for a window's moments, standardised as in
 * training. */
static double window_decision(const apple_svm_t *m, double mean, double std)
{
	return apple_svm_decision(m, (mean - m->mu[0]) / m->scale[0], (std - m->mu[1]) / m->scale[1]);
}

void apple_classify_rows(const apple_svm_t *m, const double *mean, const double *std, int nw,
			 int r0, int r1, uint8_t *seg)
{
	const apple_score_simd_t *v = apple_score_simd(sp_cpu_isa());
	enum { CHUNK = 256 };
	double d[CHUNK];

	for (int r = r0; r < r1; r++) {
		if (sp_cancel_requested())
			return; /* a stop: the segmentation is dropped (cancel.h) */
		for (int c0 = 0; c0 < nw; c0 += CHUNK) {
			const int n = nw - c0 < CHUNK ? nw - c0 : CHUNK;
			const size_t o = (size_t)r * nw + c0;
			v->decisions(m, mean + o, std + o, n, d);
			for (int c = 0; c < n; c++) {
				int label = d[c] > 0 ? m->label_pos : 1 - m->label_pos;
				seg[(size_t)(r - r0) * nw + c0 + c] = (uint8_t)(label == 1);
			}
		}
	}
}

void apple_pick_scores(const apple_params_t *p, const apple_sizes_t *s, const apple_svm_t *m,
		       const double *mean, const double *std, const int *xy, int n, double *score)
{
	const int nwy = s->nwy, nwx = s->nwx, lo = s->query / 2 - 1;
	for (int k = 0; k < n; k++) {
		/* apple_pick(): x = 2 (cx + 2 lo + 1) + margin_left, window column cx + lo */
		int c = (xy[2 * k] - p->margin_left) / 2 - lo - 1;
		int r = (xy[2 * k + 1] - p->margin_top) / 2 - lo - 1;
		c = c < 0 ? 0 : c >= nwx ? nwx - 1 : c;
		r = r < 0 ? 0 : r >= nwy ? nwy - 1 : r;
		size_t o = (size_t)r * nwx + c;
		double d = window_decision(m, mean[o], std[o]);
		score[k] = m->label_pos == 1 ? d : -d;
	}
}

size_t apple_svm_cuda_size(const apple_svm_t *m)
{
	return (size_t)m->nsv * 3;
}

void apple_svm_cuda_pack(const apple_svm_t *m, double *svc)
{
	for (int i = 0; i < m->nsv; i++) {
		svc[3 * i] = m->sv[2 * i];
		svc[3 * i + 1] = m->sv[2 * i + 1];
		svc[3 * i + 2] = m->coef[i];
	}
}

int apple_seg_uniform(const uint8_t *seg, size_t n)
{
	size_t ones = 0;

	for (size_t i = 0; i < n; i++)
		ones += seg[i] != 0;
	return ones == n ? 1 : ones == 0 ? -1 : 0;
}

