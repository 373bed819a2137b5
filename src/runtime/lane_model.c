/* The lanes' item model: per pipeline, what an item costs each lane, kept
 * beside StarPU's models (lanes.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lanes.h"
#include "runtime_int.h"

/*
 * DESIGN.  StarPU's models are per task; the router (src/run/route.c)
 * needs per item figures before the batch has any: what an item of the
 * CPU plan costs the CPU lane (core-seconds: the lane's seconds per item,
 * route.c's lane-seconds, times its cores), how fast the GPU lane ends
 * items (its seconds per item) and what its items ask of the CPU workers
 * (their busy seconds per item: the cores the GPU lane keeps, lanes.c).  Each batch that
 * measured one adds it to PMDIR/starpipe-lanes.NODE, one line per
 * pipeline, as a mean over at most LANE_MODEL_WEIGHT items, so that the
 * node's recent runs count most and a changed code or node shows within a
 * few batches.  The file is rewritten under a temporary name and renamed:
 * ranks of one node type that end together lose a batch's figures, never
 * the file.
 */

#define LANE_MODEL_WEIGHT 64
#define LANE_MODEL_MAX 64 /* pipelines in one file */

struct line {
	char pipeline[128];
	sp_lane_model_t m;
};

static void model_path(char *buf, size_t len)
{
	snprintf(buf, len, "%s/starpipe-lanes.%s", sp__rt.pmdir, sp__rt.node_type);
}

/* Reads the file's lines into l[] (at most LANE_MODEL_MAX); their count. */
static int read_lines(const char *path, struct line *l)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	char buf[512];
	int n = 0;
	while (n < LANE_MODEL_MAX && fgets(buf, sizeof buf, f) != NULL) {
		if (buf[0] == '#')
			continue;
		struct line *x = &l[n];
		if (sscanf(buf, "%127s %lf %ld %lf %ld %lf %ld", x->pipeline, &x->m.cpu_core_s,
			   &x->m.cpu_items, &x->m.gpu_item_s, &x->m.gpu_items, &x->m.gpu_feed_s,
			   &x->m.gpu_feed_items) != 7 ||
		    !(x->m.cpu_core_s >= 0) || !(x->m.gpu_item_s >= 0) || !(x->m.gpu_feed_s >= 0) ||
		    x->m.cpu_items < 0 || x->m.gpu_items < 0 || x->m.gpu_feed_items < 0)
			continue; /* a line this version cannot read: dropped at the next write */
		n++;
	}
	fclose(f);
	return n;
}

int sp_runtime_lane_model_get(const char *pipeline, sp_lane_model_t *m)
{
	*m = (sp_lane_model_t){ NAN, 0, NAN, 0, NAN, 0 };
	if (pipeline == NULL || sp__rt.pmdir[0] == '\0')
		return -1;
	char path[4400];
	model_path(path, sizeof path);
	struct line l[LANE_MODEL_MAX];
	const int n = read_lines(path, l);
	for (int i = 0; i < n; i++)
		if (strcmp(l[i].pipeline, pipeline) == 0) {
			if (l[i].m.cpu_items > 0)
				m->cpu_core_s = l[i].m.cpu_core_s, m->cpu_items = l[i].m.cpu_items;
			if (l[i].m.gpu_items > 0)
				m->gpu_item_s = l[i].m.gpu_item_s, m->gpu_items = l[i].m.gpu_items;
			if (l[i].m.gpu_feed_items > 0)
				m->gpu_feed_s = l[i].m.gpu_feed_s,
				m->gpu_feed_items = l[i].m.gpu_feed_items;
			return 0;
		}
	return -1;
}

/* x's mean over n items with a batch's mean y over k items (n then at most
 * LANE_MODEL_WEIGHT, so that older batches fade). */
static void merge(double *x, long *n, double y, long k)
{
	if (!(y >= 0) || k <= 0)
		return;
	*x = *n > 0 ? ((double)*n * *x + (double)k * y) / (double)(*n + k) : y;
	*n = *n + k < LANE_MODEL_WEIGHT ? *n + k : LANE_MODEL_WEIGHT;
}

int sp_runtime_lane_model_add(const char *pipeline, const sp_lane_model_t *batch)
{
	if (pipeline == NULL || sp__rt.pmdir[0] == '\0' || strlen(pipeline) >= 128 ||
	    strpbrk(pipeline, " \t\n") != NULL)
		return -1;
	if (batch->cpu_items <= 0 && batch->gpu_items <= 0 && batch->gpu_feed_items <= 0)
		return 0;
	char path[4400], tmp[4500];
	model_path(path, sizeof path);
	struct line l[LANE_MODEL_MAX + 1];
	int n = read_lines(path, l), i = 0;
	while (i < n && strcmp(l[i].pipeline, pipeline) != 0)
		i++;
	if (i == n) {
		snprintf(l[n].pipeline, sizeof l[n].pipeline, "%s", pipeline);
		l[n].m = (sp_lane_model_t){ 0, 0, 0, 0, 0, 0 };
		n++;
	}
	merge(&l[i].m.cpu_core_s, &l[i].m.cpu_items, batch->cpu_core_s, batch->cpu_items);
	merge(&l[i].m.gpu_item_s, &l[i].m.gpu_items, batch->gpu_item_s, batch->gpu_items);
	merge(&l[i].m.gpu_feed_s, &l[i].m.gpu_feed_items, batch->gpu_feed_s, batch->gpu_feed_items);
	snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
	const int fd = mkstemp(tmp);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (f == NULL) {
		if (fd >= 0)
			close(fd), unlink(tmp);
		return -1;
	}
	fprintf(f, "# starpipe's lanes' item model (doc/scheduling.md, \"Lanes\"): per pipeline,\n"
		   "# the CPU plan's core-seconds an item, the GPU lane's seconds per item and\n"
		   "# its CPU workers' seconds per item, each a mean over its last items (at\n"
		   "# most %d)\n"
		   "# pipeline\tcpu_core_s\tcpu_items\tgpu_item_s\tgpu_items\tgpu_feed_s\tgpu_feed_items\n",
		LANE_MODEL_WEIGHT);
	for (int j = 0; j < n; j++)
		fprintf(f, "%s\t%.6g\t%ld\t%.6g\t%ld\t%.6g\t%ld\n", l[j].pipeline,
			l[j].m.cpu_core_s, l[j].m.cpu_items, l[j].m.gpu_item_s, l[j].m.gpu_items,
			l[j].m.gpu_feed_s, l[j].m.gpu_feed_items);
	const int bad = ferror(f) != 0;
	if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
		const int e = errno;
		unlink(tmp);
		errno = e;
		return -1;
	}
	return 0;
}
