/* Unit tests of the makespan lower bounds (src/runtime/bound.c) on hand-solved cases. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <starpu.h>

#include "bound.h"

#define TOL 1e-9

/* CPUs only: the total work over the workers. */
static void area_cpu_only(void **state)
{
	(void)state;
	double c[] = { 1, 2, 3, 4 }, g[] = { 1, 1, 1, 1 };
	assert_true(fabs(sp_bound_area(c, g, 4, 2, 0) - 5.0) < TOL);
	assert_true(fabs(sp_bound_area(c, g, 4, 1, 0) - 10.0) < TOL);
	assert_true(fabs(sp_bound_area(c, g, 4, 3, 0) - 10.0 / 3) < TOL);
}

/* One CPU, one GPU; 4 tasks of (cpu 4, gpu 1) and 2 of (cpu 1, gpu 4).  The
 * GPU takes the GPU-friendly tasks, the CPU the others and a share x of one
 * GPU-friendly task: 4 - x = 2 + 4x, x = 0.4, T = 3.6. */
static void area_mixed(void **state)
{
	(void)state;
	double c[] = { 4, 1, 4, 4, 1, 4 }, g[] = { 1, 4, 1, 1, 4, 1 };
	assert_true(fabs(sp_bound_area(c, g, 6, 1, 1) - 3.6) < 1e-9);
	/* two GPUs: they hold all four (2 each), the CPU the two others: T = 2;
	 * moving work either way only lengthens one side */
	assert_true(fabs(sp_bound_area(c, g, 6, 1, 2) - 2.0) < 1e-9);
}

/* A task only one type can run is forced there. */
static void area_forced(void **state)
{
	(void)state;
	/* 1 GPU-only task of 6 s and 2 tasks (cpu 2, gpu 1), 1 CPU + 1 GPU:
	 * GPU 6 + share, CPU the 2 tasks: 4 s < 6 s, so T = 6 */
	double c[] = { INFINITY, 2, 2 }, g[] = { 6, 1, 1 };
	assert_true(fabs(sp_bound_area(c, g, 3, 1, 1) - 6.0) < 1e-9);
	/* without a GPU it cannot run at all */
	assert_true(isnan(sp_bound_area(c, g, 3, 2, 0)));
}

static struct sp_bound_rec rec(unsigned long id, double w, int n, ...)
{
	struct sp_bound_rec r = { .id = id, .t = { w, INFINITY } };
	va_list ap;
	va_start(ap, n);
	for (int i = 0; i < n; i++) {
		r.handle[i] = va_arg(ap, void *);
		r.mode[i] = va_arg(ap, int);
	}
	va_end(ap);
	r.nbuf = (unsigned)n;
	return r;
}

/* A write, two reads of it, a write after them: 1 + max(2, 3) + 4 = 8. */
static void path_diamond(void **state)
{
	(void)state;
	static char a, b;
	struct sp_bound_rec t[] = {
		rec(10, 4, 2, (void *)&a, STARPU_R, (void *)&b, STARPU_W), /* submitted last */
		rec(7, 1, 1, (void *)&a, STARPU_W),
		rec(8, 2, 1, (void *)&a, STARPU_R),
		rec(9, 3, 1, (void *)&a, STARPU_R),
	};
	size_t ne;
	/* 7 -> 8, 7 -> 9, and the last task's R of a waits for 7 only */
	assert_true(fabs(sp_bound_path(t, 4, &ne) - 5.0) < TOL);
	assert_int_equal(ne, 3);
	/* the same with the last access a write: it waits for both reads */
	struct sp_bound_rec u[] = {
		rec(1, 1, 1, (void *)&a, STARPU_W),
		rec(2, 2, 1, (void *)&a, STARPU_R),
		rec(3, 3, 1, (void *)&a, STARPU_R),
		rec(4, 4, 1, (void *)&a, STARPU_RW),
	};
	assert_true(fabs(sp_bound_path(u, 4, &ne) - 8.0) < TOL);
	assert_int_equal(ne, 5);
}

/* Reduction contributions do not wait for each other; the read after them
 * waits for all: 1 + max(5, 2, 3) + 1 = 7, not 1 + 10 + 1. */
static void path_redux(void **state)
{
	(void)state;
	static char v;
	struct sp_bound_rec t[] = {
		rec(1, 1, 1, (void *)&v, STARPU_W),
		rec(2, 5, 1, (void *)&v, STARPU_REDUX),
		rec(3, 2, 1, (void *)&v, STARPU_REDUX),
		rec(4, 3, 1, (void *)&v, STARPU_REDUX),
		rec(5, 1, 1, (void *)&v, STARPU_R),
	};
	size_t ne;
	assert_true(fabs(sp_bound_path(t, 5, &ne) - 7.0) < TOL);
	assert_int_equal(ne, 6);
	/* commuting read-writes alike */
	struct sp_bound_rec u[] = {
		rec(1, 1, 1, (void *)&v, STARPU_W),
		rec(2, 5, 1, (void *)&v, STARPU_RW | STARPU_COMMUTE),
		rec(3, 2, 1, (void *)&v, STARPU_RW | STARPU_COMMUTE),
		rec(4, 1, 1, (void *)&v, STARPU_R),
	};
	assert_true(fabs(sp_bound_path(u, 4, &ne) - 7.0) < TOL);
}

/* Independent chains: the longest one; a task's fastest type counts. */
static void path_chains(void **state)
{
	(void)state;
	static char a, b;
	struct sp_bound_rec t[] = {
		rec(1, 2, 1, (void *)&a, STARPU_W), rec(2, 2, 1, (void *)&b, STARPU_W),
		rec(3, 2, 1, (void *)&a, STARPU_RW), rec(4, 9, 1, (void *)&b, STARPU_RW),
	};
	t[3].t[1] = 1; /* task 4 takes 1 s on a GPU */
	size_t ne;
	assert_true(fabs(sp_bound_path(t, 4, &ne) - 4.0) < TOL);
	assert_int_equal(ne, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(area_cpu_only), cmocka_unit_test(area_mixed),
		cmocka_unit_test(area_forced), cmocka_unit_test(path_diamond),
		cmocka_unit_test(path_redux), cmocka_unit_test(path_chains),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
