/* Lower bounds of a run's makespan, from the tasks it ran and their performance models. */
#ifndef SP_BOUND_H
#define SP_BOUND_H

#include <stddef.h>

struct starpu_task;

/*
 * DESIGN: two classic bounds, each computed over the tasks of the run:
 *
 * - the area bound: every task on its fastest architecture for the node's
 *   worker mix, work spread perfectly over the workers (the fractional
 *   assignment; with CPUs and GPUs it is the smallest T such that the tasks
 *   GPUs do best relative to CPUs fill the GPUs' T and the rest fits in the
 *   CPUs' T);
 * - the critical path: the longest chain of dependent tasks, each at its
 *   time on its fastest architecture.  The dependencies are rebuilt from
 *   each task's data and access modes in submission (job id) order, as
 *   StarPU's implicit dependencies make them.  (StarPU's own recorder,
 *   starpu_bound_start with dependencies, crashes in 1.3 on a reduction
 *   handle.)  A dependency not made through data (a driver that waited for
 *   a task before submitting the next; a partition's parent and its
 *   pieces) is missing from the chain, so the path can only be shorter
 *   than the true one: still a lower bound.
 *
 * A task's time on an architecture is its history model's mean for the
 * task's footprint (starpu_task_expected_length).  Without a calibrated
 * model for that architecture the task's measured duration stands in where
 * it ran, and it counts as "measured" in the result: a bound from measured
 * durations is a bound of this run, not of the schedule space.
 */

/* Starts recording (after starpu_init; before the first task). */
void sp_bound_begin(void);

/* Records a finished task (from its completion callback). */
void sp_bound_task(struct starpu_task *task, int worker, double duration_us);

typedef struct sp_bound {
	double area_s;   /* the area bound */
	double path_s;   /* the critical path */
	size_t ntasks;   /* tasks recorded */
	size_t nmeasured; /* of which timed by their measured duration */
	size_t nedges;   /* dependencies seen */
	unsigned ncpu, ncuda; /* the workers the area is spread over */
} sp_bound_t;

/* Computes both bounds over the tasks recorded so far (once every task has
 * finished).  Returns 0, or -1 when nothing was recorded or on ENOMEM. */
int sp_bound_compute(sp_bound_t *b);

/* Stops recording and frees the records. */
void sp_bound_end(void);

/* A recorded task. */
#define SP_BOUND_MAXBUF 16 /* handles kept per task; a dependency through a later one is missed */
struct sp_bound_rec {
	unsigned long id; /* StarPU's job id: submission order */
	double t[2];      /* seconds on a CPU / a CUDA worker; INFINITY: cannot run there */
	unsigned nbuf;
	void *handle[SP_BOUND_MAXBUF]; /* its data, any distinct addresses */
	int mode[SP_BOUND_MAXBUF];     /* enum starpu_data_access_mode */
};

/* The critical path of n tasks (sorted here by id) and the number of data
 * dependencies found; exposed for tests. */
double sp_bound_path(struct sp_bound_rec *t, size_t n, size_t *nedges);

/* The area bound alone, for tests: n tasks with times cpu[i] and cuda[i]
 * (INFINITY where a task cannot run), ncpu and ncuda workers. */
double sp_bound_area(const double *cpu, const double *cuda, size_t n, unsigned ncpu,
		     unsigned ncuda);

#endif /* SP_BOUND_H */
