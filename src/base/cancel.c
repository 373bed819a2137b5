/* The process-wide stop request (cancel.h). */
#include <stdatomic.h>

#include "cancel.h"

static atomic_int requested;

void sp_cancel_request(void)
{
	atomic_store_explicit(&requested, 1, memory_order_relaxed);
}

int sp_cancel_requested(void)
{
	return atomic_load_explicit(&requested, memory_order_relaxed);
}
