/* Unit tests of the graph layer alone (src/graph*.c, src/stage.c): a registry of test kinds, no StarPU, no pipeline. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../src/graph.h"
#include "../src/runtime.h"
#include "../src/stage.h"

/* The typed parameters of kind t.src. */
struct src_params {
	long long n;
	double x;
	int mode, flag;
	unsigned long long big;
};

static const sp_param_spec_t src_params[] = {
	{ "file", SP_PT_PATH, NULL, 0, -1, NULL, "input", 0 },
	{ "n", SP_PT_INT, "3", 1, 1000, NULL, "a count", SP_AT(struct src_params, n) },
	{ "x", SP_PT_FLOAT, "0.5", 0, 1, NULL, "a fraction", SP_AT(struct src_params, x) },
	{ "mode", SP_PT_ENUM, "b", 0, -1, "a|b|c", "a choice", SP_AT(struct src_params, mode) },
	{ "flag", SP_PT_BOOL, "false", 0, -1, NULL, "a switch", SP_AT(struct src_params, flag) },
	{ "big", SP_PT_SIZE, "1K", 0, 1e18, NULL, "a size", SP_AT(struct src_params, big) },
};
static const sp_port_spec_t src_out[] = { { "out", "t.v", "a value" } };
static const sp_port_spec_t sink_in[] = { { "in", "t.v", "a value" } };

static const sp_stage_kind_t src_kind = {
	.name = "t.src",
	.help = "a source",
	SP_KIND_PARAMS(src_params),
	SP_KIND_OUTPUTS(src_out),
	.params_size = sizeof(struct src_params),
	.impl = SP_IMPL_CPU,
};
static const sp_stage_kind_t sink_kind = {
	.name = "t.sink",
	.help = "a sink that tiles",
	SP_KIND_INPUTS(sink_in),
	.impl = SP_IMPL_CPU | SP_IMPL_CUDA,
	.tile = "tasks",
};
/* Sorted by name, as codelets/kinds.c. */
static const sp_stage_kind_t *const test_kinds[] = { &sink_kind, &src_kind };

const sp_stage_kind_t *const *sp_stage_kinds(size_t *n)
{
	*n = sizeof test_kinds / sizeof test_kinds[0];
	return test_kinds;
}

/* The graph checks `runtime: scheduler:` against StarPU's schedulers; here,
 * without StarPU, two names. */
int sp_runtime_check_sched(const char *name, char *msg, size_t len)
{
	if (strcmp(name, "auto") == 0 || strcmp(name, "lws") == 0)
		return 0;
	snprintf(msg, len, "unknown scheduler '%s'", name);
	return -1;
}

static sp_graph_t *load(const char *text, sp_diag_t *d, int *rc)
{
	sp_graph_t *g = NULL;
	sp_diag_init(d, "t.yaml");
	*rc = sp_graph_load_string("t.yaml", text, NULL, 0, &g, d);
	return g;
}

/* The first diagnostic's message, or "". */
static const char *first_msg(const sp_diag_t *d)
{
	return d->n > 0 ? d->v[0].msg : "";
}

static void test_find(void **state)
{
	(void)state;
	assert_ptr_equal(sp_stage_find("t.src"), &src_kind);
	assert_ptr_equal(sp_stage_find("t.sink"), &sink_kind);
	assert_null(sp_stage_find("t.none"));
	assert_null(sp_stage_find(""));
}

/* Values are parsed once into the typed struct; stage keys into the stage. */
static void test_typed_and_keys(void **state)
{
	(void)state;
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load("starpipe: 1\npipeline: t\nstages:\n"
			     "  b:\n    uses: t.sink\n    in: {in: a.out}\n    tile: 7\n"
			     "    where: cuda\n    priority: -2\n"
			     "  a:\n    uses: t.src\n    where: cpu\n"
			     "    with: {file: \"${item}\", n: 42, x: 0.25, mode: c, flag: yes, big: 2M}\n",
			     &d, &rc);
	assert_int_equal(rc, 0);
	assert_non_null(g);
	assert_int_equal(g->nstages, 2);
	const sp_gstage_t *a = &g->stages[0], *b = &g->stages[1];
	assert_string_equal(a->name, "a"); /* producers first */
	const struct src_params *p = a->typed;
	assert_non_null(p);
	assert_int_equal(p->n, 42);
	assert_true(p->x == 0.25);
	assert_int_equal(p->mode, 2);
	assert_int_equal(p->flag, 1);
	assert_int_equal(p->big, 2ULL << 20);
	assert_string_equal(sp_gstage_param(a, "file")->text, "${item}"); /* text: per item */
	assert_int_equal(a->where, SP_IMPL_CPU);
	assert_int_equal(a->tile, 0);
	assert_null(b->typed); /* no params_size */
	assert_int_equal(b->tile, 7);
	assert_int_equal(b->where, SP_IMPL_CUDA);
	assert_int_equal(b->priority, -2);
	sp_graph_free(&g);
	sp_diag_free(&d);
}

/* Defaults fill the struct too. */
static void test_defaults(void **state)
{
	(void)state;
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load("starpipe: 1\npipeline: t\nstages:\n"
			     "  a:\n    uses: t.src\n    with: {file: f}\n", &d, &rc);
	assert_int_equal(rc, 0);
	const struct src_params *p = g->stages[0].typed;
	assert_int_equal(p->n, 3);
	assert_true(p->x == 0.5);
	assert_int_equal(p->mode, 1);
	assert_int_equal(p->flag, 0);
	assert_int_equal(p->big, 1024);
	sp_graph_free(&g);
	sp_diag_free(&d);
}

static void expect_error(const char *text, const char *msg)
{
	sp_diag_t d;
	int rc;
	sp_graph_t *g = load(text, &d, &rc);
	assert_int_equal(rc, SP_EGRAPH);
	assert_null(g);
	assert_string_equal(first_msg(&d), msg);
	sp_diag_free(&d);
}

static void test_key_errors(void **state)
{
	(void)state;
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n    tile: 2\n"
		     "    with: {file: f}\n",
		     "stage 'a' cannot tile: 't.src' runs as one task per item");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n    where: cuda\n"
		     "    with: {file: f}\n",
		     "stage 'a' cannot run on cuda: 't.src' has no CUDA implementation in this build");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n    where: gpu\n"
		     "    with: {file: f}\n",
		     "'where' of stage 'a': expected one of any|cpu|cuda, got 'gpu'");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.src\n"
		     "    with: {file: f, mode: d}\n",
		     "parameter 'mode' of 't.src': expected one of a|b|c, got 'd'");
	expect_error("starpipe: 1\npipeline: t\nstages:\n  a:\n    uses: t.srcc\n",
		     "unknown stage kind 't.srcc' (did you mean 't.src'?)");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_typed_and_keys),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_key_errors),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
