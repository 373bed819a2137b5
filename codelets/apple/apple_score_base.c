/* APPLE's per-pixel and per-pair loops compiled for the build's own target (apple_score_isa.h). */
#include "apple_score_isa.h"

#define AS_W SP_BASELINE_W
#define AS_FN(name) name##_base
#include "apple_score_simd.h"
