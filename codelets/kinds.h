/* Every stage kind of the pipelines in this tree, for the registry (stage.h). */
#ifndef SP_CODELETS_KINDS_H
#define SP_CODELETS_KINDS_H

#include <stddef.h>

#include "stage.h"

/* The kinds, sorted by name; *n receives their number (codelets/kinds.c). */
const sp_stage_kind_t *const *sp_codelets_kinds(size_t *n);

#endif
