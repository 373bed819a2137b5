/* The session's accounting: tasks and items counted as they end, and the progress line. */
#define _GNU_SOURCE
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime.h"
#include "runtime_int.h"

/* The session's state (runtime_int.h): written here as tasks and items end,
 * configured by runtime.c, read by the reports. */
struct sp__runtime sp__rt = { .lock = STARPU_PTHREAD_MUTEX_INITIALIZER,
			     .plock = STARPU_PTHREAD_MUTEX_INITIALIZER,
			     .pcond = STARPU_PTHREAD_COND_INITIALIZER };

void sp_runtime_items(size_t total) { atomic_fetch_add(&sp__rt.items_total, total); }
void sp_runtime_item_done(void) { atomic_fetch_add(&sp__rt.items_done, 1); }

void sp_runtime_shared_stage(const char *stage, unsigned runs, unsigned values)
{
	starpu_pthread_mutex_lock(&sp__rt.lock);
	size_t k = 0;
	while (k < sp__rt.nshared && strcmp(sp__rt.shared[k].stage, stage) != 0)
		k++;
	if (k < sizeof sp__rt.shared / sizeof sp__rt.shared[0]) {
		snprintf(sp__rt.shared[k].stage, sizeof sp__rt.shared[k].stage, "%s", stage);
		sp__rt.shared[k].runs = runs;
		sp__rt.shared[k].values = values;
		if (k == sp__rt.nshared)
			sp__rt.nshared++;
	}
	starpu_pthread_mutex_unlock(&sp__rt.lock);
}
void sp__runtime_task_submitted(void) { atomic_fetch_add(&sp__rt.submitted, 1); }

void sp__runtime_task_done(const char *stage, const char *kernel, int workerid,
			   double start_us, double end_us)
{
	int cuda = workerid >= 0 && starpu_worker_get_type(workerid) == STARPU_CUDA_WORKER;
	double dur = end_us - start_us;

	starpu_pthread_mutex_lock(&sp__rt.lock);
	size_t i;
	for (i = 0; i < sp__rt.nk; i++)
		if (sp__rt.k[i].stage == stage && strcmp(sp__rt.k[i].kernel, kernel) == 0)
			break;
	if (i == sp__rt.nk && sp__rt.nk < SP__MAXKERNELS) {
		sp__rt.k[i].stage = stage;
		sp__rt.k[i].kernel = kernel;
		sp__rt.k[i].first_start_us = start_us;
		sp__rt.nk++;
	}
	if (i < sp__rt.nk) {
		sp__rt.k[i].ntasks[cuda]++;
		sp__rt.k[i].busy_us[cuda] += dur;
		if (start_us < sp__rt.k[i].first_start_us)
			sp__rt.k[i].first_start_us = start_us;
		/* entries in order of their first start: the pipeline's order
		 * (completion order is not: StarPU releases a task's data, so its
		 * successor may run and end, before the task's callback) */
		for (; i > 0 && sp__rt.k[i].first_start_us < sp__rt.k[i - 1].first_start_us; i--) {
			struct sp__kstat t = sp__rt.k[i];
			sp__rt.k[i] = sp__rt.k[i - 1];
			sp__rt.k[i - 1] = t;
		}
	}
	if (start_us > 0 && (sp__rt.first_start_us == 0 || start_us < sp__rt.first_start_us))
		sp__rt.first_start_us = start_us;
	if (end_us > sp__rt.last_end_us)
		sp__rt.last_end_us = end_us;
	if (workerid >= 0 && workerid < STARPU_NMAXWORKERS) {
		sp__rt.worker_busy_us[workerid] += dur;
		sp__rt.worker_ntasks[workerid]++;
	}
	if (sp__rt.trace) {
		if (sp__rt.nrec == sp__rt.caprec) {
			size_t cap = sp__rt.caprec ? 2 * sp__rt.caprec : 4096;
			struct sp__trace_rec *r = realloc(sp__rt.rec, cap * sizeof *r);
			if (r != NULL) {
				sp__rt.rec = r;
				sp__rt.caprec = cap;
			}
		}
		if (sp__rt.nrec < sp__rt.caprec)
			sp__rt.rec[sp__rt.nrec++] = (struct sp__trace_rec){ stage, kernel, workerid,
								   start_us, end_us };
	}
	starpu_pthread_mutex_unlock(&sp__rt.lock);
	atomic_fetch_add(&sp__rt.done, 1);
}

static void fmt_duration(char *buf, size_t len, double s)
{
	if (!isfinite(s) || s < 0)
		snprintf(buf, len, "?");
	else if (s < 60)
		snprintf(buf, len, "%.0fs", s);
	else if (s < 3600)
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
	else
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
}

static void progress_line(int tty, int final)
{
	double el = sp_now_s() - sp__rt.t0;
	unsigned long long sub = atomic_load(&sp__rt.submitted), done = atomic_load(&sp__rt.done);
	size_t it = atomic_load(&sp__rt.items_total), id = atomic_load(&sp__rt.items_done);
	char left[32], elapsed[32];
	double frac = it ? (double)id / it : 0;
	/* Within the items in flight, count their finished tasks as progress. */
	if (it && id < it && sub > 0)
		frac += (1.0 / it) * ((double)done / sub) * (double)(sub > done ? 1 : 0);
	fmt_duration(elapsed, sizeof elapsed, el);
	if (frac > 0.01 && !final)
		fmt_duration(left, sizeof left, el / frac - el);
	else
		snprintf(left, sizeof left, final ? "0s" : "?");
	fprintf(stderr, "%s[starpipe] items %zu/%zu  tasks %llu/%llu  %.0f tasks/s  elapsed %s  left %s%s",
		tty ? "\r\033[K" : "", id, it, done, sub, el > 0 ? done / el : 0.0, elapsed, left,
		tty ? "" : "\n");
	fflush(stderr);
}

static void *progress_main(void *arg)
{
	(void)arg;
	int tty = isatty(STDERR_FILENO);
	double period = sp__rt.progress_period > 0 ? sp__rt.progress_period : tty ? 0.5 : 10.0;
	long wake_ns = (long)(1e9 * (period < 0.25 ? period : 0.25));
	double last = sp_now_s();
	starpu_pthread_mutex_lock(&sp__rt.plock);
	while (!atomic_load(&sp__rt.stop_progress)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += wake_ns;
		while (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		starpu_pthread_cond_timedwait(&sp__rt.pcond, &sp__rt.plock, &ts);
		if (!atomic_load(&sp__rt.stop_progress) && sp_now_s() - last >= period) {
			progress_line(tty, 0);
			last = sp_now_s();
		}
	}
	starpu_pthread_mutex_unlock(&sp__rt.plock);
	if (tty)
		progress_line(tty, 1), fputc('\n', stderr);
	return NULL;
}

void sp__progress_stop(void)
{
	if (!sp__rt.progress)
		return;
	starpu_pthread_mutex_lock(&sp__rt.plock);
	atomic_store(&sp__rt.stop_progress, 1);
	starpu_pthread_cond_signal(&sp__rt.pcond);
	starpu_pthread_mutex_unlock(&sp__rt.plock);
	starpu_pthread_join(sp__rt.progress_thread, NULL);
	sp__rt.progress = 0;
}

void sp__progress_start(void)
{
	atomic_store(&sp__rt.stop_progress, 0);
	if (sp__rt.progress && starpu_pthread_create(&sp__rt.progress_thread, NULL, progress_main, NULL) != 0)
		sp__rt.progress = 0;
}
