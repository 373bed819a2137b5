/* A registry of synthetic stage kinds for the graph layer's tests and its
 * fuzz target (tests/test_kinds.c): src/graph/graph*.c and src/graph/stage.c linked with
 * it need neither StarPU nor any pipeline.  Between them the kinds use every
 * parameter type (SP_PT_*), optional and required parameters, inputs,
 * outputs, tiling and both implementations. */
#ifndef SP_TEST_KINDS_H
#define SP_TEST_KINDS_H

#include "stage.h"

/* The typed parameters of kind t.src. */
struct src_params {
	long long n;
	double x;
	int mode, flag;
	unsigned long long big;
};

extern const sp_stage_kind_t sp_test_src_kind;  /* t.src: file, n, x, mode, flag, big -> out */
extern const sp_stage_kind_t sp_test_map_kind;  /* t.map: in -> out; label, log (optional output) */
extern const sp_stage_kind_t sp_test_sink_kind; /* t.sink: in; tiles */

/* The three kinds, and a scheduler check that knows "auto" and "lws". */
extern const sp_registry_t sp_test_registry;

#endif
