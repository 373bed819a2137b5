/* The batch's journal: one JSON line per finished item, synced as it is written. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "batch_int.h"
#include "cluster.h"

/* One JSON line per finished item, written and synced at once, so that a
 * crash loses nothing already recorded.  A line that cannot be written (a
 * full disk, an I/O error) fails the batch: the journal is what a user
 * resumes from, so it must not be silently incomplete.  It is said once,
 * and nothing more is appended, so the journal never has a gap. */
void sp__journal_item(struct sp_batch *b, sp_item_t *it)
{
	if (b->journal_fd < 0)
		return;
	sp_json_t *j = sp_json_new();
	if (j == NULL) {
		starpu_pthread_mutex_lock(&b->journal_lock);
		if (!b->journal_failed)
			fprintf(stderr, "starpipe: %s: cannot write the journal: out of memory; %s and "
				"the items that end after it are not recorded\n", b->journal_path,
				it->path);
		b->journal_failed = 1;
		starpu_pthread_mutex_unlock(&b->journal_lock);
		return;
	}
	int st = atomic_load(&it->state);
	sp_json_begin_object(j);
	sp_json_kv_str(j, "item", it->path);
	sp_json_kv_str(j, "status", sp__item_state_name(st));
	if (b->lazy_plan)
		sp_json_kv_int(j, "rank", sp_cluster_rank());
	sp_json_key(j, "outputs");
	sp_json_begin_array(j);
	for (size_t k = 0; k < it->noutputs; k++)
		sp_json_str(j, it->outputs[k]);
	sp_json_end_array(j);
	sp_json_kv_num(j, "seconds", it->seconds);
	if (st == IT_FAILED || st == IT_CANCELLED)
		sp_json_kv_str(j, "message", it->status.err.msg);
	/* a failed input's size and mtime: starpipe run --follow runs it again
	 * once it has changed (a writer that was not done) */
	struct stat sb;
	if (st == IT_FAILED && stat(it->path, &sb) == 0 && S_ISREG(sb.st_mode)) {
		char mt[48];
		snprintf(mt, sizeof mt, "%lld.%09ld", (long long)sb.st_mtim.tv_sec,
			 (long)sb.st_mtim.tv_nsec);
		sp_json_kv_int(j, "input_size", (long long)sb.st_size);
		sp_json_kv_str(j, "input_mtime", mt);
	}
	sp_json_end_object(j);
	char *line = NULL;
	int len = sp_json_text(j) != NULL ? asprintf(&line, "%s\n", sp_json_text(j)) : -1;
	sp_json_free(&j);
	starpu_pthread_mutex_lock(&b->journal_lock);
	if (!b->journal_failed) {
		int e = 0;
		if (len < 0)
			e = ENOMEM;
		else if (sp_append_record(b->journal_fd, line, (size_t)len) != 0)
			e = errno != 0 ? errno : EIO;
		if (e != 0) {
			b->journal_failed = 1;
			fprintf(stderr, "starpipe: %s: cannot write the journal: %s; %s and the items "
				"that end after it are not recorded\n", b->journal_path, strerror(e),
				it->path);
		}
	}
	starpu_pthread_mutex_unlock(&b->journal_lock);
	if (len >= 0)
		free(line);
}


/* The journal's file: FILE, or FILE.rankR for rank R of an MPI batch (rank 0
 * appends them all to FILE at the end). */
void sp__journal_part(const char *journal, int rank, char *buf, size_t size)
{
	snprintf(buf, size, "%s.rank%d", journal, rank);
}
