/* Stage-kind registry, runtime parameters, and parameter value checking. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* strdup, getline, strcasecmp */
#endif
#include "stage.h"
#include "error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/*
 * DESIGN: the kinds themselves live beside their codelets and are listed by
 * codelets/kinds.c, which the programs link and which hands its list to
 * sp_stage_kinds_link() as they load; the registry handed to the graph
 * loader carries that list, and this file only searches it.
 * Parameter values are kept as text everywhere (graph files, --set,
 * defaults) and checked here once, so the validator, `starpipe list` and
 * the stages agree on what a value means.
 */

static const sp_stage_kind_t *const *linked;
static size_t nlinked;

void sp_stage_kinds_link(const sp_stage_kind_t *const *kinds, size_t n)
{
	linked = kinds;
	nlinked = n;
}

const sp_stage_kind_t *const *sp_stage_kinds_linked(size_t *n)
{
	*n = nlinked;
	return linked;
}

const sp_stage_kind_t *sp_stage_find(const sp_registry_t *reg, const char *name)
{
	size_t lo = 0, hi = reg->nkinds;
	const sp_stage_kind_t *const *kinds = reg->kinds;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, kinds[mid]->name);

		if (c == 0)
			return kinds[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* The bytes a typed parameter of type t takes in its kind's struct (stage.h). */
static size_t typed_size(sp_ptype_t t)
{
	switch (t) {
	case SP_PT_INT: return sizeof(long long);
	case SP_PT_FLOAT: return sizeof(double);
	case SP_PT_SIZE: return sizeof(unsigned long long);
	case SP_PT_BOOL:
	case SP_PT_ENUM: return sizeof(int);
	default: return sizeof(const char *);
	}
}

int sp_stage_kind_check(const sp_stage_kind_t *kind, char *msg, size_t len)
{
	for (size_t i = 0; i < kind->nparams; i++) {
		const sp_param_spec_t *p = &kind->params[i];
		if (p->at == 0)
			continue;
		if (p->at - 1 + typed_size(p->type) > kind->params_size) {
			snprintf(msg, len, "kind '%s': parameter '%s' lies at byte %zu of a %zu-byte "
					   "struct (declare it with SP_KIND_PARAMS(specs, struct))",
				 kind->name, p->name, p->at - 1, kind->params_size);
			return -1;
		}
	}
	return 0;
}

const sp_param_spec_t sp_runtime_params[SP_RT_NPARAMS] = {
	[SP_RT_SCHEDULER] = { "scheduler", SP_PT_STRING, "auto", 0, -1, NULL,
	  "StarPU scheduling policy (heteroprio, dmdas, lws, eager...); auto: heteroprio with GPUs, lws without",
	  SP_AT(sp_runtime_params_t, scheduler) },
	[SP_RT_NCPUS] = { "ncpus", SP_PT_INT, "-1", -1, 4096, NULL,
	  "CPU workers; -1 = all cores", SP_AT(sp_runtime_params_t, ncpus) },
	[SP_RT_NCUDA] = { "ncuda", SP_PT_INT, "-1", -1, 64, NULL,
	  "CUDA devices; -1 = all", SP_AT(sp_runtime_params_t, ncuda) },
	[SP_RT_WORKERS_PER_GPU] = { "workers_per_gpu", SP_PT_INT, "1", 1, 16, NULL,
	  "StarPU workers (streams) per GPU", SP_AT(sp_runtime_params_t, workers_per_gpu) },
	[SP_RT_PERFMODEL_DIR] = { "perfmodel_dir", SP_PT_PATH, "", 0, -1, NULL,
	  "folder for StarPU performance models; empty = StarPU's default",
	  SP_AT(sp_runtime_params_t, perfmodel_dir) },
	[SP_RT_CALIBRATE] = { "calibrate", SP_PT_INT, "0", 0, 2, NULL,
	  "perf-model calibration: 0 none, 1 calibrate, 2 recalibrate",
	  SP_AT(sp_runtime_params_t, calibrate) },
	[SP_RT_LANES] = { "lanes", SP_PT_ENUM, "auto", 0, -1, "auto|off|on",
	  "a CPU lane beside the GPU lane, each item run whole in one (doc/scheduling.md); "
	  "auto: a CPU lane on a GPU node unless scheduler or ncpus is set, on: a CPU lane",
	  SP_AT(sp_runtime_params_t, lanes) },
	[SP_RT_CPU_LANE] = { "cpu_lane", SP_PT_INT, "-1", -1, 4096, NULL,
	  "CPU workers of the CPU lane; -1 = all but those the GPU lane keeps (doc/scheduling.md)",
	  SP_AT(sp_runtime_params_t, cpu_lane) },
};
const size_t sp_runtime_nparams = sizeof sp_runtime_params / sizeof sp_runtime_params[0];

/* Parses a whole decimal integer (optional sign, no spaces).  Returns 0, or
 * -1 when it is not one, or 1 when it overflows. */
static int parse_int(const char *s, long long *v)
{
	const char *p = s;
	char *end;

	if (*p == '+' || *p == '-')
		p++;
	if (*p < '0' || *p > '9')
		return -1;
	errno = 0;
	*v = strtoll(s, &end, 10);
	if (*end != '\0')
		return -1;
	return errno == ERANGE ? 1 : 0;
}

static int parse_float(const char *s, double *v)
{
	char *end;

	/* strtod would skip leading spaces and accept "nan", "inf", hex. */
	if (!((*s >= '0' && *s <= '9') || *s == '.' || *s == '-' || *s == '+'))
		return -1;
	if (strpbrk(s, "xXnNiI") != NULL)
		return -1;
	errno = 0;
	*v = strtod(s, &end);
	if (end == s || *end != '\0' || !isfinite(*v))
		return -1;
	return 0;
}

/* 1 for true, 0 for false, -1 for neither. */
static int parse_bool(const char *s)
{
	static const char *const yes[] = { "true", "yes", "on", "1" };
	static const char *const no[] = { "false", "no", "off", "0" };

	for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return 1;
		if (strcasecmp(s, no[i]) == 0)
			return 0;
	}
	return -1;
}

/* Digits with an optional K/M/G/T suffix (powers of 1024).  Returns 0, -1
 * when malformed, 1 on overflow. */
static int parse_size(const char *s, unsigned long long *v)
{
	unsigned long long n = 0;
	const char *p = s;
	unsigned shift = 0;

	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (n > (~0ULL - 9) / 10)
			return 1;
		n = n * 10 + (unsigned)(*p - '0');
	}
	switch (*p) {
	case 'k': case 'K': shift = 10; p++; break;
	case 'm': case 'M': shift = 20; p++; break;
	case 'g': case 'G': shift = 30; p++; break;
	case 't': case 'T': shift = 40; p++; break;
	default: break;
	}
	if (*p != '\0')
		return -1;
	if (shift != 0 && n > (~0ULL >> shift))
		return 1;
	*v = n << shift;
	return 0;
}

/* The index of word in the '|'-separated choices, or -1. */
static int enum_index(const char *choices, const char *word)
{
	size_t len = strlen(word);
	int i = 0;
	for (const char *c = choices; c != NULL; i++) {
		const char *bar = strchr(c, '|');
		size_t n = bar != NULL ? (size_t)(bar - c) : strlen(c);
		if (n == len && strncmp(c, word, n) == 0)
			return i;
		c = bar != NULL ? bar + 1 : NULL;
	}
	return -1;
}

static int enum_has(const char *choices, const char *s)
{
	return s[0] != '\0' && choices != NULL && enum_index(choices, s) >= 0;
}

int sp_param_check(const sp_param_spec_t *spec, const char *text, char *msg,
		   size_t msglen)
{
	int ranged = spec->min <= spec->max;

	switch (spec->type) {
	case SP_PT_INT: {
		long long v;
		int rc = parse_int(text, &v);

		if (rc < 0)
			break;
		if (rc > 0 || (ranged && ((double)v < spec->min || (double)v > spec->max)))
			goto range;
		return 0;
	}
	case SP_PT_FLOAT: {
		double v;

		if (parse_float(text, &v) != 0)
			break;
		if (ranged && (v < spec->min || v > spec->max))
			goto range;
		return 0;
	}
	case SP_PT_BOOL:
		if (parse_bool(text) >= 0)
			return 0;
		snprintf(msg, msglen, "expected true or false, got '%s'", text);
		return SP_EINVAL;
	case SP_PT_STRING:
		return 0;
	case SP_PT_PATH:
	case SP_PT_OUTPUT:
		if (spec->def != NULL || text[0] != '\0')
			return 0;
		snprintf(msg, msglen, "expected a path, got an empty value");
		return SP_EINVAL;
	case SP_PT_ENUM:
		if (enum_has(spec->choices, text))
			return 0;
		snprintf(msg, msglen, "expected one of %s, got '%s'",
			 spec->choices != NULL ? spec->choices : "", text);
		return SP_EINVAL;
	case SP_PT_SIZE: {
		unsigned long long v;
		int rc = parse_size(text, &v);

		if (rc < 0) {
			snprintf(msg, msglen,
				 "expected a size in bytes with an optional K, M, G or T suffix, got '%s'",
				 text);
			return SP_EINVAL;
		}
		if (rc == 0 && (!ranged || ((double)v >= spec->min &&
					    (double)v <= spec->max)))
			return 0;
		if (rc > 0 || !ranged) {
			snprintf(msg, msglen, "size '%s' is too large", text);
			return SP_EINVAL;
		}
		snprintf(msg, msglen, "expected a size in [%.0f, %.0f] bytes, got '%s'",
			 spec->min, spec->max, text);
		return SP_EINVAL;
	}
	}
	/* An INT or FLOAT that does not parse. */
	snprintf(msg, msglen, "expected %s, got '%s'",
		 spec->type == SP_PT_INT ? "an integer" : "a number", text);
	return SP_EINVAL;
range:
	if (!ranged)
		snprintf(msg, msglen, "integer '%s' is too large", text);
	else if (spec->type == SP_PT_INT)
		snprintf(msg, msglen, "expected an integer in [%.0f, %.0f], got '%s'",
			 spec->min, spec->max, text);
	else
		snprintf(msg, msglen, "expected a number in [%g, %g], got '%s'",
			 spec->min, spec->max, text);
	return SP_EINVAL;
}

long long sp_param_int(const char *text)
{
	long long v = 0;

	if (parse_int(text, &v) != 0)
		return 0;
	return v;
}

double sp_param_float(const char *text)
{
	double v = 0;

	if (parse_float(text, &v) != 0)
		return 0;
	return v;
}

int sp_param_bool(const char *text)
{
	return parse_bool(text) == 1;
}

unsigned long long sp_param_size(const char *text)
{
	unsigned long long v = 0;

	if (parse_size(text, &v) != 0)
		return 0;
	return v;
}

void sp_params_fill(const sp_param_spec_t *specs, size_t n, const char *const *texts, void *out)
{
	for (size_t i = 0; i < n; i++) {
		const sp_param_spec_t *sp = &specs[i];
		char *at = (char *)out + sp->at - 1;
		if (sp->at == 0)
			continue;
		switch (sp->type) {
		case SP_PT_STRING:
		case SP_PT_PATH:
		case SP_PT_OUTPUT:
			memcpy(at, &texts[i], sizeof texts[i]);
			break;
		case SP_PT_INT: {
			long long v = sp_param_int(texts[i]);
			memcpy(at, &v, sizeof v);
			break;
		}
		case SP_PT_FLOAT: {
			double v = sp_param_float(texts[i]);
			memcpy(at, &v, sizeof v);
			break;
		}
		case SP_PT_BOOL: {
			int v = sp_param_bool(texts[i]);
			memcpy(at, &v, sizeof v);
			break;
		}
		case SP_PT_SIZE: {
			unsigned long long v = sp_param_size(texts[i]);
			memcpy(at, &v, sizeof v);
			break;
		}
		case SP_PT_ENUM: {
			int v = enum_index(sp->choices, texts[i]);
			memcpy(at, &v, sizeof v);
			break;
		}
		default:
			break;
		}
	}
}
