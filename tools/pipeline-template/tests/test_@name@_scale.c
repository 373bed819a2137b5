/* Unit tests of the @name@.scale kernel (codelets/@name@/scale.h) against the arithmetic it states. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "../codelets/@name@/@name@_kern.h"
#include "../codelets/@name@/scale.h"

enum { N = 1000 };

/* y = factor x is one rounded multiplication per element: equal to the
 * product computed here, bit for bit (tolerance 0), for values of every
 * magnitude and both signs. */
static void test_scale(void **state)
{
	(void)state;
	static double x[N], y[N];
	const double factors[] = { 2, -0.25, 1.0 / 3.0, 0, 1e-300 };
	for (size_t i = 0; i < N; i++)
		x[i] = ((double)rand() / RAND_MAX - 0.5) * 1e6 / (double)(i + 1);
	for (size_t f = 0; f < sizeof factors / sizeof factors[0]; f++) {
		@name@_scale_cpu(x, y, N, factors[f]);
		for (size_t i = 0; i < N; i++)
			assert_true(y[i] == x[i] * factors[f]);
	}
}

/* In place (x and y the same array), as scale.h allows. */
static void test_in_place(void **state)
{
	(void)state;
	double x[5] = { 1, -2, 3.5, 0, 1e300 };
	@name@_scale_cpu(x, x, 5, 0.5);
	assert_true(x[0] == 0.5 && x[1] == -1 && x[2] == 1.75 && x[3] == 0 && x[4] == 5e299);
	assert_true(@name@_scale_one(3, -2) == -6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scale),
		cmocka_unit_test(test_in_place),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
