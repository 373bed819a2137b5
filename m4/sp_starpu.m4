dnl SP_CHECK_STARPU: find StarPU 1.4 or 1.3 through pkg-config; --with-starpu=PREFIX
dnl looks in PREFIX's pkg-config folders first (a self-built or unpacked StarPU).
AC_DEFUN([SP_CHECK_STARPU], [
AC_ARG_WITH([starpu],
	[AS_HELP_STRING([--with-starpu=PREFIX], [StarPU installed or unpacked under PREFIX])],
	[sp_starpu_prefix=$withval], [sp_starpu_prefix=])
AS_IF([test -n "$sp_starpu_prefix"], [
	for d in "$sp_starpu_prefix/lib/pkgconfig" "$sp_starpu_prefix/lib/x86_64-linux-gnu/pkgconfig" \
		 "$sp_starpu_prefix/usr/lib/x86_64-linux-gnu/pkgconfig" "$sp_starpu_prefix/lib64/pkgconfig"; do
		AS_IF([test -d "$d"], [PKG_CONFIG_PATH="$d${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"])
	done
	export PKG_CONFIG_PATH
])
sp_starpu_version=
PKG_CHECK_MODULES([STARPU], [starpu-1.4], [sp_starpu_version=1.4], [
	PKG_CHECK_MODULES([STARPU], [starpu-1.3], [sp_starpu_version=1.3],
		[AC_MSG_ERROR([StarPU 1.3 or 1.4 not found (Debian: libstarpu-dev; or --with-starpu=PREFIX)])])])
AC_SUBST([sp_starpu_version])
dnl Its CPU cap: Debian's binary has 4, tools/build-starpu 256.
sp_save_CPPFLAGS=$CPPFLAGS
CPPFLAGS="$CPPFLAGS $STARPU_CFLAGS"
AC_COMPUTE_INT([sp_starpu_maxcpus], [STARPU_MAXCPUS], [[#include <starpu_config.h>]],
	[sp_starpu_maxcpus=unknown])
CPPFLAGS=$sp_save_CPPFLAGS
sp_starpu_found=`$PKG_CONFIG --modversion starpu-$sp_starpu_version 2>/dev/null`
sp_starpu_where=`$PKG_CONFIG --variable=libdir starpu-$sp_starpu_version 2>/dev/null`
AC_MSG_CHECKING([StarPU's CPU worker cap (STARPU_MAXCPUS)])
AC_MSG_RESULT([$sp_starpu_maxcpus])
dnl An unpacked prefix is not on the loader's path: record it as an rpath.
AS_IF([test -n "$sp_starpu_prefix"], [
	sp_libdir=`$PKG_CONFIG --variable=libdir starpu-$sp_starpu_version`
	dnl DT_RPATH (not RUNPATH) so that libstarpu's own dependencies (libcudart.so.11.0,
	dnl the cuBLAS/cuSPARSE stand-ins) are found there too.
	STARPU_LIBS="$STARPU_LIBS -Wl,--disable-new-dtags -Wl,-rpath,$sp_libdir"
])
])
