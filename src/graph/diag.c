/* Diagnostics (file:line:col, the source line, a caret) and "did you mean" suggestions. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* strnlen */
#endif
#include "diag.h"
#include "graph_int.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * DESIGN: a diagnostic is kept as its location and its formatted message,
 * and printed later with an excerpt of its source line, so the user sees
 * every problem of a file at once.  Everything here is linear in the size
 * of the file: printing indexes the lines once, and the "did you mean"
 * search has a work budget per file (SP__SUGGEST_BUDGET in graph.c).  What
 * a diagnostic echoes is bounded: names are cut to SP__NAME_MAX bytes and
 * source lines to SP__SHOW_COLS columns around the caret, so a 10 MB key
 * gives a few hundred bytes of messages, and a file prints at most
 * SP__DIAG_SHOW diagnostics, then how many more it has.
 */

#define SP__SHOW_COLS 200 /* columns of a source line shown under a message */
/* Diagnostics printed per file: 50,000 bad keys would print 150,000 lines
 * (4.5 MB) that nobody reads; the first ones say what is wrong. */
#define SP__DIAG_SHOW 50

/* --- diagnostics --------------------------------------------------------- */

void sp_diag_init(sp_diag_t *d, const char *file)
{
	d->file = file;
	d->source = NULL;
	d->n = 0;
	d->cap = 0;
	d->v = NULL;
}

void sp_diag_add(sp_diag_t *d, sp_loc_t loc, const char *fmt, ...)
{
	va_list ap;
	int len;
	char *msg;

	va_start(ap, fmt);
	len = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (len < 0)
		len = 0;
	msg = sp__xrealloc(NULL, (size_t)len + 1);
	va_start(ap, fmt);
	vsnprintf(msg, (size_t)len + 1, fmt, ap);
	va_end(ap);
	if (d->n == d->cap) {
		d->cap = d->cap != 0 ? 2 * d->cap : 16;
		d->v = sp__xrealloc(d->v, d->cap * sizeof *d->v);
	}
	d->v[d->n].loc = loc;
	d->v[d->n].msg = msg;
	d->n++;
}

/* The byte after the character at pos of line (UTF-8). */
static size_t next_char(const char *line, size_t len, size_t pos)
{
	pos++;
	while (pos < len && ((unsigned char)line[pos] & 0xC0) == 0x80)
		pos++;
	return pos;
}

/* Where the last excerpt stopped scanning, so that many diagnostics on one
 * long line (a flow mapping) do not rescan it from its start each time. */
struct excerpt_cache {
	const char *line;
	size_t pos, ch; /* byte offset and character index of a character */
};

/* Prints the source line under a diagnostic, at most SP__SHOW_COLS
 * characters of it around column col (with "..." where cut), and a caret
 * under that column.  Columns count characters (as libyaml does), not
 * bytes; tabs are copied so that the caret lines up under them. */
static void print_excerpt(FILE *f, const char *line, size_t len, int col,
			  struct excerpt_cache *cc)
{
	size_t ci = col > 1 ? (size_t)col - 1 : 0; /* the caret's character index */
	size_t first = ci > SP__SHOW_COLS / 2 ? ci - SP__SHOW_COLS / 2 : 0;
	size_t pos = 0, ch = 0, end, k;
	int cut_left;

	if (cc->line == line && cc->ch <= first) {
		pos = cc->pos;
		ch = cc->ch;
	}
	while (ch < first && pos < len) {
		pos = next_char(line, len, pos);
		ch++;
	}
	cc->line = line;
	cc->pos = pos;
	cc->ch = ch;
	if (ch < first) {
		/* The caret is far past the end of the line: show its end. */
		first = ch > SP__SHOW_COLS ? ch - SP__SHOW_COLS : 0;
		for (pos = 0, ch = 0; ch < first; ch++)
			pos = next_char(line, len, pos);
	}
	cut_left = pos > 0;
	for (end = pos, k = 0; end < len && k < SP__SHOW_COLS; k++)
		end = next_char(line, len, end);
	fprintf(f, "  %s%.*s%s\n  %s", cut_left ? "..." : "", (int)(end - pos), line + pos,
		end < len ? "..." : "", cut_left ? "   " : "");
	for (k = 0; ch < ci && k <= SP__SHOW_COLS + 3; ch++, k++) {
		if (pos < end) {
			fputc(line[pos] == '\t' ? '\t' : ' ', f);
			pos = next_char(line, len, pos);
		} else {
			fputc(' ', f);
		}
	}
	fputs("^\n", f);
}

void sp_diag_print(const sp_diag_t *d, FILE *f)
{
	/* Start and length of each line of the source, found once. */
	size_t *start = NULL, *len = NULL, nlines = 0;
	struct excerpt_cache cc = { NULL, 0, 0 };

	if (d->source != NULL) {
		const char *s = d->source;
		size_t cap = 0;

		for (size_t at = 0;;) {
			if (nlines == cap) {
				cap = cap != 0 ? 2 * cap : 64;
				start = sp__xrealloc(start, cap * sizeof *start);
				len = sp__xrealloc(len, cap * sizeof *len);
			}
			start[nlines] = at;
			len[nlines] = strcspn(s + at, "\r\n");
			nlines++;
			{
				const char *nl = strchr(s + at + len[nlines - 1], '\n');

				if (nl == NULL)
					break;
				at = (size_t)(nl - s) + 1;
			}
		}
	}
	for (size_t i = 0; i < d->n; i++) {
		const struct sp_diag_entry *e = &d->v[i];

		if (i == SP__DIAG_SHOW) {
			fprintf(f, "%s: ... and %zu more problem%s\n", d->file, d->n - i,
				d->n - i > 1 ? "s" : "");
			break;
		}

		if (e->loc.line <= 0) {
			fprintf(f, "%s: %s\n", d->file, e->msg);
			continue;
		}
		fprintf(f, "%s:%d:%d: %s\n", d->file, e->loc.line, e->loc.col, e->msg);
		if ((size_t)e->loc.line > nlines)
			continue;
		print_excerpt(f, d->source + start[e->loc.line - 1], len[e->loc.line - 1],
			      e->loc.col, &cc);
	}
	free(start);
	free(len);
}

void sp_diag_free(sp_diag_t *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->v[i].msg);
	free(d->v);
	free(d->source);
	d->v = NULL;
	d->source = NULL;
	d->n = 0;
}

/* --- did you mean -------------------------------------------------------- */

static size_t levenshtein(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	size_t row[65];

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];

		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);

			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* The candidate closest to word (edit distance at most 3 and less than the
 * longer length, or one a prefix of the other of at least 3 characters),
 * or NULL.  *budget bounds the work over a whole file (characters compared),
 * so that thousands of unknown names among thousands of candidates stay
 * linear; once spent, no more suggestions. */
static const char *suggest(long long *budget, const char *word, const char *const *cand,
			   size_t n)
{
	const char *best = NULL;
	size_t bestd = SIZE_MAX;
	size_t lw = strlen(word);

	for (size_t i = 0; i < n && *budget > 0; i++) {
		size_t lc = strlen(cand[i]);
		size_t longer = lw > lc ? lw : lc;
		size_t shorter = lw < lc ? lw : lc;
		size_t d;
		int ok;

		*budget -= (long long)lc + 1;
		if (shorter >= 3 && strncmp(word, cand[i], shorter) == 0) {
			d = longer - shorter; /* the distance of a prefix */
			ok = 1;
		} else if (longer - shorter > 3) {
			continue; /* the distance is at least the difference */
		} else {
			*budget -= (long long)(lw * lc);
			d = levenshtein(word, cand[i]);
			ok = d <= 3 && d < longer;
		}
		if (ok && d < bestd) {
			best = cand[i];
			bestd = d;
		}
	}
	return best;
}

const char *sp__diag_clipn(char *buf, const char *word, size_t n)
{
	size_t k = SP__NAME_MAX - 3;

	if (n <= SP__NAME_MAX && word[n] == '\0')
		return word;
	if (n <= SP__NAME_MAX) {
		memcpy(buf, word, n);
		buf[n] = '\0';
		return buf;
	}
	while (k > 0 && ((unsigned char)word[k] & 0xC0) == 0x80)
		k--;
	memcpy(buf, word, k);
	memcpy(buf + k, "...", 4);
	return buf;
}

const char *sp__diag_clip(char *buf, const char *word)
{
	return sp__diag_clipn(buf, word, strnlen(word, SP__NAME_MAX + 1));
}

const char *sp__diag_dym(long long *budget, char *buf, size_t len, const char *word,
			 const char *const *cand, size_t n)
{
	const char *s = suggest(budget, word, cand, n);
	char cut[SP__NAME_MAX + 4];

	if (s == NULL)
		buf[0] = '\0';
	else
		snprintf(buf, len, " (did you mean '%s'?)", sp__diag_clipn(cut, s, strlen(s)));
	return buf;
}
