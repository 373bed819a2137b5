/* A sweep's configurations and its runs' figures and failures: what every
 * output of starpipe tune (the summary, the CSV, the plots) reads of it. */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "tune_int.h"

/* The value of dimension d in configuration c (mixed radix, first dimension slowest). */
const char *tune_dim_val(const tune_t *t, size_t c, size_t d)
{
	size_t stride = 1;
	for (size_t e = d + 1; e < t->ndims; e++)
		stride *= t->dims[e].n;
	return t->dims[d].vals[(c / stride) % t->dims[d].n];
}

const char *tune_cfg_label(const tune_t *t, size_t c)
{
	return t->labels[c];
}

/* The graph file's name without its folder: plot titles name what ran, not
 * where it lay on the machine that ran it. */
const char *tune_graph_name(const tune_t *t)
{
	const char *slash = strrchr(t->graph, '/');
	return slash != NULL ? slash + 1 : t->graph;
}

const char *tune_fig(const row_t *r, const char *key)
{
	for (size_t i = 0; i < r->nf; i++)
		if (strcmp(r->f[i].k, key) == 0)
			return r->f[i].v;
	return NULL;
}

double tune_fig_num(const row_t *r, const char *key)
{
	const char *v = tune_fig(r, key);
	return v != NULL ? strtod(v, NULL) : NAN;
}

/* Why a child failed: its own first message ("starpipe: ...",
 * "starpipe-sim: ..."), not a warning (a node type without calibrated
 * models is said before anything fails) unless it said nothing else, else
 * the first line of its log that is neither StarPU's or SimGrid's
 * ("[starpu]...") nor the indented excerpt under a graph diagnostic
 * (SimGrid also writes unbracketed advice lines). */
void tune_why_failed(const char *out, size_t k, char *buf, size_t len)
{
	char path[4200], *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int own = 0; /* buf holds a warning of starpipe's */
	snprintf(path, sizeof path, "%s/runs/%04zu.log", out, k + 1);
	buf[0] = '\0';
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return;
	while ((n = getline(&line, &cap, f)) > 0) {
		if (line[n - 1] == '\n')
			line[--n] = '\0';
		if (strncmp(line, "starpipe", 8) == 0) {
			if (strstr(line, ": warning: ") == NULL) {
				snprintf(buf, len, "%s", line);
				break;
			}
			if (!own)
				snprintf(buf, len, "%s", line);
			own = 1;
			continue;
		}
		if (buf[0] == '\0' && n > 0 && line[0] != '[' && line[0] != ' ' && line[0] != '\t')
			snprintf(buf, len, "%s", line);
	}
	free(line);
	fclose(f);
}
