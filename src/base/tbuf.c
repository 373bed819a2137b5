/* Work buffers kept by the calling thread (tbuf.h). */
#include "tbuf.h"

#include <pthread.h>
#include <stdlib.h>

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
