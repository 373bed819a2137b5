/* Work buffers kept by the calling thread from one call to the next. */
#ifndef SP_TBUF_H
#define SP_TBUF_H

#include <stddef.h>

/* Slots of sp_thread_buf(): each codelet that keeps a buffer names its
 * own, so that a worker running two of them in turn keeps both as they
 * were instead of reallocating one for the other's size (DESI's
 * eigendecompositions ran 7 % slower in a buffer sized by the patch
 * phase).  A thread runs one task at a time, so a slot is never in use
 * twice; a task that needs several arrays carves them from one slot. */
enum {
	SP_TBUF_DESI_PATCH,
	SP_TBUF_DESI_DECOR,
	SP_TBUF_APPLE, /* APPLE's CPU steps: preprocess, train, morphology, pick */
	SP_TBUF_NSLOTS
};

/* The calling thread's buffer `slot` of at least `bytes` (contents
 * undefined), or NULL when out of memory or slot is out of range.  The
 * buffer stays the thread's for its next calls and is freed when the
 * thread exits (StarPU's workers: at starpu_shutdown()); a call asking for
 * more than the slot holds replaces it.  So a task's large work arrays
 * cost fresh memory, and its page faults, once per worker instead of once
 * per task: APPLE's took ~37 k page faults (146 MB) and ~0.06 s of system
 * time per 4k micrograph on the development VM (doc/profiling.md).  The memory a slot holds is
 * at most the largest any one call asked for. */
void *sp_thread_buf(int slot, size_t bytes);

#endif
