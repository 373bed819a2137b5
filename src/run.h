/* Running a validated graph over its work items. */
#ifndef SP_RUN_H
#define SP_RUN_H

#include <stddef.h>

#include "graph.h"

typedef struct sp_run_opts {
	size_t inflight; /* items driven at once (>= 1); 2 overlaps I/O of one with compute of another */
	int verbose;     /* per-item lines on stderr */
} sp_run_opts_t;

typedef struct sp_run_result {
	size_t nok, nfailed;
	char *items_json; /* JSON array of per-item figures; caller frees */
} sp_run_result_t;

/* Runs every item through the graph's stages.  A failing item is reported on
 * stderr as "starpipe: ITEM: reason" and the batch goes on.  StarPU must be
 * up (sp_runtime_init).  Returns 0 when every item succeeded, SP_ECANCELED
 * when some failed, or another SP_E* for a failure of the run itself. */
int sp_run(const sp_graph_t *g, char *const *items, size_t nitems, const sp_run_opts_t *opts,
	   sp_run_result_t *res);

#endif /* SP_RUN_H */
