/* The registry the command line hands to the graph loader: the pipelines'
 * stage kinds and the runtime's scheduler check. */
#include "cli.h"
#include "../../codelets/kinds.h"
#include "runtime.h"

const sp_registry_t *cli_registry(void)
{
	static sp_registry_t reg;
	if (reg.kinds == NULL) {
		reg.kinds = sp_codelets_kinds(&reg.nkinds);
		reg.check_sched = sp_runtime_check_sched;
	}
	return &reg;
}
