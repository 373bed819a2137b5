/* Small helpers of the graph files: allocation that aborts, growable strings, a hash map. */
#include "graph_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * DESIGN: out of memory while loading a graph is treated as impossible
 * (abort), as in most command-line tools; sp_graph_expand_item() returns NULL
 * instead, since it runs per work item inside a batch.  Keys, variables and
 * stage names are looked up in hash tables (smap_t), so that a generated
 * graph with tens of thousands of keys loads in linear time.
 */

void *sp__xrealloc(void *p, size_t n)
{
	p = realloc(p, n != 0 ? n : 1);
	if (p == NULL) {
		fprintf(stderr, "%s: out of memory\n", __func__);
		abort();
	}
	return p;
}

void *sp__xcalloc(size_t n, size_t size)
{
	void *p = calloc(n != 0 ? n : 1, size != 0 ? size : 1);

	if (p == NULL) {
		fprintf(stderr, "%s: out of memory\n", __func__);
		abort();
	}
	return p;
}

char *sp__xstrndup(const char *s, size_t n)
{
	char *p = sp__xrealloc(NULL, n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

char *sp__xstrdup(const char *s)
{
	return sp__xstrndup(s, strlen(s));
}

void sp__sb_addn(sbuf_t *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->s = sp__xrealloc(b->s, b->cap);
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = '\0';
}

void sp__sb_add(sbuf_t *b, const char *s)
{
	sp__sb_addn(b, s, strlen(s));
}

char *sp__sb_take(sbuf_t *b)
{
	char *s = b->s != NULL ? b->s : sp__xstrdup("");

	b->s = NULL;
	b->len = b->cap = 0;
	return s;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603u; /* FNV-1a */

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211u;
	}
	return h ^ (h >> 29);
}

size_t sp__smap_get(const smap_t *m, const char *key, size_t len)
{
	if (m->cap == 0)
		return SIZE_MAX;
	for (size_t i = (size_t)hash_bytes(key, len) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		const struct smap_slot *sl = &m->v[i];

		if (sl->key == NULL)
			return SIZE_MAX;
		if (sl->len == len && memcmp(sl->key, key, len) == 0)
			return sl->val;
	}
}

size_t sp__smap_add(smap_t *m, const char *key, size_t len, size_t val)
{
	size_t i;

	if (2 * (m->n + 1) > m->cap) {
		smap_t big = { sp__xcalloc(m->cap ? 2 * m->cap : 16, sizeof *big.v),
			       m->cap ? 2 * m->cap : 16, 0 };

		for (size_t j = 0; j < m->cap; j++)
			if (m->v[j].key != NULL)
				sp__smap_add(&big, m->v[j].key, m->v[j].len, m->v[j].val);
		free(m->v);
		*m = big;
	}
	for (i = (size_t)hash_bytes(key, len) & (m->cap - 1); m->v[i].key != NULL;
	     i = (i + 1) & (m->cap - 1))
		if (m->v[i].len == len && memcmp(m->v[i].key, key, len) == 0)
			return m->v[i].val;
	m->v[i].key = key;
	m->v[i].len = len;
	m->v[i].val = val;
	m->n++;
	return SIZE_MAX;
}

void sp__smap_free(smap_t *m)
{
	free(m->v);
	m->v = NULL;
	m->cap = m->n = 0;
}

const char *sp__open_reason(const char *path, const sp_err_t *e)
{
	size_t pl = strlen(path);
	if (e->code == SP_ENOENT)
		return strerror(ENOENT);
	return strncmp(e->msg, path, pl) == 0 && e->msg[pl] == ':' ? e->msg + pl + 2 : e->msg;
}
