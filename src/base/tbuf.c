/* Work buffers kept from one task to the next (tbuf.h). */
#include "tbuf.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct tbuf {
	void *p[SP_TBUF_NSLOTS];
	size_t cap[SP_TBUF_NSLOTS];
};

static pthread_key_t key;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int key_ok;

static void tbuf_free(void *v)
{
	struct tbuf *t = v;
	for (int k = 0; k < SP_TBUF_NSLOTS; k++)
		free(t->p[k]);
	free(t);
}

static void key_make(void)
{
	key_ok = pthread_key_create(&key, tbuf_free) == 0;
}

void *sp_thread_buf(int slot, size_t bytes)
{
	if (slot < 0 || slot >= SP_TBUF_NSLOTS)
		return NULL;
	pthread_once(&once, key_make);
	if (!key_ok)
		return NULL;
	struct tbuf *t = pthread_getspecific(key);
	if (t == NULL) {
		if ((t = calloc(1, sizeof *t)) == NULL)
			return NULL;
		if (pthread_setspecific(key, t) != 0) {
			free(t);
			return NULL;
		}
	}
	if (bytes == 0)
		bytes = 1;
	if (t->cap[slot] < bytes) {
		free(t->p[slot]);
		t->p[slot] = malloc(bytes);
		t->cap[slot] = t->p[slot] != NULL ? bytes : 0;
	}
	return t->p[slot];
}

/* ---- the pool ---- */

/* Each pool buffer starts with its capacity, in a header that keeps the
 * caller's part aligned as malloc's memory is. */
#define HDR ((size_t)64)

static struct {
	char *p; /* the header */
	size_t cap;
} pool[SP_SCRATCH_KEEP];
static int npool;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static void pool_take(int i)
{
	pool[i] = pool[--npool];
}

void *sp_scratch_get(size_t bytes)
{
	char *drop = NULL;
	int best = -1, big = -1;
	if (bytes == 0)
		bytes = 1;
	if (bytes > (size_t)-1 - HDR)
		return NULL;
	pthread_mutex_lock(&pool_lock);
	for (int i = 0; i < npool; i++) {
		if (pool[i].cap >= bytes && (best < 0 || pool[i].cap < pool[best].cap))
			best = i;
		if (big < 0 || pool[i].cap > pool[big].cap)
			big = i;
	}
	if (best >= 0) {
		char *p = pool[best].p;
		pool_take(best);
		pthread_mutex_unlock(&pool_lock);
		return p + HDR;
	}
	if (big >= 0) { /* every kept buffer is too small: the largest makes way */
		drop = pool[big].p;
		pool_take(big);
	}
	pthread_mutex_unlock(&pool_lock);
	free(drop);
	char *p = malloc(HDR + bytes);
	if (p == NULL)
		return NULL;
	memcpy(p, &bytes, sizeof bytes);
	return p + HDR;
}

void sp_scratch_put(void *q)
{
	if (q == NULL)
		return;
	char *p = (char *)q - HDR, *drop = p;
	size_t cap;
	memcpy(&cap, p, sizeof cap);
	pthread_mutex_lock(&pool_lock);
	if (npool < SP_SCRATCH_KEEP) {
		pool[npool].p = p;
		pool[npool].cap = cap;
		npool++;
		drop = NULL;
	} else { /* full: the smallest of the kept ones and this one goes */
		int small = 0;
		for (int i = 1; i < npool; i++)
			if (pool[i].cap < pool[small].cap)
				small = i;
		if (pool[small].cap < cap) {
			drop = pool[small].p;
			pool[small].p = p;
			pool[small].cap = cap;
		}
	}
	pthread_mutex_unlock(&pool_lock);
	free(drop);
}

int sp_scratch_drain(void)
{
	pthread_mutex_lock(&pool_lock);
	int n = npool;
	for (int i = 0; i < npool; i++)
		free(pool[i].p);
	npool = 0;
	pthread_mutex_unlock(&pool_lock);
	return n;
}
