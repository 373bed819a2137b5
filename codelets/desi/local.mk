# The DESI extraction pipeline in the build (doc/desi.md): included by Makefile.am, whose lists it extends; %D% is this folder.
SP_PIPELINES += desi
SP_LIB_SOURCES += \
	%D%/psf.h %D%/psf.c \
	%D%/plan.h %D%/plan.c \
	%D%/extract.h %D%/desi_kern.h %D%/extract_cpu.c %D%/eigh_simd.h %D%/normal_simd.h %D%/spots_simd.h %D%/extract_batch.c \
	%D%/frame_io.h %D%/frame_io.c %D%/frame_write.c \
	%D%/barycorr.h %D%/barycorr.c \
	%D%/fitskey.h %D%/fitskey.c %D%/fitscheck.c \
	%D%/desi_glue.h \
	%D%/input_codelet.c \
	%D%/desi_job.h %D%/desi_job.c \
	%D%/spots_codelet.c %D%/patch_codelet.c %D%/decorrelate_codelet.c \
	%D%/stitch_codelet.c %D%/model_codelet.c \
	%D%/write_codelet.c
SP_CUDA_SOURCES += %D%/psf_cuda.cu %D%/extract_cuda.cu %D%/extract_cuda_host.cu
SP_LIB_SOURCES += %D%/extract_cuda.h
SP_GRAPHS += graphs/desi-extract.yaml graphs/desi-night.yaml
EXTRA_DIST += doc/desi.md bench/desi

# the frame simulator
bin_PROGRAMS += starpipe-desi-sim
starpipe_desi_sim_SOURCES = tools/desi-sim.c tools/toolutil.h
starpipe_desi_sim_LDADD = $(SP_LIBS)
AM_TESTS_ENVIRONMENT += DESI_SIM='$(abs_top_builddir)/starpipe-desi-sim'; export DESI_SIM; \
	DESI_CRAFT='$(abs_top_builddir)/tests/desi-craft'; export DESI_CRAFT;

# tests: end to end (with desi-craft's hand-made FITS files), and the units
dist_check_SCRIPTS += tests/pipeline-desi.test tests/manifest-desi.test
check_PROGRAMS += tests/desi-craft
tests_desi_craft_SOURCES = tests/desi-craft.c tests/desi_craft.h
tests_desi_craft_LDADD = $(SP_LIBS)
SP_UNIT_TESTS += tests/test_desi_kern tests/test_desi_plan tests/test_desi_psf tests/test_desi_psf_cuda \
	tests/test_desi_extract tests/test_desi_frame_io tests/test_desi_fitskey tests/test_desi_batch \
	tests/test_desi_barycorr tests/test_desi_batch_cuda
tests_test_desi_kern_SOURCES = tests/test_desi_kern.c
tests_test_desi_kern_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_kern_LDADD = $(TEST_LIBS)
tests_test_desi_plan_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_plan_LDADD = $(TEST_LIBS)
tests_test_desi_psf_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_psf_LDADD = $(TEST_LIBS)
tests_test_desi_psf_cuda_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_psf_cuda_LDADD = $(TEST_LIBS)
tests_test_desi_extract_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_extract_LDADD = $(TEST_LIBS)
tests_test_desi_frame_io_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_frame_io_LDADD = $(TEST_LIBS)
tests_test_desi_fitskey_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_fitskey_LDADD = $(TEST_LIBS)
tests_test_desi_barycorr_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_barycorr_LDADD = $(TEST_LIBS)
tests_test_desi_batch_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_batch_LDADD = $(TEST_LIBS)
tests_test_desi_batch_cuda_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_desi_batch_cuda_LDADD = $(TEST_LIBS)

# benchmarks (not run by make check)
EXTRA_PROGRAMS += bench/desi-patch
bench_desi_patch_SOURCES = bench/desi-patch.c bench/benchutil.h
bench_desi_patch_LDADD = $(SP_LIBS)
EXTRA_PROGRAMS += bench/desi-spots
bench_desi_spots_SOURCES = bench/desi-spots.c bench/benchutil.h
bench_desi_spots_LDADD = $(SP_LIBS)
EXTRA_PROGRAMS += bench/desi-framediff
bench_desi_framediff_SOURCES = bench/desi-framediff.c
bench_desi_framediff_LDADD = $(SP_LIBS)
