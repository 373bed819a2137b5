/* The registry the command line hands to the graph loader: the pipelines'
 * stage kinds (the list the program links, codelets/kinds.c) and the
 * runtime's scheduler check. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "runtime.h"

const sp_registry_t *cli_registry(void)
{
	static sp_registry_t reg;
	if (reg.kinds == NULL) {
		reg.kinds = sp_stage_kinds_linked(&reg.nkinds);
		if (reg.nkinds == 0) {
			fprintf(stderr, "starpipe: internal error: no stage kinds linked "
					"(codelets/kinds.c)\n");
			abort();
		}
		/* a kind whose specs overrun its struct would make the graph
		 * loader write past the allocation: refuse to start */
		for (size_t i = 0; i < reg.nkinds; i++) {
			char msg[256];
			if (sp_stage_kind_check(reg.kinds[i], msg, sizeof msg) != 0) {
				fprintf(stderr, "starpipe: internal error: %s\n", msg);
				abort();
			}
		}
		reg.check_sched = sp_runtime_check_sched;
	}
	return &reg;
}
