/* Topological order of a graph's stages (Kahn's algorithm), and its cycles reported. */
#include "graph_int.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/*
 * DESIGN: the stages are sorted by Kahn's algorithm, with a binary heap of
 * the ready stages so that, among them, file order comes first: the order
 * of a graph without cycles is stable and readable, and the sort stays
 * linear in stages and edges even for a generated graph of thousands of
 * stages.  What Kahn's algorithm leaves is on a cycle, or downstream or
 * upstream of one; pruning what has no remaining producer or consumer
 * leaves the cycles, each reported once, from its first stage in file
 * order, along the data flow.
 */

/* The graph's edges for sp__graph_toposort(): a stage's producers are its
 * inputs; its consumers are cons[cstart[i] .. cstart[i + 1]), one per input
 * that it feeds (an edge counts as often as it appears, on both sides). */
typedef struct {
	sp_gstage_t *all;
	size_t n, *cstart, *cons;
	char *left;     /* still to be explained: on or around a cycle */
	size_t *lp, *lc; /* per stage: edges from / to stages still left */
	size_t *queue, nq;
} topo_t;

static size_t nin(const sp_gstage_t *st)
{
	return st->kind != NULL ? st->kind->ninputs : 0;
}

/* Drops stage i from the left ones; queues those it leaves with no left
 * producer or consumer. */
static void topo_drop(topo_t *t, size_t i)
{
	const sp_gstage_t *st = &t->all[i];

	t->left[i] = 0;
	for (size_t k = 0; k < nin(st); k++) {
		size_t j = st->inputs[k].stage;

		if (j != NOT_CONNECTED && t->left[j] && --t->lc[j] == 0)
			t->queue[t->nq++] = j;
	}
	for (size_t e = t->cstart[i]; e < t->cstart[i + 1]; e++) {
		size_t j = t->cons[e];

		if (t->left[j] && --t->lp[j] == 0)
			t->queue[t->nq++] = j;
	}
}

/* Drops, until none is left, stages with no remaining producer or no
 * remaining consumer: the rest lies on cycles. */
static void topo_prune(topo_t *t)
{
	while (t->nq > 0) {
		size_t i = t->queue[--t->nq];

		if (t->left[i])
			topo_drop(t, i);
	}
}

/* A binary min-heap of stage indices: among ready stages, file order first. */
static void heap_push(size_t *h, size_t *n, size_t v)
{
	size_t i = (*n)++;

	while (i > 0 && h[(i - 1) / 2] > v) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = v;
}

static size_t heap_pop(size_t *h, size_t *n)
{
	size_t top = h[0], v = h[--*n], i = 0;

	for (;;) {
		size_t k = 2 * i + 1;

		if (k >= *n)
			break;
		if (k + 1 < *n && h[k + 1] < h[k])
			k++;
		if (h[k] >= v)
			break;
		h[i] = h[k];
		i = k;
	}
	if (*n > 0)
		h[i] = v;
	return top;
}

/* the consumers' table: cstart and cons, and each stage's indegree */
static void topo_edges(topo_t *t, size_t *indeg)
{
	const sp_gstage_t *all = t->all;
	size_t n = t->n, ne = 0;

	t->cstart = sp__xcalloc(n + 1, sizeof *t->cstart);
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < nin(&all[i]); k++)
			if (all[i].inputs[k].stage != NOT_CONNECTED) {
				t->cstart[all[i].inputs[k].stage + 1]++;
				indeg[i]++;
				ne++;
			}
	for (size_t i = 0; i < n; i++)
		t->cstart[i + 1] += t->cstart[i];
	t->cons = sp__xcalloc(ne, sizeof *t->cons);
	size_t *fill = sp__xcalloc(n, sizeof *fill);
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < nin(&all[i]); k++) {
			size_t j = all[i].inputs[k].stage;

			if (j != NOT_CONNECTED)
				t->cons[t->cstart[j] + fill[j]++] = i;
		}
	free(fill);
}

/* Kahn's algorithm proper: the order's length; indeg keeps, for each stage
 * left out, its edges from stages also left out */
static size_t topo_kahn(topo_t *t, size_t *indeg, size_t *order)
{
	size_t *heap = sp__xcalloc(t->n, sizeof *heap);
	size_t norder = 0, nheap = 0;

	for (size_t i = 0; i < t->n; i++)
		if (indeg[i] == 0)
			heap_push(heap, &nheap, i);
	while (nheap > 0) {
		size_t i = heap_pop(heap, &nheap);

		order[norder++] = i;
		for (size_t e = t->cstart[i]; e < t->cstart[i + 1]; e++)
			if (--indeg[t->cons[e]] == 0)
				heap_push(heap, &nheap, t->cons[e]);
	}
	free(heap);
	return norder;
}

/* What Kahn's left is on a cycle, or downstream or upstream of one: the
 * left stages, their edge counts, pruned down to the cycles. */
static void topo_left(topo_t *t, size_t *indeg)
{
	size_t n = t->n;

	t->left = sp__xcalloc(n, 1);
	t->lp = indeg; /* what Kahn's left of it counts the edges from left stages */
	t->lc = sp__xcalloc(n, sizeof *t->lc);
	t->queue = sp__xcalloc(3 * n + 1, sizeof *t->queue); /* each stage queued <= 3 times */
	for (size_t i = 0; i < n; i++)
		t->left[i] = indeg[i] != 0;
	for (size_t i = 0; i < n; i++)
		for (size_t e = t->cstart[i]; e < t->cstart[i + 1]; e++)
			t->lc[i] += t->left[i] && t->left[t->cons[e]];
	for (size_t i = 0; i < n; i++)
		if (t->left[i] && (t->lp[i] == 0 || t->lc[i] == 0))
			t->queue[t->nq++] = i;
	topo_prune(t);
}

/* Walks producers (the first in file order) from `first` until a stage
 * repeats: path[*start..len) is then a cycle, against the data flow; the
 * path's length. pos[] is all SIZE_MAX before and after. */
static size_t topo_walk(const topo_t *t, size_t first, size_t *path, size_t *pos, size_t *start)
{
	size_t len = 0, at = first;

	while (pos[at] == SIZE_MAX) {
		size_t j = NOT_CONNECTED;

		pos[at] = len;
		path[len++] = at;
		for (size_t k = 0; k < nin(&t->all[at]); k++) {
			size_t p = t->all[at].inputs[k].stage;

			if (p != NOT_CONNECTED && t->left[p] && (j == NOT_CONNECTED || p < j))
				j = p;
		}
		assert(j != NOT_CONNECTED);
		at = j;
	}
	*start = pos[at];
	for (size_t k = 0; k < len; k++)
		pos[path[k]] = SIZE_MAX;
	return len;
}

/* The cycle path[start..len) reported with the flow, from its first stage
 * in file order (at most 16 stages of it); then the stages that were only
 * on its path are dropped by pruning again. */
static void topo_report(sp_diag_t *d, topo_t *t, const size_t *path, size_t start, size_t len)
{
	size_t m = start, clen = len - start;
	char cut[SP__NAME_MAX + 4];
	sbuf_t b = { 0 };

	for (size_t k = start; k < len; k++)
		if (path[k] < path[m])
			m = k;
	sp__sb_add(&b, "cycle: ");
	for (size_t k = 0, q = m; k <= clen; k++) {
		if (k < 15 || k == clen) {
			sp__sb_add(&b, sp__diag_clip(cut, t->all[path[q]].name));
			if (k < clen)
				sp__sb_add(&b, " -> ");
		} else if (k == 15) {
			char more[64];

			snprintf(more, sizeof more, "... (%zu more) -> ", clen - 15);
			sp__sb_add(&b, more);
		}
		q = q == start ? len - 1 : q - 1;
	}
	sp_diag_add(d, t->all[path[m]].loc, "%s", b.s);
	free(b.s);
	for (size_t k = start; k < len; k++)
		if (t->left[path[k]])
			topo_drop(t, path[k]);
	topo_prune(t);
}

/* Kahn's algorithm, as declared in graph_int.h.  Linear in stages and
 * edges, but for the walks that find cycles. */
size_t sp__graph_toposort(sp_diag_t *d, sp_gstage_t *all, size_t n, size_t *order)
{
	topo_t t = { all, n, NULL, NULL, NULL, NULL, NULL, NULL, 0 };
	size_t *indeg = sp__xcalloc(n, sizeof *indeg);
	size_t *path = sp__xcalloc(n + 1, sizeof *path), *pos = sp__xcalloc(n, sizeof *pos);

	topo_edges(&t, indeg);
	size_t norder = topo_kahn(&t, indeg, order);
	topo_left(&t, indeg);
	for (size_t i = 0; i < n; i++)
		pos[i] = SIZE_MAX;
	/* Stages before `first` are all done with: going on from it is
	 * rescanning from the start of the file. */
	for (size_t first = 0; first < n; first++)
		while (t.left[first]) {
			size_t start, len = topo_walk(&t, first, path, pos, &start);
			topo_report(d, &t, path, start, len);
		}
	free(indeg);
	free(path);
	free(pos);
	free(t.cstart);
	free(t.cons);
	free(t.left);
	free(t.lc);
	free(t.queue);
	return norder;
}
