/* Internal to the batch driver (src/run/): a work item's
 * state and the batch's, and the functions its files share; not installed. */
#ifndef SP_BATCH_INT_H
#define SP_BATCH_INT_H

#include <stdatomic.h>
#include <starpu.h>

#include "fsutil.h"
#include "item.h"
#include "lanes.h"
#include "json.h"
#include "run.h"

enum item_state { IT_PENDING, IT_RUNNING, IT_OK, IT_FAILED, IT_SKIPPED, IT_CANCELLED,
		  IT_OTHER_SHARD /* not this shard's: not run, not reported */ };


#define SP__MAXREPORT 32

struct sp_ctxnode {
	struct sp_ctxnode *next;
	sp_taskctx_t ctx;
};

struct sp_item {
	const sp_graph_t *g;
	const char *path;
	size_t index;
	sp_status_t status;
	starpu_pthread_mutex_t lock;
	struct sp_ctxnode *ctxs;
	struct {
		char key[48];
		double value;
	} report[SP__MAXREPORT];
	size_t nreport;
	char **outputs; /* planned outputs, expanded */
	size_t noutputs;
	sp_outset_t out; /* their temporaries, while the item runs */
	_Atomic int state;
	double seconds;
	_Atomic double started; /* sp_now_s() when it began to run (0: not yet): --item-timeout */
	int lane; /* the lane that runs it (lanes.h); -1 before it is handed to one */
	struct sp_shared **shared; /* [nstages]: its batch-wide stages' entries (shared.c) */
	unsigned long long shared_held; /* bit s: it ran or borrowed entry shared[s] */
};


/* route.c: which lane takes the next item (under lock). */
#define SP_ROUTE_SLOTS 64 /* items in flight timed per lane (the drivers' cap) */
struct sp_route {
	starpu_pthread_mutex_t lock;
	int nlanes;
	size_t left;                  /* items not yet handed out (this process's count) */
	size_t drivers[SP_MAX_LANES]; /* driver threads of each lane */
	size_t taken[SP_MAX_LANES], declined[SP_MAX_LANES], done[SP_MAX_LANES];
	size_t running[SP_MAX_LANES]; /* items taken and not yet ended */
	size_t submitting[SP_MAX_LANES]; /* of those, items still submitting their tasks */
	/* their start times (clock()), NAN in a free slot */
	double t0[SP_MAX_LANES][SP_ROUTE_SLOTS];
	double mean_s[SP_MAX_LANES];  /* exponential mean of the lane's item times */
	/* lane-seconds: an item's time over the items in flight beside it */
	double w_ema[SP_MAX_LANES], w_sum[SP_MAX_LANES];
	double refused_t1[SP_MAX_LANES], refused_rest[SP_MAX_LANES]; /* the last refusal's figures */
	/* the item model's GPU-lane seconds between items (NAN: none), used
	 * until the GPU lane's first items in flight have ended */
	double gpu_item_s;
	/* when the GPU lane's workers joined the CPU lane (NAN: they did not),
	 * and the CPU lane's items in flight then */
	double joined_s;
	size_t joined_items;
	/* seconds on StarPU's clock (simulated under starpipe-sim); tests set
	 * their own */
	double (*clock)(void);
};
/* An item taken: the lane's items in flight with it, its start, and its
 * slot in t0 (-1: not timed). */
struct sp_route_ticket {
	size_t inflight;
	double t0;
	int slot;
};
void sp__route_init(struct sp_route *r, size_t items, const size_t *drivers, int nlanes);
void sp__route_free(struct sp_route *r);
/* Whether a driver of lane takes the next item: 1 (counted as handed
 * out; *tk, when not NULL, filled), 0 (the driver ends) or -1 (ask again
 * once an item has ended).  counted: the items left are this process's to
 * count (0 under MPI); prior_w: the CPU lane's seconds per item
 * (lane-seconds) before it has run one, or NAN. */
int sp__route_take(struct sp_route *r, int lane, int counted, double prior_w,
		   struct sp_route_ticket *tk);
/* A taken item that did not run (none left, or skipped): no longer in flight. */
void sp__route_release(struct sp_route *r, int lane, const struct sp_route_ticket *tk);
/* A taken item of lane has ended (now, on r->clock). */
void sp__route_done(struct sp_route *r, int lane, const struct sp_route_ticket *tk);
/* A taken item of lane has submitted all its tasks. */
void sp__route_submitted(struct sp_route *r, int lane);
/* 1 once a batch, when every item has been handed out, the GPU lane's
 * have all submitted their tasks, none of those a GPU may run is left
 * (gpu_cuda_pending: sp_runtime_gpu_lane_cuda_pending()), and the CPU lane
 * still has items in flight: the caller then lets the GPU lane's workers
 * take the CPU lane's tasks (sp_runtime_lanes_join()) to the batch's end. */
int sp__route_join_now(struct sp_route *r, long gpu_cuda_pending);
/* What the batch measured for the lanes' item model (lanes.h), from the
 * lanes' seconds per item: the CPU plan's core-seconds an item (times
 * ncpu[l], lane l's CPU workers; lane 0 too when it is the only lane and
 * had no CUDA worker; from 1 item) and the GPU lane's seconds per item
 * (from 2); counts 0 where not measured. */
void sp__route_measured(const struct sp_route *r, const unsigned *ncpu, const unsigned *ncuda,
			sp_lane_model_t *m);
/* The -v lines: each lane's drivers, items and mean item time. */
void sp__route_describe(const struct sp_route *r, FILE *f);

struct sp_batch {
	const sp_graph_t *g;
	char *const *items;
	size_t nitems;
	int lazy_plan; /* MPI ranks: an item is planned by the rank it is handed to */
	const sp_run_opts_t *opts;
	sp_item_t *state; /* one per item, kept for the report */
	atomic_size_t nok, nfailed, nskipped, ncancelled;
	/* the largest memory estimate of the items planned so far (bytes) */
	_Atomic unsigned long long need_max;
	int journal_fd;           /* -1: no journal */
	const char *journal_path; /* for messages */
	int journal_failed;       /* a line could not be written: the batch exits 1 */
	starpu_pthread_mutex_t journal_lock;
	/* Batch-wide stages: those whose parameters and inputs do not depend
	 * on the item (the DESI PSF).  Each runs once per distinct value among
	 * the items' graphs, as a pseudo-item; the items of that value borrow
	 * its outputs (shared.c). */
	unsigned char *batch_wide; /* [nstages] */
	starpu_pthread_mutex_t shared_lock;
	struct sp_shared *shared_list; /* every entry */
	unsigned long shared_clock;    /* counts releases, for the idle order */
	unsigned *shared_runs;         /* [nstages]: runs of each (again after an eviction) */
	unsigned *shared_values_n;     /* [nstages]: its distinct values in the batch */
	int shared_counted;            /* every user is planned here: free an entry at its last */
	struct sp_route route;      /* the lanes' share of the items */
	sp_lane_model_t lane_model; /* the lanes' item model when the batch began */
	int cpu_lane_ok;            /* every stage can run on CPUs: the CPU lane may take items */
	atomic_int drivers_done;    /* the drivers have ended (batch.c's joiner thread stops) */
};

/* item.c: frees the item's task contexts (its tasks are done). */
void sp__item_free_ctxs(sp_item_t *it);

/* shared.c: the batch-wide stages' entries: made for every item of the
 * batch (batch_wide[] found over the items' graphs); run (or borrowed) by
 * an item as its stage s, its outputs into out[]; released when the item
 * is done with them (ran: it reached its stages; an item skipped or
 * refused before running releases with 0), which fails the item when a
 * borrowed entry's tasks failed; all freed at the batch's end, which also
 * gives the runtime each stage's count for the report. */
int sp__shared_plan(struct sp_batch *b);
void sp__shared_run(struct sp_batch *b, sp_item_t *item, size_t s, sp_value_t *const *in,
		    sp_value_t **out);
void sp__shared_release(struct sp_batch *b, sp_item_t *item, int ran);
void sp__shared_free(struct sp_batch *b);

/* plan.c: an item's planned outputs, collisions between items, temporaries
 * of dead runs, and the checks before an item runs (skip, memory, space). */
int sp__plan_outputs(const sp_graph_t *g, const char *path, size_t index, char ***out,
			size_t *n, sp_err_t *why);
int sp__check_collisions(char *const *items, char **const *outs, const size_t *nouts,
			 size_t nitems, sp_err_t *err);
void sp__clean_stale(struct sp_batch *b);
void sp__plan_item(struct sp_batch *b, sp_item_t *it);
/* The memory an item may need: --memory-limit, else the machine's (or its
 * cgroup's); 0 when unknown. */
unsigned long long sp__memory_limit(const sp_run_opts_t *opts);
/* "1.5 GiB", "160 MiB", "551 KiB" into buf; returns buf. */
const char *sp__human_bytes(unsigned long long b, char *buf, size_t size);
void sp__free_strv(char **v, size_t n);

/* journal.c: one line per finished item; the name of a rank's part. */
void sp__journal_item(struct sp_batch *b, sp_item_t *it);
void sp__journal_part(const char *journal, int rank, char *buf, size_t size);

/* results.c: items as JSON for the report ("ok", "failed", ...). */
const char *sp__item_state_name(int s);
void sp__item_json(sp_json_t *j, sp_item_t *it, int rank);
char *sp__items_json(struct sp_batch *b, int handled_only);
void sp__free_strs(char **p, int n);

/* merge.c: an MPI batch's results gathered on rank 0 (every rank
 * calls it: collectives), and the ranks' journal parts merged. */
int sp__cluster_merge_batch(struct sp_batch *b, sp_run_result_t *res);
int sp__cluster_merge_journals(const char *journal, int nranks);

#endif /* SP_BATCH_INT_H */
