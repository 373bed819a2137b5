/* Unit tests of task submission (src/run/task.c): sp_task_insert() and
 * sp_task_insert_joinable() on one CPU worker, accepted and refused. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <starpu.h>

#include "item.h"
#include "runtime.h"

/* A task's argument, which the task writes into: the argument of a
 * CL_ARGS_NFREE task is the caller's, so its effect is visible there. */
struct add_arg {
	int add;       /* added to the variable */
	int ran;       /* set by the task */
	char name[32]; /* the task's STARPU_NAME, as the task saw it */
};

/* Adds arg->add to an int variable. */
static void add_cpu(void *buffers[], void *cl_arg)
{
	struct add_arg *a = cl_arg;
	int *v = (int *)STARPU_VARIABLE_GET_PTR(buffers[0]);
	struct starpu_task *task = starpu_task_get_current();

	*v += a->add;
	a->ran = 1;
	snprintf(a->name, sizeof a->name, "%s", task != NULL && task->name ? task->name : "");
}

SP_CODELET(add_cl, "sp_test_add", add_cpu, SP_NO_CUDA, NULL, NULL, 1, STARPU_RW);

static int value;
static starpu_data_handle_t h;

/* A context as sp_item_taskctx() makes one, without an item: the helpers
 * use only its status, names and placement. */
static sp_taskctx_t make_ctx(sp_status_t *st, const char *path, const char *stage, int32_t where)
{
	return (sp_taskctx_t){ .item = NULL, .status = st, .path = path, .stage = stage,
			       .kernel = "sp_test_add", .priority = 0, .where = where };
}

static int read_value(void)
{
	starpu_data_acquire(h, STARPU_R);
	int v = value;
	starpu_data_release(h);
	return v;
}

/* A detached and a joinable task run, with the name, callback and status of
 * their context. */
static void success(void **state)
{
	(void)state;
	sp_status_t st = { 0 };
	sp_taskctx_t ctx = make_ctx(&st, "in/item-7.dat", "stage_ok", -1);
	struct add_arg a1 = { .add = 10 }, a2 = { .add = 100 };
	struct starpu_task *task = NULL;
	int before = read_value();

	assert_int_equal(sp_task_insert(&ctx, &add_cl, STARPU_RW, h, STARPU_CL_ARGS_NFREE, &a1,
					sizeof a1),
			 0);
	assert_int_equal(sp_task_insert_joinable(&ctx, &task, &add_cl, STARPU_RW, h,
						 STARPU_CL_ARGS_NFREE, &a2, sizeof a2),
			 0);
	assert_non_null(task);
	assert_int_equal(task->detach, 0);
	assert_int_equal(task->cl_arg_free, 0);
	/* quiesce returns once both tasks' callbacks have: then nothing is
	 * pending, and both tasks ran */
	sp_taskctx_quiesce(&ctx);
	assert_int_equal(atomic_load(&ctx.pending), 0);
	assert_int_equal(a1.ran + a2.ran, 2);
	sp_task_join(&task);
	assert_null(task);
	/* the join alone makes the joinable task's effect visible */
	assert_int_equal(a2.ran, 1);
	assert_string_equal(a2.name, "sp_test_add");
	starpu_task_wait_for_all();
	assert_int_equal(a1.ran, 1);
	assert_string_equal(a1.name, "sp_test_add");
	assert_int_equal(read_value(), before + 110);
	assert_false(sp_status_failed(&st));

	/* both tasks' completion callbacks counted them for the stage */
	char *lines = sp_runtime_stage_lines();
	assert_non_null(lines);
	assert_non_null(strstr(lines, "stage_ok\tsp_test_add\t2\t0\t"));
	free(lines);
}

/* The status message of a failed submission names the item, the stage, the
 * codelet and StarPU's error. */
static void assert_message(const sp_status_t *st, const char *path, const char *stage)
{
	char want[64];

	assert_int_equal(atomic_load(&st->code), SP_ESTARPU);
	assert_int_equal(st->err.code, SP_ESTARPU);
	assert_non_null(strstr(st->err.msg, path));
	snprintf(want, sizeof want, "stage '%s'", stage);
	assert_non_null(strstr(st->err.msg, want));
	assert_non_null(strstr(st->err.msg, "sp_test_add"));
	assert_non_null(strstr(st->err.msg, strerror(ENODEV)));
	snprintf(want, sizeof want, "(StarPU error %d)", -ENODEV);
	assert_non_null(strstr(st->err.msg, want));
}

/* Tasks restricted to CUDA workers, which this session has none of: StarPU
 * refuses them (-ENODEV), the helpers return SP_ESTARPU with the status
 * set, and neither task runs. */
static void failure(void **state)
{
	(void)state;
	sp_status_t st1 = { 0 }, st2 = { 0 };
	sp_taskctx_t ctx1 = make_ctx(&st1, "data/mic_0042.mrc", "pick", STARPU_CUDA);
	sp_taskctx_t ctx2 = make_ctx(&st2, "data/frame-b1.fits", "write", STARPU_CUDA);
	struct add_arg a1 = { .add = 1000 }, a2 = { .add = 10000 };
	struct starpu_task stale;
	struct starpu_task *task = &stale; /* must be cleared */
	int before = read_value();

	assert_int_equal(sp_task_insert(&ctx1, &add_cl, STARPU_RW, h, STARPU_CL_ARGS_NFREE, &a1,
					sizeof a1),
			 SP_ESTARPU);
	assert_message(&st1, "data/mic_0042.mrc", "pick");

	assert_int_equal(sp_task_insert_joinable(&ctx2, &task, &add_cl, STARPU_RW, h,
						 STARPU_CL_ARGS_NFREE, &a2, sizeof a2),
			 SP_ESTARPU);
	assert_null(task);
	assert_message(&st2, "data/frame-b1.fits", "write");
	sp_task_join(&task); /* nothing to wait for */

	starpu_task_wait_for_all();
	assert_int_equal(a1.ran, 0);
	assert_int_equal(a2.ran, 0);
	/* refused tasks are not pending (quiesce would wait forever) */
	assert_int_equal(atomic_load(&ctx1.pending), 0);
	assert_int_equal(atomic_load(&ctx2.pending), 0);
	assert_int_equal(read_value(), before);
}

/* sp_item_buffer_get/put: a buffer handed back is what the next request
 * of its size gets; a request of another size frees the oldest kept
 * buffer; at most SP_ITEM_POOL are kept, none under 1 MiB; drain frees
 * them all.  (Buffers are compared by address only: a freed one is never
 * read.) */
static void buffer_pool(void **state)
{
	(void)state;
	const size_t big = (size_t)3 << 20, other = (size_t)5 << 20;
	void *a, *b, *c, *bufs[SP_ITEM_POOL + 2];

	assert_int_equal(sp__item_buffers_drain(), 0);
	assert_int_equal(sp_item_buffer_get(&a, big), 0);
	memset(a, 1, big); /* it is memory of that size */
	sp_item_buffer_put(a, big);
	assert_int_equal(sp_item_buffer_get(&b, big), 0);
	assert_ptr_equal(b, a); /* taken back, not allocated again */
	sp_item_buffer_put(b, big);
	assert_int_equal(sp_item_buffer_get(&c, other), 0); /* a miss frees the kept one */
	memset(c, 2, other);
	assert_int_equal(sp__item_buffers_drain(), 0);
	sp_item_buffer_put(c, other);
	sp_item_buffer_put(NULL, other); /* NULL is accepted */
	assert_int_equal(sp__item_buffers_drain(), 1);

	/* small buffers are not kept */
	assert_int_equal(sp_item_buffer_get(&a, 4096), 0);
	sp_item_buffer_put(a, 4096);
	assert_int_equal(sp__item_buffers_drain(), 0);

	/* at most SP_ITEM_POOL kept; the most recent of a size is taken first */
	for (int i = 0; i < SP_ITEM_POOL + 2; i++)
		assert_int_equal(sp_item_buffer_get(&bufs[i], big), 0);
	for (int i = 0; i < SP_ITEM_POOL + 2; i++)
		sp_item_buffer_put(bufs[i], big);
	assert_int_equal(sp_item_buffer_get(&a, big), 0);
	assert_ptr_equal(a, bufs[SP_ITEM_POOL - 1]);
	sp_item_buffer_put(a, big);
	assert_int_equal(sp__item_buffers_drain(), SP_ITEM_POOL);
}

static int setup(void **state)
{
	(void)state;
	struct starpu_conf conf;

	if (starpu_conf_init(&conf) != 0)
		return -1;
	conf.ncpus = 1;
	conf.ncuda = 0;
	conf.nopencl = 0;
	if (starpu_init(&conf) != 0)
		return -1;
	starpu_variable_data_register(&h, STARPU_MAIN_RAM, (uintptr_t)&value, sizeof value);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	starpu_data_unregister(h);
	starpu_shutdown();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(success),
		cmocka_unit_test(failure),
		cmocka_unit_test(buffer_pool),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, setup, teardown);
}
