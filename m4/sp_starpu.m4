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

dnl SP_CHECK_STARPU_SIMGRID: --with-starpu-simgrid=PREFIX, a StarPU built with
dnl SimGrid (tools/build-starpu --simgrid PREFIX), for the second binary
dnl starpipe-sim.  Sets STARPU_SIM_CFLAGS, STARPU_SIM_LIBS and HAVE_SIMGRID.
AC_DEFUN([SP_CHECK_STARPU_SIMGRID], [
AC_ARG_WITH([starpu-simgrid],
	[AS_HELP_STRING([--with-starpu-simgrid=PREFIX],
		[also build starpipe-sim, the simulated runtime, against the SimGrid StarPU under PREFIX])],
	[sp_sim_prefix=$withval], [sp_sim_prefix=no])
STARPU_SIM_CFLAGS=
STARPU_SIM_LIBS=
STARPU_SIM_PREFIX=
AS_IF([test "x$sp_sim_prefix" != xno], [
	STARPU_SIM_PREFIX=$sp_sim_prefix
	sp_sim_pc=
	for d in "$sp_sim_prefix/lib/pkgconfig" "$sp_sim_prefix/lib/x86_64-linux-gnu/pkgconfig" \
		 "$sp_sim_prefix/lib64/pkgconfig"; do
		AS_IF([test -f "$d/starpu-1.3.pc"], [sp_sim_pc=$d])
	done
	AS_IF([test -z "$sp_sim_pc"],
		[AC_MSG_ERROR([--with-starpu-simgrid: no starpu-1.3.pc under $sp_sim_prefix (tools/build-starpu --simgrid $sp_sim_prefix)])])
	STARPU_SIM_CFLAGS=`PKG_CONFIG_PATH="$sp_sim_pc" $PKG_CONFIG --cflags starpu-1.3`
	sp_sim_libdir=`PKG_CONFIG_PATH="$sp_sim_pc" $PKG_CONFIG --variable=libdir starpu-1.3`
	STARPU_SIM_LIBS="`PKG_CONFIG_PATH="$sp_sim_pc" $PKG_CONFIG --libs starpu-1.3` -Wl,-rpath,$sp_sim_libdir"
	sp_save_CPPFLAGS=$CPPFLAGS
	CPPFLAGS="$CPPFLAGS $STARPU_SIM_CFLAGS"
	AC_MSG_CHECKING([whether the StarPU under $sp_sim_prefix simulates with SimGrid])
	AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <starpu_config.h>
#ifndef STARPU_SIMGRID
#error not a SimGrid build
#endif]], [[]])], [AC_MSG_RESULT([yes])],
		[AC_MSG_RESULT([no]); AC_MSG_ERROR([--with-starpu-simgrid: $sp_sim_prefix holds a StarPU built without --enable-simgrid])])
	CPPFLAGS=$sp_save_CPPFLAGS
])
AS_IF([test -n "$STARPU_SIM_LIBS"], [sp_sim_summary="yes (SimGrid StarPU in $sp_sim_prefix)"],
	[sp_sim_summary="no (--with-starpu-simgrid=PREFIX)"])
AC_SUBST([STARPU_SIM_CFLAGS])
AC_SUBST([STARPU_SIM_LIBS])
AC_SUBST([STARPU_SIM_PREFIX])
AM_CONDITIONAL([HAVE_SIMGRID], [test -n "$STARPU_SIM_LIBS"])
])
