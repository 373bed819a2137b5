# SP_CHECK_MPI: the MPI library of the cluster mode (optional).
#
# Any MPI-3 library: Open MPI (pkg-config ompi-c), MPICH (pkg-config mpich,
# else `mpicc -show`), or Cray MPICH behind the Cray compiler wrapper `cc`
# (`cc --cray-print-opts=cflags|libs`).  --with-mpi=openmpi|mpich|cray picks
# one; --with-mpi (or check, the default) takes the first found; --without-mpi
# builds none.  Sets MPI_CFLAGS, MPI_LIBS, have_mpi (yes/no), sp_mpi_impl (a
# name for the summary) and SP_HAVE_MPI.
AC_DEFUN([SP_CHECK_MPI], [
AC_ARG_WITH([mpi],
	[AS_HELP_STRING([--with-mpi@<:@=openmpi|mpich|cray@:>@],
		[the cluster mode's MPI (default: the first of Open MPI, MPICH, Cray MPICH found);
		 --without-mpi: none (no mpirun/srun cluster mode)])],
	[], [with_mpi=check])
have_mpi=no
sp_mpi_impl=none
sp_mpi_try() { AS_CASE(["x$with_mpi"], [xyes|xcheck|"x$[1]"], [return 0], [return 1]); }
AS_IF([test "x$with_mpi" != xno], [
	AS_IF([sp_mpi_try openmpi], [
		PKG_CHECK_MODULES([MPI], [ompi-c], [have_mpi=yes; sp_mpi_impl="Open MPI"], [:])])
	AS_IF([test "x$have_mpi" = xno && sp_mpi_try mpich], [
		PKG_CHECK_MODULES([MPI], [mpich], [have_mpi=yes; sp_mpi_impl=MPICH], [
			dnl no mpich.pc: ask the wrapper (MPICH's mpicc -show prints
			dnl the compiler line it would run)
			AC_PATH_PROGS([MPICC_MPICH], [mpicc.mpich mpicc], [])
			AS_IF([test -n "$MPICC_MPICH" && "$MPICC_MPICH" -show 2>/dev/null | grep -q .], [
				sp_show=`"$MPICC_MPICH" -show 2>/dev/null`
				AS_IF([echo "$sp_show" | grep -qi 'openmpi\|ompi'], [:], [
					MPI_CFLAGS=`for w in $sp_show; do case $w in -I*|-D*|-pthread) printf '%s ' "$w";; esac; done`
					MPI_LIBS=`for w in $sp_show; do case $w in -L*|-l*|-Wl*|-pthread) printf '%s ' "$w";; esac; done`
					have_mpi=yes
					sp_mpi_impl="MPICH (mpicc -show)"])])])])
	AS_IF([test "x$have_mpi" = xno && sp_mpi_try cray], [
		AS_IF([cc --cray-print-opts=cflags >/dev/null 2>&1], [
			MPI_CFLAGS=`cc --cray-print-opts=cflags`
			MPI_LIBS=`cc --cray-print-opts=libs`
			have_mpi=yes
			sp_mpi_impl="Cray MPICH (cc wrapper)"])])
	dnl the library must link and be MPI-3 (MPI_Comm_split_type, the
	dnl dispatcher's threads)
	AS_IF([test "x$have_mpi" = xyes], [
		sp_save_CFLAGS=$CFLAGS
		sp_save_LIBS=$LIBS
		CFLAGS="$CFLAGS $MPI_CFLAGS"
		LIBS="$MPI_LIBS $LIBS"
		AC_MSG_CHECKING([whether $sp_mpi_impl links and is MPI-3])
		AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <mpi.h>
#if MPI_VERSION < 3
#error MPI-3 needed
#endif]], [[MPI_Comm c; int p; MPI_Init_thread(0, 0, MPI_THREAD_SERIALIZED, &p);
		     MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &c);]])],
			[AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); have_mpi=no; sp_mpi_impl=none])
		CFLAGS=$sp_save_CFLAGS
		LIBS=$sp_save_LIBS])
	AS_IF([test "x$have_mpi" = xno && test "x$with_mpi" != xcheck], [
		AC_MSG_ERROR([--with-mpi=$with_mpi: no usable MPI-3 library found (Debian: libopenmpi-dev or libmpich-dev; Cray: the PrgEnv's cc wrapper)])])
])
AS_IF([test "x$have_mpi" = xyes], [
	AC_DEFINE([SP_HAVE_MPI], [1], [the MPI cluster mode is built])
	AC_DEFINE_UNQUOTED([SP_MPI_IMPL], ["$sp_mpi_impl"], [the MPI library found by configure])])
AC_SUBST([MPI_CFLAGS])
AC_SUBST([MPI_LIBS])
AM_CONDITIONAL([HAVE_MPI], [test "x$have_mpi" = xyes])
])
