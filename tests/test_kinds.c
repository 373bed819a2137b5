/* Synthetic stage kinds standing in for codelets/kinds.c (tests/test_kinds.h). */
#include <stdio.h>
#include <string.h>

#include "test_kinds.h"

static const sp_param_spec_t src_params[] = {
	{ "file", SP_PT_PATH, NULL, 0, -1, NULL, "input", 0 },
	{ "n", SP_PT_INT, "3", 1, 1000, NULL, "a count", SP_AT(struct src_params, n) },
	{ "x", SP_PT_FLOAT, "0.5", 0, 1, NULL, "a fraction", SP_AT(struct src_params, x) },
	{ "mode", SP_PT_ENUM, "b", 0, -1, "a|b|c", "a choice", SP_AT(struct src_params, mode) },
	{ "flag", SP_PT_BOOL, "false", 0, -1, NULL, "a switch", SP_AT(struct src_params, flag) },
	{ "big", SP_PT_SIZE, "1K", 0, 1e18, NULL, "a size", SP_AT(struct src_params, big) },
};
static const sp_param_spec_t map_params[] = {
	{ "label", SP_PT_STRING, "", 0, -1, NULL, "a text", 0 },
	{ "log", SP_PT_OUTPUT, "", 0, -1, NULL, "an optional output file", 0 },
};
static const sp_port_spec_t src_out[] = { { "out", "t.v", "a value" } };
static const sp_port_spec_t map_in[] = { { "in", "t.v", "a value" } };
static const sp_port_spec_t map_out[] = { { "out", "t.v", "a value" } };
static const sp_port_spec_t sink_in[] = { { "in", "t.v", "a value" } };

const sp_stage_kind_t sp_test_src_kind = {
	.name = "t.src",
	.help = "a source",
	SP_KIND_PARAMS(src_params, struct src_params),
	SP_KIND_OUTPUTS(src_out),
	.impl = SP_IMPL_CPU,
};
const sp_stage_kind_t sp_test_map_kind = {
	.name = "t.map",
	.help = "a filter",
	SP_KIND_TEXT_PARAMS(map_params),
	SP_KIND_INPUTS(map_in),
	SP_KIND_OUTPUTS(map_out),
	.impl = SP_IMPL_CPU | SP_IMPL_CUDA,
};
const sp_stage_kind_t sp_test_sink_kind = {
	.name = "t.sink",
	.help = "a sink that tiles",
	SP_KIND_INPUTS(sink_in),
	.impl = SP_IMPL_CPU | SP_IMPL_CUDA,
	.tile = "tasks",
};

/* Sorted by name, as codelets/kinds.c. */
static const sp_stage_kind_t *const test_kinds[] = { &sp_test_map_kind, &sp_test_sink_kind,
						     &sp_test_src_kind };

/* The graph checks `runtime: scheduler:` against StarPU's schedulers; here,
 * without StarPU, two names. */
static int check_sched(const char *name, char *msg, size_t len)
{
	if (strcmp(name, "auto") == 0 || strcmp(name, "lws") == 0)
		return 0;
	snprintf(msg, len, "unknown scheduler '%s'", name);
	return -1;
}

const sp_registry_t sp_test_registry = {
	.kinds = test_kinds,
	.nkinds = sizeof test_kinds / sizeof test_kinds[0],
	.check_sched = check_sched,
};
