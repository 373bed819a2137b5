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

/* What the ranks exchange: per item its state, the rank that ran it and its
 * seconds; per rank its clock origin, dispatch round trip and texts (items,
 * stage and worker lines, host, models seen: gathered on rank 0 only). */
struct merge {
	struct sp_batch *b;
	size_t n;
	int nr, me;
	int *st, *who;
	double *sec, *t0, *rtt;
	char **parts, **stages, **workers, **hosts, **models;
};

/* every item's state, rank and seconds, and every rank's clock, made the
 * batch's on every rank (each item was handled by one rank; the others
 * still have it pending) */
static void merge_states(struct merge *m)
{
	for (size_t i = 0; i < m->n; i++) {
		int s = atomic_load(&m->b->state[i].state);
		m->st[i] = s;
		m->who[i] = s == IT_PENDING || s == IT_OTHER_SHARD ? -1 : m->me;
		m->sec[i] = s == IT_OK || s == IT_FAILED || s == IT_CANCELLED ? m->b->state[i].seconds
									       : 0.0;
	}
	m->t0[m->me] = sp_runtime_t0_wall();
	m->rtt[m->me] = sp_dispatch_mean_request_s();
	sp_cluster_allmax_int(m->st, 2 * m->n);
	sp_cluster_allmax_double(m->sec, m->n);
	sp_cluster_allmax_double(m->t0, 2 * (size_t)m->nr);
}

/* the ranks' texts gathered on rank 0; the trace events too when asked */
static int merge_texts(struct merge *m, const char *mine, const char *lines, const char *wlines,
		       sp_run_result_t *res)
{
	char mymodels[400];
	sp_runtime_models_seen_t seen;
	sp_runtime_models_seen(&seen);
	/* "NODE_TYPE\tCALIBRATED_CODELETS\tCALIBRATE" */
	snprintf(mymodels, sizeof mymodels, "%s\t%zu\t%d", seen.node_type, seen.ncalibrated,
		 seen.calibrate);
	int rc = sp_cluster_gather_str(mine, &m->parts);
	rc |= sp_cluster_gather_str(lines, &m->stages);
	rc |= sp_cluster_gather_str(wlines, &m->workers);
	rc |= sp_cluster_gather_str(sp_cluster_host(), &m->hosts);
	rc |= sp_cluster_gather_str(mymodels, &m->models);
	if (m->b->opts->trace) {
		char label[320];
		snprintf(label, sizeof label, "rank %d (%s)", m->me, sp_cluster_host());
		char *ev = sp_runtime_trace_events(m->me, label, (m->t0[m->me] - m->t0[0]) * 1e6);
		rc |= sp_cluster_gather_str(ev != NULL ? ev : "[]", &res->trace_events);
		free(ev);
		res->ntrace_events = res->trace_events != NULL ? (size_t)m->nr : 0;
	}
	return rc;
}

static void count_states(const struct merge *m, sp_run_result_t *res)
{
	for (size_t i = 0; i < m->n; i++) {
		res->nok += m->st[i] == IT_OK;
		res->nfailed += m->st[i] == IT_FAILED;
		res->nskipped += m->st[i] == IT_SKIPPED;
		res->ncancelled += m->st[i] == IT_CANCELLED;
		res->nnotrun += m->st[i] == IT_PENDING;
	}
}

/* items_detail: the ranks' items, then those no rank started */
static char *items_detail(const struct merge *m)
{
	sp_json_t *j = sp_json_new();
	char *out = NULL;
	sp_json_begin_array(j);
	for (int r = 0; r < m->nr; r++)
		sp_json_raw_elements(j, m->parts[r]);
	for (size_t i = 0; i < m->n; i++)
		if (m->st[i] == IT_PENDING)
			sp__item_json(j, &m->b->state[i], -1);
	sp_json_end_array(j);
	if (sp_json_text(j) != NULL)
		out = strdup(sp_json_text(j));
	sp_json_free(&j);
	return out;
}

/* one element of per_rank: its host, its models, what it did */
static void rank_json(sp_json_t *j, const struct merge *m, int r)
{
	size_t k[5] = { 0 };
	for (size_t i = 0; i < m->n; i++)
		if (m->who[i] == r) {
			k[0]++;
			k[1] += m->st[i] == IT_OK;
			k[2] += m->st[i] == IT_FAILED;
			k[3] += m->st[i] == IT_SKIPPED;
			k[4] += m->st[i] == IT_CANCELLED;
		}
	sp_json_begin_object(j);
	sp_json_kv_int(j, "rank", r);
	sp_json_kv_str(j, "host", m->hosts[r]);
	char nt[300] = "";
	size_t ncal = 0;
	int cal = 0;
	sscanf(m->models[r], "%299[^\t]\t%zu\t%d", nt, &ncal, &cal);
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
		sp_json_kv_num(j, "request_roundtrip_mean_us", 1e6 * m->rtt[r]);
	sp_json_end_object(j);
}

/* the ten slowest items, slowest first (consumes m->sec) */
static void slowest_json(sp_json_t *j, struct merge *m)
{
	sp_json_begin_array(j);
	for (int top = 0; top < 10; top++) {
		size_t best = SIZE_MAX;
		for (size_t i = 0; i < m->n; i++)
			if (m->sec[i] > 0 && (best == SIZE_MAX || m->sec[i] > m->sec[best]))
				best = i;
		if (best == SIZE_MAX)
			break;
		sp_json_begin_object(j);
		sp_json_kv_str(j, "item", m->b->state[best].path);
		sp_json_kv_int(j, "rank", m->who[best]);
		sp_json_kv_num(j, "seconds", m->sec[best]);
		sp_json_end_object(j);
		m->sec[best] = 0;
	}
	sp_json_end_array(j);
}

/* the report's cluster object: ranks, what each did, the slowest items */
static char *cluster_json(struct merge *m)
{
	sp_json_t *j = sp_json_new();
	char *out = NULL;
	sp_json_begin_object(j);
	sp_json_kv_int(j, "ranks", m->nr);
	sp_json_kv_num(j, "dispatch_answer_mean_us", 1e6 * sp_dispatch_mean_answer_s());
	sp_json_key(j, "per_rank");
	sp_json_begin_array(j);
	for (int r = 0; r < m->nr; r++)
		rank_json(j, m, r);
	sp_json_end_array(j);
	sp_json_key(j, "slowest_items");
	slowest_json(j, m);
	sp_json_end_object(j);
	if (sp_json_text(j) != NULL)
		out = strdup(sp_json_text(j));
	sp_json_free(&j);
	return out;
}

/* Rank 0's view of a batch over MPI ranks: every item's final state, the
 * counts, one items_detail array, per-stage and per-worker figures of every
 * rank (for a summary and a report that speak for the batch) and the
 * "cluster" object of the report.  Every rank calls it (collectives); the
 * counts are the batch's on every rank. */
int sp__cluster_merge_batch(struct sp_batch *b, sp_run_result_t *res)
{
	struct merge m = { .b = b, .n = b->nitems, .nr = sp_cluster_size(),
			   .me = sp_cluster_rank() };
	size_t n = m.n;
	m.st = calloc(n ? 2 * n : 1, sizeof *m.st);
	m.who = m.st + n;
	m.sec = calloc(n ? n : 1, sizeof *m.sec);
	m.t0 = calloc(2 * (size_t)m.nr, sizeof *m.t0);
	m.rtt = m.t0 + m.nr;
	char *mine = sp__items_json(b, 1), *lines = sp_runtime_stage_lines();
	char *wlines = sp_runtime_worker_lines(m.me);
	if (m.st == NULL || m.sec == NULL || m.t0 == NULL || mine == NULL || lines == NULL ||
	    wlines == NULL) {
		/* the collectives must still happen on every rank: MPI has no
		 * way to leave some out, so running out of memory here ends the job */
		fprintf(stderr, "starpipe: rank %d: out of memory merging the batch\n", m.me);
		abort();
	}
	merge_states(&m);
	int rc = merge_texts(&m, mine, lines, wlines, res);
	count_states(&m, res);
	if (m.me == 0 && rc == 0) {
		res->stage_lines = concat(m.stages, m.nr);
		res->worker_lines = concat(m.workers, m.nr);
		res->items_json = items_detail(&m);
		res->cluster_json = cluster_json(&m);
	}
	int kept = m.me == 0 ? m.nr : 0;
	sp__free_strs(m.parts, kept);
	sp__free_strs(m.stages, kept);
	sp__free_strs(m.workers, kept);
	sp__free_strs(m.hosts, kept);
	sp__free_strs(m.models, kept);
	free(mine);
	free(lines);
	free(wlines);
	free(m.st);
	free(m.sec);
	free(m.t0);
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
