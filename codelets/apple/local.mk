# The APPLE-Picker pipeline in the build (doc/apple.md): included by Makefile.am, whose lists it extends; %D% is this folder.
SP_PIPELINES += apple
SP_LIB_SOURCES += \
	%D%/apple.h %D%/apple_kern.h %D%/apple_cpu.c %D%/apple_score.c %D%/apple_svm.c %D%/apple_morph.c \
	%D%/apple_score_isa.h %D%/apple_score_simd.h %D%/apple_score_base.c %D%/apple_score_avx2.c \
	%D%/mrc.h %D%/mrc.c \
	%D%/tiff.h %D%/tiff.c \
	%D%/micfile.h %D%/micfile.c \
	%D%/star.h %D%/star.c \
	%D%/preview.h %D%/preview.c \
	%D%/apple_glue.h \
	%D%/read_codelet.c \
	%D%/apple_job.h %D%/apple_job.c \
	%D%/preprocess_codelet.c %D%/score_codelet.c %D%/train_codelet.c \
	%D%/classify_codelet.c %D%/morphology_codelet.c %D%/pick_codelet.c \
	%D%/write_codelet.c
SP_CUDA_SOURCES += %D%/apple_cuda.cu %D%/apple_cuda_image.cu
SP_LIB_SOURCES += %D%/apple_cuda_util.h
SP_GRAPHS += graphs/apple-pick.yaml
EXTRA_DIST += doc/apple.md bench/apple bench/apple-batch bench/apple_aspire_ref.py

# the micrograph simulator
bin_PROGRAMS += starpipe-apple-sim
starpipe_apple_sim_SOURCES = tools/apple-sim.c tools/toolutil.h
starpipe_apple_sim_LDADD = $(SP_LIBS)
AM_TESTS_ENVIRONMENT += APPLE_SIM='$(abs_top_builddir)/starpipe-apple-sim'; export APPLE_SIM; \
	MRC2TIFF='$(abs_top_builddir)/tests/mrc2tiff'; export MRC2TIFF;

# tests: end to end (with mrc2tiff's TIFF copies of micrographs), and the units
dist_check_SCRIPTS += tests/pipeline-apple.test
check_PROGRAMS += tests/mrc2tiff
tests_mrc2tiff_SOURCES = tests/mrc2tiff.c tests/tiffwrite.h
tests_mrc2tiff_LDADD = $(SP_LIBS)
SP_UNIT_TESTS += tests/test_apple_cpu tests/test_apple_kern tests/test_apple_io tests/test_apple_cuda
tests_test_apple_cpu_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_apple_cpu_LDADD = $(TEST_LIBS)
tests_test_apple_kern_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_apple_kern_LDADD = $(TEST_LIBS)
tests_test_apple_io_SOURCES = tests/test_apple_io.c tests/tiffwrite.h
tests_test_apple_io_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_apple_io_LDADD = $(TEST_LIBS)
tests_test_apple_cuda_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_test_apple_cuda_LDADD = $(TEST_LIBS)

# one core's score speed, both routes in one run (bench/apple-score.c; make bench/apple-score)
EXTRA_PROGRAMS += bench/apple-score
bench_apple_score_SOURCES = bench/apple-score.c bench/benchutil.h
bench_apple_score_LDADD = $(SP_LIBS)
