/* Unit tests of the APPLE and J-sync tasks' nominal costs (flops, bytes) on hand-computed shapes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <starpu.h>

#include "../codelets/apple/apple_glue.h"
#include "../codelets/jsync/jsync_glue.h"

/* A small APPLE shape, set by hand (not derived): a 16 x 16 crop binned to
 * n = 8, q = 4 (nw = 5 window positions per side, 3 x 3 query grid), one
 * container of 6 (nref = 4); its search range is rows and columns [0, 3):
 * 9 scanned positions.  q x q transforms: N = 16, 2.5 N log2 N = 160;
 * ns = 4 (4/2 + 1) = 12 complex values per spectrum. */
static apple_sizes_t small_apple(void)
{
	apple_sizes_t s = { 0 };
	s.sidey = s.sidex = 16;
	s.ny = s.nx = 8;
	s.query = 4;
	s.nwy = s.nwx = 5;
	s.gy = s.gx = 3;
	s.container = 6;
	s.ncy = s.ncx = 1;
	s.nref = 4;
	return s;
}

/* The low-pass count matches the kernel the code builds. */
static void lowpass_taps(void **state)
{
	(void)state;
	double k[225];
	int nk = 0;
	apple_lowpass_kernel(k);
	for (int i = 0; i < 225; i++)
		nk += k[i] != 0.0;
	assert_int_equal(nk, APPLE_LOWPASS_TAPS);
}

static void prepare_costs(void **state)
{
	(void)state;
	apple_sizes_t s = small_apple();
	/* resize 8 * 16^2 + 8 * 16 * 8 = 2048 + 1024; low-pass 2 * 79 * 64 =
	 * 10112; moments 3 * 4 * 8 * 5 + 2 * 4 * 25 + 6 * 25 = 480 + 200 + 150;
	 * search 4 * 9 = 36; spectra 4 * 160 = 640: 14690 */
	assert_true(apple_prepare_flops(&s) == 14690.0);
	/* 4 * 256 + 8 * 128 + 24 * 64 + 32 * 40 + 16 * 25 + 16 * 9 + 8 * 4
	 * + 4 (24 * 16 + 48 * 12) = 1024 + 1024 + 1536 + 1280 + 400 + 144 + 32
	 * + 3840 = 9280 */
	assert_true(apple_prepare_bytes(&s) == 9280.0);
}

/* A rectangle: 16 x 24 inside the margins, 8 x 12 binned, windows 5 x 9,
 * containers 1 x 2 (nref 8): rows [0, 3) of both; columns [0, 3) and
 * [6, 8): 3 x 5 = 15 scanned positions. */
static void prepare_costs_rect(void **state)
{
	(void)state;
	apple_sizes_t s = small_apple();
	s.sidex = 24;
	s.nx = 12;
	s.nwx = 9;
	s.ncx = 2;
	s.nref = 8;
	/* resize 8 * 16 * 24 + 8 * 16 * 12 = 3072 + 1536; low-pass 2 * 79 * 96
	 * = 15168; moments 3 * 4 * 8 * 9 + 2 * 4 * 45 + 6 * 45 = 864 + 360 +
	 * 270; search 4 * 15 = 60; spectra 8 * 160 = 1280: 22610 */
	assert_true(apple_prepare_flops(&s) == 22610.0);
	/* 105 per window position, 45 of them */
	assert_true(apple_morph_flops(&s) == 4725.0);
	/* 2 rows of 9 positions, 5 support vectors: 18 (6 + 5 * 38) */
	assert_true(apple_classify_flops(&s, 2, 5) == 3528.0);
}

static void score_costs(void **state)
{
	(void)state;
	apple_sizes_t s = small_apple();
	/* 3 queries: 3 (160 + 4 (6 * 12 + 160 + 16 + 2)) = 3 * 1160 */
	assert_true(apple_score_flops(&s, 3) == 3480.0);
	/* 3 (24 * 16 + 32 * 12) + 3 * 4 (32 * 12 + 16 * 16 + 8) + 16 * 4 * 12
	 * = 2304 + 7776 + 768 */
	assert_true(apple_score_bytes(&s, 3) == 10848.0);
	/* tiles add up to the whole grid's count */
	assert_true(apple_score_flops(&s, 4) + apple_score_flops(&s, 5) ==
		    apple_score_flops(&s, 9));
}

static void classify_morph_costs(void **state)
{
	(void)state;
	apple_sizes_t s = small_apple();
	/* 2 rows of 5 positions against 5 support vectors, exp = 30:
	 * 10 (6 + 5 (8 + 30)) = 1960; bytes 17 * 10 + 24 * 5 = 290 */
	assert_int_equal(APPLE_EXP_FLOPS, 30);
	assert_true(apple_classify_flops(&s, 2, 5) == 1960.0);
	assert_true(apple_classify_bytes(&s, 2, 5) == 290.0);
	/* 105 and 100 per position, 25 positions */
	assert_true(apple_morph_flops(&s) == 2625.0);
	assert_true(apple_morph_bytes(&s) == 2500.0);
}

/* 10 triplets: 155 and 12 flops, 144.25, 48.25 and 192 bytes each; the
 * reduction over 5 entries: 5 adds, 24 * 5 and 8 * 5 bytes. */
static void jsync_costs(void **state)
{
	(void)state;
	assert_true(jsync_best_flops(10) == 1550.0);
	assert_true(jsync_matvec_flops(10) == 120.0);
	assert_true(jsync_fused_flops(10) == 1670.0);
	assert_true(jsync_best_bytes(10) == 1442.5);
	assert_true(jsync_matvec_bytes(10) == 482.5);
	assert_true(jsync_fused_bytes(10) == 1920.0);
	assert_true(jsync_add_flops(5) == 5.0);
	assert_true(jsync_add_bytes(5) == 120.0);
	assert_true(jsync_zero_bytes(5) == 40.0);
}

/* Twice the triplets, twice the flops and bytes. */
static void jsync_scaling(void **state)
{
	(void)state;
	const double ns[] = { 1, 7, 1000, 80850, 123457, 1 << 30 };
	for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
		double n = ns[i];
		assert_true(jsync_best_flops(2 * n) == 2 * jsync_best_flops(n));
		assert_true(jsync_matvec_flops(2 * n) == 2 * jsync_matvec_flops(n));
		assert_true(jsync_fused_flops(2 * n) == 2 * jsync_fused_flops(n));
		assert_true(jsync_best_bytes(2 * n) == 2 * jsync_best_bytes(n));
		assert_true(jsync_matvec_bytes(2 * n) == 2 * jsync_matvec_bytes(n));
		assert_true(jsync_fused_bytes(2 * n) == 2 * jsync_fused_bytes(n));
		assert_true(jsync_best_flops(n) > 0 && jsync_matvec_flops(n) > 0);
	}
}

static uint32_t footprint(int64_t ntriplets)
{
	jsync_chunk_arg_t a = { .ntriplets = ntriplets };
	struct starpu_task task;
	memset(&task, 0, sizeof task);
	task.cl_arg = &a;
	return jsync_chunk_footprint(&task);
}

/* A chunk declares its footprint's count: one per footprint (else StarPU's
 * entry gets NaN flops), a new one with every footprint, within 1/32. */
static void jsync_footprint_counts(void **state)
{
	(void)state;
	/* by hand: below 32 the count; 32 .. 33 share the bucket [32, 34): 32.5;
	 * 80850 (2^16 <= . < 2^17, buckets of 4096): [77824, 81920), 79871.5 */
	assert_true(jsync_chunk_model_triplets(0) == 0.0);
	assert_true(jsync_chunk_model_triplets(20) == 20.0);
	assert_true(jsync_chunk_model_triplets(31) == 31.0);
	assert_true(jsync_chunk_model_triplets(32) == 32.5);
	assert_true(jsync_chunk_model_triplets(33) == 32.5);
	assert_true(jsync_chunk_model_triplets(80850) == 79871.5);
	assert_true(jsync_chunk_model_triplets(77824) == 79871.5);
	assert_true(jsync_chunk_model_triplets(81919) == 79871.5);
	assert_true(jsync_chunk_model_triplets(81920) == 83967.5);
	/* every count up to 2^17, and neighbours of large ones */
	for (int64_t n = 0; n < (1 << 17); n++) {
		double m = jsync_chunk_model_triplets(n);
		int same_fp = footprint(n) == footprint(n + 1);
		int same_m = m == jsync_chunk_model_triplets(n + 1);
		if (same_fp != same_m || fabs(m - (double)n) > (double)n / 32)
			fail_msg("n = %lld: model %.1f, footprints %s, models %s", (long long)n, m,
				 same_fp ? "equal" : "differ", same_m ? "equal" : "differ");
	}
	for (int64_t n = (int64_t)1 << 40; n < ((int64_t)1 << 40) + 3 * ((int64_t)1 << 36);
	     n += (int64_t)1 << 34) {
		assert_true((footprint(n) == footprint(n - 1)) ==
			    (jsync_chunk_model_triplets(n) == jsync_chunk_model_triplets(n - 1)));
		assert_true(fabs(jsync_chunk_model_triplets(n) - (double)n) <= (double)n / 32);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lowpass_taps),	  cmocka_unit_test(prepare_costs),
		cmocka_unit_test(prepare_costs_rect),
		cmocka_unit_test(score_costs),	  cmocka_unit_test(classify_morph_costs),
		cmocka_unit_test(jsync_costs),	  cmocka_unit_test(jsync_scaling),
		cmocka_unit_test(jsync_footprint_counts),
	};
	cmocka_set_message_output(CM_OUTPUT_TAP);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
