/* Error table of starpipe: sp_strerror() and sp_seterr(). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

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

int sp_seterr(sp_err_t *err, int code, const char *fmt, ...)
{
	if (err != NULL) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
		err->code = code;
	}
	return code;
}
