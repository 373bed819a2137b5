/* Task submission (sp_task_insert, item.h): every starpipe task is counted, named and timed
 * through its sp_taskctx_t, and a refused one is reported one way, here. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "bound.h"
#include "item.h"
#include "lanes.h"
#include "runtime.h"

/* Whether a task of cl is one of the GPU lane's that a GPU may run: the
 * router waits for the last of them to end before the GPU lane's workers
 * join the CPU lane (route.c). */
static int gpu_lane_cuda(const sp_taskctx_t *ctx, const struct starpu_codelet *cl)
{
	return cl != NULL && cl->cuda_funcs[0] != NULL && ctx->where != STARPU_CPU &&
	       sp_runtime_nlanes() > 1 && ctx->sched_ctx == sp_runtime_lane_ctx(0);
}

void sp__task_submitting(sp_taskctx_t *ctx, const struct starpu_codelet *cl)
{
	atomic_fetch_add(&ctx->pending, 1);
	if (gpu_lane_cuda(ctx, cl))
		sp_runtime_gpu_lane_cuda_tasks(1);
	sp__runtime_task_submitted();
}

int sp__task_submit_check(sp_taskctx_t *ctx, const struct starpu_codelet *cl, int ret)
{
	if (ret == 0)
		return 0;
	atomic_fetch_sub(&ctx->pending, 1); /* not submitted: no callback will come */
	if (gpu_lane_cuda(ctx, cl))
		sp_runtime_gpu_lane_cuda_tasks(-1);
	/* -ENODEV: no worker of the session can run it (the stage's where:
	 * names a worker type the run has none of, or the codelet lacks it) */
	return sp_status_set(ctx->status, SP_ESTARPU,
			     "%s: stage '%s': StarPU refused a task of codelet %s: %s (StarPU error %d)%s",
			     ctx->path, ctx->stage, ctx->kernel, strerror(-ret), ret,
			     ret == -ENODEV ? ": no worker of this run can execute it; check the "
					      "stage's where: and --ncpus/--ncuda"
					    : "");
}

int sp__task_submit_joinable(sp_taskctx_t *ctx, struct starpu_task **out,
			     struct starpu_task *task)
{
	*out = NULL;
	if (task == NULL)
		return SP_ENOMEM;
	task->detach = 0;
	task->cl_arg_free = 0; /* the stage owns it (StarPU 1.3's task_build ignores _NFREE) */
	struct starpu_codelet *cl = task->cl;
	sp__task_submitting(ctx, cl);
	int ret = starpu_task_submit(task);
	if (ret != 0) {
		starpu_task_destroy(task);
		return sp__task_submit_check(ctx, cl, ret);
	}
	*out = task;
	return 0;
}

void sp_task_join(struct starpu_task **task)
{
	if (*task != NULL)
		(void)!starpu_task_wait(*task);
	*task = NULL;
}

static double ts_us(const struct timespec *t)
{
	return t->tv_sec * 1e6 + t->tv_nsec * 1e-3;
}

void sp__task_done_cb(void *arg)
{
	sp_taskctx_t *ctx = arg;
	struct starpu_task *task = starpu_task_get_current();
	int worker = starpu_worker_get_id();
	double t0 = 0, t1 = 0;
	if (task != NULL && task->profiling_info != NULL) {
		t0 = ts_us(&task->profiling_info->start_time);
		t1 = ts_us(&task->profiling_info->end_time);
		worker = task->profiling_info->workerid;
	}
	sp__runtime_task_done(ctx->stage, ctx->kernel, worker, t0, t1);
	sp_bound_task(task, worker, t1 - t0);
	if (task != NULL && gpu_lane_cuda(ctx, task->cl))
		sp_runtime_gpu_lane_cuda_tasks(-1);
	atomic_fetch_sub(&ctx->pending, 1); /* last: ctx's owner may free cl_arg now */
}

void sp_taskctx_quiesce(sp_taskctx_t *ctx)
{
	/* a few callbacks at most, each microseconds long (starpu_usleep: the
	 * simulated clock under SimGrid) */
	while (atomic_load(&ctx->pending) > 0)
		starpu_usleep(20);
}
