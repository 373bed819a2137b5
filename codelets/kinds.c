/* Every stage kind a graph file may use: one line per kind, sorted by name. */
#include "desi/fitskey.h" /* ${header.KEY}: FITS headers, by the DESI pipeline's safe reader */
#include "graph.h"
#include "stage.h"

/*
 * DESIGN: the kinds live beside their codelets (codelets/<pipeline>/); this
 * list is all that src/ knows of them.  The programs link this file itself
 * (Makefile.am), so its references pull every kind's objects out of the
 * library, and a constructor hands the list to the graph layer
 * (sp_stage_kinds_link()) before main(): the command line puts it in the
 * registry it gives the graph loader (src/cli/registry.c) without calling
 * up into codelets/, and src/graph builds and is tested with another list
 * (tests/test_graph.c) and without StarPU.  The same constructor gives the
 * graph layer the reader of ${header.KEY} (sp_graph_set_header_reader()):
 * FITS headers, by the DESI pipeline's safe opener.  Adding a kind is one
 * line here (doc/stage-kinds.md); the list
 * must stay sorted by name, which sp_stage_find()'s binary search needs and
 * tests/stage-kinds.test checks.
 */
#define SP_KINDS(X)             \
	X(apple_classify)       \
	X(apple_morphology)     \
	X(apple_pick)           \
	X(apple_preprocess)     \
	X(apple_read)           \
	X(apple_score)          \
	X(apple_train)          \
	X(apple_write)          \
	X(desi_decorrelate)     \
	X(desi_image)           \
	X(desi_model)           \
	X(desi_patch)           \
	X(desi_psf)             \
	X(desi_spots)           \
	X(desi_stitch)          \
	X(desi_write)           \
	X(jsync_power)          \
	X(jsync_read)           \
	X(jsync_triplets)       \
	X(jsync_write)

#define SP__DECLARE(k) extern const sp_stage_kind_t sp_##k##_kind;
SP_KINDS(SP__DECLARE)

#define SP__ENTRY(k) &sp_##k##_kind,
static const sp_stage_kind_t *const kinds[] = { SP_KINDS(SP__ENTRY) };

__attribute__((constructor)) static void link_kinds(void)
{
	sp_stage_kinds_link(kinds, sizeof kinds / sizeof kinds[0]);
	sp_graph_set_header_reader(desi_header_value);
}
