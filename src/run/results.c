/* The batch's results: per-item figures as JSON for the run report. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "batch_int.h"
#include "lanes.h"
#include "cluster.h"

const char *sp__item_state_name(int s)
{
	switch (s) {
	case IT_OK: return "ok";
	case IT_FAILED: return "failed";
	case IT_SKIPPED: return "skipped";
	case IT_CANCELLED: return "cancelled";
	case IT_RUNNING: return "running";
	default: return "not run";
	}
}


void sp__item_json(sp_json_t *j, sp_item_t *it, int rank)
{
	int st = atomic_load(&it->state);
	sp_json_begin_object(j);
	sp_json_kv_str(j, "item", it->path);
	sp_json_kv_str(j, "status", sp__item_state_name(st));
	if (rank >= 0)
		sp_json_kv_int(j, "rank", rank);
	if (st == IT_FAILED || st == IT_CANCELLED)
		sp_json_kv_str(j, "error", it->status.err.msg);
	if (st == IT_OK || st == IT_FAILED || st == IT_CANCELLED)
		sp_json_kv_num(j, "seconds", it->seconds);
	if (sp_runtime_nlanes() > 1 && it->lane >= 0)
		sp_json_kv_str(j, "lane", sp_runtime_lane_name(it->lane));
	for (size_t k = 0; k < it->nreport; k++)
		sp_json_kv_num(j, it->report[k].key, it->report[k].value);
	sp_json_end_object(j);
}

/* The per-item figures: every item of this shard, or (handled_only: MPI
 * ranks) only the items this rank handled, with its rank. */
char *sp__items_json(struct sp_batch *b, int handled_only)
{
	sp_json_t *j = sp_json_new();
	char *out = NULL;
	if (j == NULL)
		return NULL;
	sp_json_begin_array(j);
	for (size_t i = 0; i < b->nitems; i++) {
		int st = atomic_load(&b->state[i].state);
		if (st == IT_OTHER_SHARD || (handled_only && st == IT_PENDING))
			continue;
		sp__item_json(j, &b->state[i], handled_only ? sp_cluster_rank() : -1);
	}
	sp_json_end_array(j);
	if (sp_json_text(j) != NULL)
		out = strdup(sp_json_text(j));
	sp_json_free(&j);
	return out;
}

void sp__free_strs(char **p, int n)
{
	for (int r = 0; p != NULL && r < n; r++)
		free(p[r]);
	free(p);
}


void sp_run_result_free(sp_run_result_t *res)
{
	free(res->items_json);
	free(res->stage_lines);
	free(res->worker_lines);
	free(res->cluster_json);
	sp__free_strs(res->trace_events, (int)res->ntrace_events);
	res->items_json = res->stage_lines = res->worker_lines = res->cluster_json = NULL;
	res->trace_events = NULL;
	res->ntrace_events = 0;
}
