/* Work buffers kept from one task to the next: per thread, and a pool. */
#ifndef SP_TBUF_H
#define SP_TBUF_H

#include <stddef.h>

/* Slots of sp_thread_buf(): each codelet that keeps a buffer names its
 * own, so that a worker running two of them in turn keeps both as they
 * were instead of reallocating one for the other's size (a buffer sized
 * for another phase costs page faults and cache misses each switch).  A thread runs one task at a time, so a slot is never in use
 * twice; a task that needs several arrays carves them from one slot. */
enum {
	SP_TBUF_DESI_PATCH,
	SP_TBUF_DESI_DECOR,
	SP_TBUF_NSLOTS
};

/* The calling thread's buffer `slot` of at least `bytes` (contents
 * undefined), or NULL when out of memory or slot is out of range.  The
 * buffer stays the thread's for its next calls and is freed when the
 * thread exits (StarPU's workers: at starpu_shutdown()); a call asking for
 * more than the slot holds replaces it.  The memory a slot holds is at
 * most the largest any one call asked for, per thread: for work arrays of
 * a few MB that most workers need (DESI's ~6 MB per phase). */
void *sp_thread_buf(int slot, size_t bytes);

/* Large work arrays of the tasks that run once per item (APPLE's
 * preprocessing, training, morphology and pick: 8-85 MB each for a 4k
 * micrograph) come from a pool instead: sp_scratch_get() hands out the
 * smallest kept buffer of at least `bytes` (contents undefined), or a new
 * one, or NULL when out of memory; sp_scratch_put() gives it back (NULL is
 * accepted).  At most SP_SCRATCH_KEEP buffers are kept, and a miss
 * replaces the largest kept buffer that was too small, so the buffers
 * that exist are about as many as the tasks that used one at the same
 * time (at most the items in flight), not one per worker.  They cost
 * fresh pages, and their page faults, once instead of once per task:
 * APPLE's were ~37 k page faults (146 MB) and ~0.06 s of system time per
 * 4k micrograph on the development VM (doc/profiling.md).  Thread-safe. */
#define SP_SCRATCH_KEEP 8
void *sp_scratch_get(size_t bytes);
void sp_scratch_put(void *p);
/* Frees the kept buffers; how many there were (tests). */
int sp_scratch_drain(void);

#endif
