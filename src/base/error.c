/* Error table of starpipe: sp_strerror() and sp_seterr(). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sp_strerror(int code)
{
	switch (code) {
	case SP_OK:
		return "success";
#define SP__ERR_STR(name, msg) \
	case SP_##name:        \
		return msg;
		SP_ERRNO_MAP(SP__ERR_STR)
#undef SP__ERR_STR
	default:
		return "unknown error";
	}
}

const char *sp_err_name(int code)
{
	switch (code) {
	case SP_OK:
		return "OK";
#define SP__ERR_NAME(name, msg) \
	case SP_##name:         \
		return #name;
		SP_ERRNO_MAP(SP__ERR_NAME)
#undef SP__ERR_NAME
	default:
		return "UNKNOWN";
	}
}

/* Whether byte i of s starts a character (or is the end). */
static int char_start(const char *s, size_t i)
{
	return ((unsigned char)s[i] & 0xC0) != 0x80;
}

static int word_char(char ch)
{
	return ch != ' ' && ch != '\'' && ch != '"' && ch != '`' && ch != '\0';
}

/* Writes s[0..n) into buf (size bytes), n >= size: the ends kept, the
 * middle replaced by "...". */
static size_t fit(char *buf, size_t size, const char *s, size_t n)
{
	size_t room = size - 1, excess = n - room + 3; /* bytes to remove, "..." added */
	size_t best = 0, bestlen = 0, a, b;

	/* The longest word. */
	for (size_t i = 0; i < n;) {
		size_t j = i;

		while (j < n && word_char(s[j]))
			j++;
		if (j - i > bestlen) {
			best = i;
			bestlen = j - i;
		}
		i = j + 1;
	}
	if (bestlen >= excess + 8) {
		/* Cut the middle of the word, keeping as much of both of its
		 * ends. */
		a = best + (bestlen - excess) / 2;
	} else {
		/* Keep a quarter from the start, the rest from the end: the end
		 * holds the reason. */
		a = room / 4;
	}
	b = a + excess;
	while (a > 0 && !char_start(s, a))
		a--;
	while (b < n && !char_start(s, b))
		b++;
	memcpy(buf, s, a);
	memcpy(buf + a, "...", 3);
	memcpy(buf + a + 3, s + b, n - b);
	buf[a + 3 + n - b] = '\0';
	return a + 3 + n - b;
}

size_t sp_vfmt_fit(char *buf, size_t size, const char *fmt, va_list ap)
{
	char small[1024], *s = small;
	va_list aq;
	int n;

	if (size == 0)
		return 0;
	va_copy(aq, ap);
	n = vsnprintf(small, sizeof small, fmt, aq);
	va_end(aq);
	if (n < 0) {
		buf[0] = '\0';
		return 0;
	}
	if ((size_t)n >= sizeof small) {
		s = malloc((size_t)n + 1);
		if (s == NULL) /* keep what fits */
			return (size_t)vsnprintf(buf, size, fmt, ap) < size ? strlen(buf) : size - 1;
		vsnprintf(s, (size_t)n + 1, fmt, ap);
	}
	if ((size_t)n < size) {
		memcpy(buf, s, (size_t)n + 1);
	} else if (size < 16) {
		memcpy(buf, s, size - 1);
		buf[size - 1] = '\0';
		n = (int)(size - 1);
	} else {
		n = (int)fit(buf, size, s, (size_t)n);
	}
	if (s != small)
		free(s);
	return (size_t)n;
}

size_t sp_fmt_fit(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	n = sp_vfmt_fit(buf, size, fmt, ap);
	va_end(ap);
	return n;
}

int sp_seterr(sp_err_t *err, int code, const char *fmt, ...)
{
	if (err != NULL) {
		char msg[sizeof err->msg];
		va_list ap;

		/* Formatted aside first: an argument may be err->msg. */
		va_start(ap, fmt);
		sp_vfmt_fit(msg, sizeof msg, fmt, ap);
		va_end(ap);
		memcpy(err->msg, msg, sizeof msg);
		err->code = code;
	}
	return code;
}
