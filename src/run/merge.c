/* An MPI batch's results on rank 0: items, counts, per-stage and per-worker
 * figures and traces of every rank gathered, and the ranks' journal parts merged. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "batch_int.h"
#include "cluster.h"
#include "runtime.h"

/* The ranks' texts end to end (malloc'd; NULL on ENOMEM). */
static char *concat(char **parts, int n)
{
	size_t len = 1;
	for (int r = 0; r < n; r++)
		len += strlen(parts[r]);
	char *out = malloc(len);
	if (out != NULL) {
		out[0] = '\0';
		for (int r = 0; r < n; r++)
			strcat(out, parts[r]);
	}
	return out;
}

/* Rank 0's view of a batch over MPI ranks: every item's final state (each
 * item was handled by one rank; the others still have it pending), the
 * counts, one items_detail array, per-stage and per-worker figures of every
 * rank (for a summary and a report that speak for the batch) and the
 * "cluster" object of the report.  Every rank calls it (collectives); the
 * counts are the batch's on every rank. */
int sp__cluster_merge_batch(struct sp_batch *b, sp_run_result_t *res)
{
	size_t n = b->nitems;
	int nr = sp_cluster_size(), me = sp_cluster_rank();
	int *st = calloc(n ? 2 * n : 1, sizeof *st), *who = st + n;
	double *sec = calloc(n ? n : 1, sizeof *sec);
	double *t0 = calloc(2 * (size_t)nr, sizeof *t0), *rtt = t0 + nr;
	char *mine = sp__items_json(b, 1), *lines = sp_runtime_stage_lines();
	char *wlines = sp_runtime_worker_lines(me);
	char **parts = NULL, **stages = NULL, **workers = NULL, **hosts = NULL, **models = NULL;
	char mymodels[400];
	sp_runtime_models_seen_t seen;
	sp_runtime_models_seen(&seen);
	/* "NODE_TYPE\tCALIBRATED_CODELETS\tCALIBRATE" */
	snprintf(mymodels, sizeof mymodels, "%s\t%zu\t%d", seen.node_type, seen.ncalibrated,
		 seen.calibrate);
	if (st == NULL || sec == NULL || t0 == NULL || mine == NULL || lines == NULL ||
	    wlines == NULL) {
		/* the collectives must still happen on every rank: MPI has no
		 * way to leave some out, so running out of memory here ends the job */
		fprintf(stderr, "starpipe: rank %d: out of memory merging the batch\n", me);
		abort();
	}
	for (size_t i = 0; i < n; i++) {
		int s = atomic_load(&b->state[i].state);
		st[i] = s;
		who[i] = s == IT_PENDING || s == IT_OTHER_SHARD ? -1 : me;
		sec[i] = s == IT_OK || s == IT_FAILED || s == IT_CANCELLED ? b->state[i].seconds : 0.0;
	}
	t0[me] = sp_runtime_t0_wall();
	rtt[me] = sp_dispatch_mean_request_s();
	sp_cluster_allmax_int(st, 2 * n);
	sp_cluster_allmax_double(sec, n);
	sp_cluster_allmax_double(t0, 2 * (size_t)nr);
	int rc = sp_cluster_gather_str(mine, &parts);
	rc |= sp_cluster_gather_str(lines, &stages);
	rc |= sp_cluster_gather_str(wlines, &workers);
	rc |= sp_cluster_gather_str(sp_cluster_host(), &hosts);
	rc |= sp_cluster_gather_str(mymodels, &models);
	if (b->opts->trace) {
		char label[320];
		snprintf(label, sizeof label, "rank %d (%s)", me, sp_cluster_host());
		char *ev = sp_runtime_trace_events(me, label, (t0[me] - t0[0]) * 1e6);
		rc |= sp_cluster_gather_str(ev != NULL ? ev : "[]", &res->trace_events);
		free(ev);
		res->ntrace_events = res->trace_events != NULL ? (size_t)nr : 0;
	}
	for (size_t i = 0; i < n; i++) {
		res->nok += st[i] == IT_OK;
		res->nfailed += st[i] == IT_FAILED;
		res->nskipped += st[i] == IT_SKIPPED;
		res->ncancelled += st[i] == IT_CANCELLED;
		res->nnotrun += st[i] == IT_PENDING;
	}
	if (me == 0 && rc == 0) {
		sp_json_t *j = sp_json_new();
		res->stage_lines = concat(stages, nr);
		res->worker_lines = concat(workers, nr);
		/* items_detail: the ranks' items, then those no rank started */
		sp_json_begin_array(j);
		for (int r = 0; r < nr; r++)
			sp_json_raw_elements(j, parts[r]);
		for (size_t i = 0; i < n; i++)
			if (st[i] == IT_PENDING)
				sp__item_json(j, &b->state[i], -1);
		sp_json_end_array(j);
		if (sp_json_text(j) != NULL)
			res->items_json = strdup(sp_json_text(j));
		sp_json_free(&j);
		/* the cluster object: ranks, what each did, the slowest items */
		j = sp_json_new();
		sp_json_begin_object(j);
		sp_json_kv_int(j, "ranks", nr);
		sp_json_kv_num(j, "dispatch_answer_mean_us", 1e6 * sp_dispatch_mean_answer_s());
		sp_json_key(j, "per_rank");
		sp_json_begin_array(j);
		for (int r = 0; r < nr; r++) {
			size_t k[5] = { 0 };
			for (size_t i = 0; i < n; i++)
				if (who[i] == r) {
					k[0]++;
					k[1] += st[i] == IT_OK;
					k[2] += st[i] == IT_FAILED;
					k[3] += st[i] == IT_SKIPPED;
					k[4] += st[i] == IT_CANCELLED;
				}
			sp_json_begin_object(j);
			sp_json_kv_int(j, "rank", r);
			sp_json_kv_str(j, "host", hosts[r]);
			char nt[300] = "";
			size_t ncal = 0;
			int cal = 0;
			sscanf(models[r], "%299[^\t]\t%zu\t%d", nt, &ncal, &cal);
			sp_json_kv_str(j, "node_type", nt);
			sp_json_kv_int(j, "calibrated_codelets", (long long)ncal);
			sp_json_key(j, "writes_models");
			sp_json_raw(j, cal != 0 ? "true" : "false");
			sp_json_kv_int(j, "items", (long long)k[0]);
			sp_json_kv_int(j, "ok", (long long)k[1]);
			sp_json_kv_int(j, "failed", (long long)k[2]);
			sp_json_kv_int(j, "skipped", (long long)k[3]);
			sp_json_kv_int(j, "cancelled", (long long)k[4]);
			if (r > 0)
				sp_json_kv_num(j, "request_roundtrip_mean_us", 1e6 * rtt[r]);
			sp_json_end_object(j);
		}
		sp_json_end_array(j);
		sp_json_key(j, "slowest_items");
		sp_json_begin_array(j);
		for (int top = 0; top < 10; top++) {
			size_t best = SIZE_MAX;
			for (size_t i = 0; i < n; i++)
				if (sec[i] > 0 && (best == SIZE_MAX || sec[i] > sec[best]))
					best = i;
			if (best == SIZE_MAX)
				break;
			sp_json_begin_object(j);
			sp_json_kv_str(j, "item", b->state[best].path);
			sp_json_kv_int(j, "rank", who[best]);
			sp_json_kv_num(j, "seconds", sec[best]);
			sp_json_end_object(j);
			sec[best] = 0;
		}
		sp_json_end_array(j);
		sp_json_end_object(j);
		if (sp_json_text(j) != NULL)
			res->cluster_json = strdup(sp_json_text(j));
		sp_json_free(&j);
	}
	sp__free_strs(parts, me == 0 ? nr : 0);
	sp__free_strs(stages, me == 0 ? nr : 0);
	sp__free_strs(workers, me == 0 ? nr : 0);
	sp__free_strs(hosts, me == 0 ? nr : 0);
	sp__free_strs(models, me == 0 ? nr : 0);
	free(mine);
	free(lines);
	free(wlines);
	free(st);
	free(sec);
	free(t0);
	return rc;
}


/* Appends the ranks' parts to the journal; 0, or -1 when one could not be
 * merged (it is kept, and said so). */
int sp__cluster_merge_journals(const char *journal, int nranks)
{
	sp_err_t err = { 0 };
	int out = sp_open_append(journal, "the journal", &err), rc = 0;
	if (out < 0) {
		fprintf(stderr, "starpipe: %s; the ranks' parts are kept\n", err.msg);
		return -1;
	}
	for (int r = 0; r < nranks; r++) {
		char part[PATH_MAX + 32];
		sp__journal_part(journal, r, part, sizeof part);
		FILE *in = fopen(part, "re");
		if (in == NULL)
			continue;
		/* one part at a time, whole: a part is a few lines per item */
		char *text = NULL;
		size_t len = 0, got;
		FILE *mem = open_memstream(&text, &len);
		char buf[65536];
		int ok = mem != NULL;
		while (ok && (got = fread(buf, 1, sizeof buf, in)) > 0)
			ok = fwrite(buf, 1, got, mem) == got;
		ok = ok && !ferror(in);
		fclose(in);
		if (mem != NULL && fclose(mem) != 0)
			ok = 0;
		int e = ok ? 0 : EIO;
		if (ok && len > 0 && sp_append_record(out, text, len) != 0) {
			e = errno;
			ok = 0;
		}
		free(text);
		if (ok) {
			unlink(part); /* merged: the part goes */
		} else {
			fprintf(stderr, "starpipe: %s: could not merge %s (%s); it is kept\n", journal,
				part, strerror(e));
			rc = -1;
		}
	}
	if (close(out) != 0)
		rc = -1;
	return rc;
}
