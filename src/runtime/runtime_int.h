/* Internal to the StarPU session (src/runtime/runtime.c, stats.c, report.c,
 * models.c): its state, written by task callbacks and read by the reports;
 * not installed. */
#ifndef SP_RUNTIME_INT_H
#define SP_RUNTIME_INT_H

#include <stdatomic.h>
#include <time.h>

#include <starpu.h>

#include "clock.h"
#include "error.h"

#define SP__MAXKERNELS 64


struct sp__kstat {
	const char *stage, *kernel; /* not owned: graph and codelet strings */
	unsigned long long ntasks[2]; /* [0] CPU, [1] CUDA */
	double busy_us[2];
	double first_start_us;        /* the earliest start of its tasks */
};

struct sp__trace_rec {
	const char *stage, *kernel;
	int worker;
	double start_us, end_us;
};

/* The session.  The statistics are written by task callbacks (any worker
 * thread) under `lock`; a callback does a few additions, so contention is
 * negligible next to tasks of a millisecond or more.  The progress thread
 * only reads atomics. */
struct sp__runtime {
	int up;
	double t0; /* monotonic seconds at init */
	double t0_clock_us; /* StarPU's clock at init (simulated under starpipe-sim) */
	double t0_wall; /* the same instant, wall-clock seconds (traces of several ranks) */
	starpu_pthread_mutex_t lock;
	struct sp__kstat k[SP__MAXKERNELS];
	size_t nk;
	double worker_busy_us[STARPU_NMAXWORKERS];
	unsigned long long worker_ntasks[STARPU_NMAXWORKERS];
	int trace, bound;
	double first_start_us, last_end_us; /* the makespan's ends; first_start 0: no task */
	struct sp__trace_rec *rec;
	size_t nrec, caprec;
	atomic_ullong submitted, done;
	atomic_size_t items_total, items_done;
	int progress;
	double progress_period;
	starpu_pthread_t progress_thread;
	atomic_int stop_progress;
	starpu_pthread_mutex_t plock;
	starpu_pthread_cond_t pcond;
	char sched[64];
	int heteroprio; /* task priorities are sched_hp.h buckets */
	char pmdir[4096];   /* the performance models' folder */
	char node_type[256]; /* STARPU_HOSTNAME: the models' and bus files' name */
	char pipeline[64];   /* the graph's (the simulator's validated envelope) */
	const char *node_type_from; /* sp_runtime_node_type's answer */
	size_t ncodelets, ncalibrated; /* the graph's codelets, those with a calibrated footprint */
	int calibrate;
	int workers_per_gpu_asked; /* what the session asked (starpipe-sim runs 1) */
	int record_versions;
	char cap_note[512]; /* why fewer CPU workers than asked, or "" */
	long cores;
	/* the batch-wide stages' runs and distinct values (sp_runtime_shared_stage) */
	struct sp__shared_count {
		char stage[64];
		unsigned runs, values;
	} shared[8];
	size_t nshared;
};
extern struct sp__runtime sp__rt;

/* stats.c: the progress line's thread. */
void sp__progress_start(void);
void sp__progress_stop(void);

/* models.c: the folder of the performance models, `asked` (--perfmodel-dir,
 * runtime:) or the per-user default (its parent made private when it is the
 * fallback under /tmp), checked and created, into dir; 0 or SP_E* with err
 * naming it. */
int sp__models_dir(const char *asked, char *dir, size_t len, sp_err_t *err);

/* models.c: records the code version of each codelet that ran whose model
 * has none yet, or was started afresh (--calibrate 2): when calibrating
 * (StarPU then writes the models at shutdown) and record_versions. */
void sp__runtime_update_versions(void);

/* models.c: counts the graph's codelets and those with a calibrated
 * footprint for the node type into sp__rt (before starpu_init: it reads the
 * models as StarPU's tools do). */
struct sp_graph;
void sp__models_census(const struct sp_graph *g);

/* lanes.c: after starpu_init, the CPU lane's context when mode (SP_LANES_*)
 * asks for one and the workers allow it (cpu_lane: its CPU workers, -1:
 * the default split, from ngpus: sp_runtime_ngpus(); workers_given: the
 * scheduler or the CPU workers were chosen, which keeps auto one lane;
 * pipeline: the graph's, whose item model gives the split); 0
 * or SP_ESTARPU.  Before starpu_shutdown, once every task has ended: the
 * contexts deleted. */
/* starpipe-sim: whether this run lies in the validated envelope
 * (sp_sim_validated), computed once the tasks have run; *why the reason
 * when not.  1 in starpipe (nothing simulated). */
int sp__sim_validation(const char **why);
int sp__lanes_start(int mode, int cpu_lane, unsigned ngpus, int workers_given,
		    const char *pipeline, sp_err_t *err);
void sp__lanes_stop(void);

#endif /* SP_RUNTIME_INT_H */
