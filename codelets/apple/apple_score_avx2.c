/* APPLE's per-pixel and per-pair loops compiled for AVX2, where the build has that variant (apple_score_isa.h). */
#include "apple_score_isa.h"

#if SP_HAVE_AVX2_VARIANT
SP_AVX2_BEGIN
#define AS_W 4
#define AS_FN(name) name##_avx2
#include "apple_score_simd.h"
SP_AVX2_END
#else
/* ISO C wants a declaration in every translation unit */
typedef int apple_score_avx2_not_built;
#endif
