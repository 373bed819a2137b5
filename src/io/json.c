/* A small streaming JSON writer: a growing buffer and a comma state per level. */
#define _GNU_SOURCE
#include "json.h"

#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SP__JSON_MAXDEPTH 64

struct sp_json {
	char *buf;
	size_t len, cap;
	int failed;
	int depth;
	unsigned char need_comma[SP__JSON_MAXDEPTH];
	int after_key;
};

sp_json_t *sp_json_new(void)
{
	return calloc(1, sizeof(sp_json_t));
}

void sp_json_free(sp_json_t **j)
{
	if (*j != NULL) {
		free((*j)->buf);
		free(*j);
		*j = NULL;
	}
}

static void put(sp_json_t *j, const char *s, size_t n)
{
	if (j->failed)
		return;
	if (j->len + n + 1 > j->cap) {
		size_t cap = j->cap ? j->cap : 256;
		while (cap < j->len + n + 1)
			cap *= 2;
		char *b = realloc(j->buf, cap);
		if (b == NULL) {
			j->failed = 1;
			return;
		}
		j->buf = b;
		j->cap = cap;
	}
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = '\0';
}

static void puts_(sp_json_t *j, const char *s) { put(j, s, strlen(s)); }

/* Separates a new value from the previous one at this level. */
static void value_start(sp_json_t *j)
{
	if (j->after_key) {
		j->after_key = 0;
		return;
	}
	if (j->need_comma[j->depth])
		puts_(j, ",");
	j->need_comma[j->depth] = 1;
}

static void open_(sp_json_t *j, const char *c)
{
	value_start(j);
	puts_(j, c);
	if (j->depth + 1 < SP__JSON_MAXDEPTH)
		j->depth++;
	j->need_comma[j->depth] = 0;
}

static void close_(sp_json_t *j, const char *c)
{
	if (j->depth > 0)
		j->depth--;
	puts_(j, c);
}

void sp_json_begin_object(sp_json_t *j) { open_(j, "{"); }
void sp_json_end_object(sp_json_t *j) { close_(j, "}"); }
void sp_json_begin_array(sp_json_t *j) { open_(j, "["); }
void sp_json_end_array(sp_json_t *j) { close_(j, "]"); }

/* Length of the well-formed UTF-8 sequence at p (RFC 3629: shortest form,
 * no surrogates, at most U+10FFFF), or 0.  p is NUL-terminated, so a
 * sequence cut short fails on the NUL without reading past it. */
static size_t utf8_len(const unsigned char *p)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xBF;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return (p[1] & 0xC0) == 0x80 ? 2 : 0;
	if (c == 0xE0)
		lo = 0xA0; /* no overlong 3-byte forms */
	else if (c == 0xED)
		hi = 0x9F; /* no UTF-16 surrogates */
	else if (c == 0xF0)
		lo = 0x90; /* no overlong 4-byte forms */
	else if (c == 0xF4)
		hi = 0x8F; /* nothing above U+10FFFF */
	if (c >= 0xE0 && c <= 0xEF)
		return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 ? 3 : 0;
	if (c >= 0xF0 && c <= 0xF4)
		return p[1] >= lo && p[1] <= hi && (p[2] & 0xC0) == 0x80 &&
			       (p[3] & 0xC0) == 0x80 ?
			       4 :
			       0;
	return 0;
}

/* A JSON string.  The output is always valid UTF-8, whatever the bytes
 * (file names are bytes): control characters are escaped, and each byte
 * that is not part of a well-formed UTF-8 sequence becomes U+FFFD, written
 * "\ufffd".  That loses the byte's value, but every strict parser accepts
 * it, which escapes such as "\u00ff" (another character) or lone
 * surrogates (rejected by many parsers) would not. */
static void quoted(sp_json_t *j, const char *s)
{
	puts_(j, "\"");
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
		char esc[8];
		size_t n;

		switch (*p) {
		case '"': puts_(j, "\\\""); break;
		case '\\': puts_(j, "\\\\"); break;
		case '\n': puts_(j, "\\n"); break;
		case '\t': puts_(j, "\\t"); break;
		case '\r': puts_(j, "\\r"); break;
		default:
			if (*p < 0x20) {
				snprintf(esc, sizeof esc, "\\u%04x", *p);
				puts_(j, esc);
			} else if ((n = utf8_len(p)) == 0) {
				puts_(j, "\\ufffd");
			} else {
				put(j, (const char *)p, n);
				p += n;
				continue;
			}
		}
		p++;
	}
	puts_(j, "\"");
}

void sp_json_key(sp_json_t *j, const char *key)
{
	value_start(j);
	quoted(j, key);
	puts_(j, ":");
	j->after_key = 1;
}

void sp_json_str(sp_json_t *j, const char *s)
{
	value_start(j);
	quoted(j, s);
}

void sp_json_num(sp_json_t *j, double x)
{
	char b[40];
	value_start(j);
	if (!isfinite(x)) {
		puts_(j, "null");
		return;
	}
	snprintf(b, sizeof b, "%.17g", x);
	puts_(j, b);
}

void sp_json_int(sp_json_t *j, long long x)
{
	char b[32];
	value_start(j);
	snprintf(b, sizeof b, "%lld", x);
	puts_(j, b);
}

void sp_json_raw(sp_json_t *j, const char *text)
{
	value_start(j);
	puts_(j, text);
}

void sp_json_raw_elements(sp_json_t *j, const char *array)
{
	const char *b = strchr(array, '['), *e = strrchr(array, ']');
	if (b == NULL || e == NULL || e <= b)
		return;
	b++;
	while (b < e && (*b == ' ' || *b == '\n' || *b == '\t'))
		b++;
	if (b == e)
		return; /* an empty array adds nothing */
	value_start(j);
	put(j, b, (size_t)(e - b));
}

void sp_json_kv_str(sp_json_t *j, const char *k, const char *s) { sp_json_key(j, k); sp_json_str(j, s); }
void sp_json_kv_num(sp_json_t *j, const char *k, double x) { sp_json_key(j, k); sp_json_num(j, x); }
void sp_json_kv_int(sp_json_t *j, const char *k, long long x) { sp_json_key(j, k); sp_json_int(j, x); }

const char *sp_json_text(const sp_json_t *j)
{
	return j->failed ? NULL : (j->buf ? j->buf : "");
}

int sp_json_write_file(const sp_json_t *j, const char *path, sp_err_t *err)
{
	const char *t = sp_json_text(j);
	if (t == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory while formatting JSON", path);
	size_t n = strlen(t);
	char *b = malloc(n + 2);
	if (b == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	memcpy(b, t, n);
	b[n] = '\n';
	int ret = sp_write_file_atomic(path, b, n + 1, err);
	free(b);
	return ret;
}
