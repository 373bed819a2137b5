/* libFuzzer target for the graph-file loader. */
#include "graph.h"
#include "../test_kinds.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static FILE *null;
	char *text = malloc(size + 1);
	sp_var_t vars[2] = { { "output", "o$${item}$" }, { "nope", "x" } };
	sp_diag_t d;
	sp_graph_t *g = NULL;

	if (null == NULL)
		null = fopen("/dev/null", "w");
	memcpy(text, data, size);
	text[size] = '\0';
	sp_diag_init(&d, "fuzz.yaml");
	if (sp_graph_load_string("fuzz.yaml", text, vars, size % 3, &sp_test_registry, &g, &d) == 0) {
		sp_graph_dot(g, null);
		for (size_t i = 0; i < g->nstages; i++)
			for (size_t j = 0; j < g->stages[i].kind->nparams; j++) {
				const char *t = g->stages[i].params[j].text;
				char *x = sp_graph_expand_item(t != NULL ? t : "", "dir/a.b.npy", i, NULL);
				free(x);
			}
	}
	sp_diag_print(&d, null);
	sp_diag_free(&d);
	sp_graph_free(&g);
	free(text);
	return 0;
}
