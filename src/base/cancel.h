/* A process-wide stop request that long kernel loops poll. */
#ifndef SP_CANCEL_H
#define SP_CANCEL_H

/*
 * DESIGN.  A stop signal cancels the items in flight, but a task already
 * running on a worker cannot be pre-empted by StarPU: it returns when its
 * kernel does.  So every kernel loop that can run for more than a fraction
 * of a second (a patch batch, a tile batch, a chunk of triplets, a power
 * iteration) polls sp_cancel_requested() between its units of work and
 * returns early when it is set; the item is failed as cancelled and its
 * outputs are never committed, so a partial result is never seen.  One
 * relaxed atomic load: cheap enough to poll once per unit of work.
 */

/* Sets the request (async-signal-safe; never cleared in a process). */
void sp_cancel_request(void);

/* Nonzero once a stop has been requested. */
int sp_cancel_requested(void);

#endif
