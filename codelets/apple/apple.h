/* APPLE-Picker particle picking: the contract of the CPU kernels (preprocess, moments, score, SVM, morphology, pick). */
#ifndef SP_APPLE_H
#define SP_APPLE_H

/*
 * DESIGN.  The steps of ../shared/science/apple-picker.md, as ASPIRE-Python
 * (src/aspire/apple/{picking,helper}.py) computes them, one function (or a
 * splittable pair) per step, on plain arrays: every image is row-major
 * [row y][column x], C order, no padding.  Sizes in `apple_params_t` are in
 * pixels of the original micrograph; `apple_sizes_t` holds the binned
 * (shrink 2) sizes the kernels use.  Images:
 *
 *   micrograph   float  [ny][nx]           as read from the MRC file
 *   im           double [ny][nx]           preprocessed (binned, filtered);
 *                                          float32 precision, stored as double
 *   mean, std    double [nwy][nwx]         moments of the q x q window whose
 *                                          top-left pixel is [r][c];
 *                                          nwy = ny-q+1, nwx = nx-q+1
 *   score        int32  [gy][gx]           per query window (grid step q/2)
 *   seg          uint8  [nwy][nwx]         0/1 segmentation (window positions)
 *   picks        int    [npick][2]         (x, y) in original pixels
 *
 * ASPIRE crops a micrograph to a square; starpipe keeps the whole
 * rectangle inside the margins (every step below takes ny != nx).  On a
 * square micrograph every step computes exactly what ASPIRE computes.
 *
 * Kernels are single-threaded and never print.  Functions returning int give
 * 0 or a negative SP_E* code (../../src/error.h).  FFTW plans are made only
 * by apple_score_fft_init() (FFTW_ESTIMATE; the planner is not thread-safe,
 * so the caller makes one plan set per worker at init, serialised, and each
 * worker then uses its own set in its hot path).
 */

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* User parameters, pixels of the original micrograph (ASPIRE's names).  A
 * value <= 0 means "default" for every field but particle_size. */
typedef struct apple_params {
	int particle_size;          /* required, 5 <= . < 3000 */
	int max_particle_size;      /* default 2 particle_size */
	int min_particle_size;      /* default particle_size / 4 */
	int minimum_overlap_amount; /* default particle_size / 10 */
	int query_image_size;       /* default rint(2/3 particle_size) - its remainder mod 4 */
	int tau1, tau2;             /* default: see apple_params_derive() */
	int container_size;         /* default 450; particle_size <= . <= 1900 */
	int margin_left, margin_right, margin_top, margin_bottom; /* 99, 100, 99, 100 */
	int fix_quirks;             /* 0: reproduce ASPIRE's picks exactly; 1: see apple_pick() */
} apple_params_t;

/* Binned sizes and derived counts (apple_params_derive()). */
typedef struct apple_sizes {
	int particle, max_size, min_size, query, moa, container; /* binned (int(x / 2); query even) */
	int tau1, tau2;      /* counts of query windows (final) */
	int sidey, sidex;    /* the micrograph inside the margins (original pixels) */
	int ny, nx;          /* preprocessed image: sidey / 2 rows, sidex / 2 columns */
	int nwy, nwx;        /* window positions: ny - query + 1 rows, nx - query + 1 columns */
	int gy, gx;          /* query grid: floor(2 ny / query) - 1 rows, floor(2 nx / query) - 1 */
	int ncy, ncx;        /* containers: ny / container rows, nx / container columns */
	int nref;            /* references: 4 ncy ncx */
} apple_sizes_t;

/* The most (query window, reference) correlations a micrograph may ask
 * for: the response cube's entries (doubles), 2 GiB.  ASPIRE's defaults
 * ask for 7.9 million on a 4k micrograph (particle_size 78: 156 x 156
 * windows x 324 references); a small query_image_size (more windows) with
 * a small container_size (more references) asked for trillions, and the
 * cube's element count overflowed. */
#define APPLE_MAX_CORRELATIONS (1 << 28)

/* Fills the defaults of *p (fields <= 0) as ASPIRE does. */
void apple_params_defaults(apple_params_t *p);

/* Checks *p (after apple_params_defaults()) against ASPIRE's ranges and a
 * micrograph of ny rows x nx columns, and derives *s.  tau1/tau2: a user
 * value > 0 is kept; the default is ASPIRE's int(0.03 q_box), int(0.3 q_box)
 * with q_box = 4 (4000 / query_image_size)^2, which assumes a ~4k
 * micrograph (ASPIRE indexes past its query list, and crashes, when tau2
 * exceeds the number of query windows gy gx).  When that default tau2
 * exceeds gy gx, both are scaled to the image instead: tau1 = 3 gy gx / 100,
 * tau2 = 30 gy gx / 100 (integer division; 147 and 1470 on the 2k test
 * image, the values the reference was run with).  Returns 0 or SP_EINVAL
 * (message in err: which parameter, its range), also when gy gx nref
 * exceeds APPLE_MAX_CORRELATIONS. */
int apple_params_derive(const apple_params_t *p, int ny, int nx, apple_sizes_t *s, sp_err_t *err);

/* ---- Step 1: preprocess ---------------------------------------------- */

/* Doubles of scratch apple_preprocess() needs. */
size_t apple_preprocess_work_size(const apple_params_t *p, const apple_sizes_t *s);

/* The 15 x 15 low-pass kernel k[row][col], as ASPIRE writes it:
 * exp(-col^2 - row^2 / (2 sigma^2)) / (sqrt(2 pi) sigma), offsets -7..7,
 * entries < DBL_EPSILON set to 0, divided by its sum (NumPy's pairwise sum,
 * so that the entries are bit-identical to the reference's). */
void apple_lowpass_kernel(double k[15 * 15]);

/* micrograph float [ny][nx] -> im double [s->ny][s->nx]: drop the margins
 * (sidey x sidex left), Pillow BICUBIC resize to s->ny x s->nx (a = -0.5,
 * horizontal pass then vertical, float32 between and after the passes,
 * scale = side / n on each axis), then "same"-size correlation with
 * apple_lowpass_kernel() in double (zero outside the image).  The result
 * is rounded to float32 where out32 is not NULL ([s->ny][s->nx]; the reference's
 * dump).  work: apple_preprocess_work_size() doubles. */
void apple_preprocess(const apple_params_t *p, const apple_sizes_t *s, const float *micrograph,
		      int ny, int nx, double *im, float *out32, double *work);

/* ---- Step 2: moments --------------------------------------------------- */

/* mean and std [ny-q+1][nx-q+1] of every q x q window of im [ny][nx] (top-left
 * [r][c]), std = sqrt(max(0, E[x^2] - E[x]^2)).  Direct separable sums in
 * double (row sums of q, then column sums of q): no running-sum drift.  The
 * reference uses FFT convolution; on the 2k test image the two routes
 * differ by 1.5e-15 (mean, relative) and 1.2e-12 (std, relative to its
 * maximum; E[x^2] - E[x]^2 cancels ~6 digits at intensities ~1000).
 * work: ny * (nx - q + 1) * 2 doubles. */
void apple_moments(const double *im, int ny, int nx, int q, double *mean, double *std,
		   double *work);

/* ---- Step 3: query score ----------------------------------------------- */

/* Top-left pixels (row, col) of the references, ref[nref][2]: per
 * container (raster order of containers of side s->container), the window
 * of maximum mean, minimum mean, maximum std, minimum std (first
 * occurrence in raster order inside the container's search range, as
 * NumPy's argmax).  The search range of container (yc, xc) is rows
 * [yc cs, min(ny - 1, (yc + 1) cs) - q + 1), likewise columns (nx); where it is
 * empty (only when cs == q and the containers tile the image exactly;
 * ASPIRE raises there) the container's top-left pixel is used. */
void apple_refs_select(const apple_sizes_t *s, const double *mean, const double *std,
		       int32_t *ref);

typedef struct apple_score_fft apple_score_fft_t;

/* FFTW plans (FFTW_ESTIMATE: the same bits on every run) and buffers for
 * q x q transforms; the one function here that calls the FFTW planner (not
 * thread-safe: call it serialised, once per worker, and use the result from
 * that worker only).  Returns NULL on allocation failure. */
apple_score_fft_t *apple_score_fft_init(int q);

/* Frees *f and sets *f to NULL. */
void apple_score_fft_free(apple_score_fft_t **f);

/* Complex values per reference spectrum (q * (q/2 + 1)). */
size_t apple_score_spec_size(int q);

/* Half spectra (FFTW r2c, unnormalised) of the nref references into
 * spec[nref][apple_score_spec_size(q)] (interleaved re, im doubles: 2 *
 * size doubles each). */
void apple_score_refs_fft(apple_score_fft_t *f, const double *im, int nx, int q,
			  const int32_t *ref, int nref, double *spec);

/* Responses max(cc) - mean(cc), cc = IFFT(FFT(r) conj(FFT(w))) of size
 * q x q, for queries [qbegin, qend) (query k = grid cell (k / gx, k % gx),
 * window at row (k / gx) q/2, column (k % gx) q/2) against all nref
 * references: resp[(k - qbegin) * nref + r].  Where apple_score_lane_m(q)
 * is not 0 (every even q from 6 to 56 but 8, 16, 32, 50 and 54; 58 and 62) the inverses
 * run as hand-written DFTs in SIMD lanes, one reference per lane (the
 * "lanes" route); for other q through FFTW's plans (the "fftw" route), and
 * for every q when the environment has STARPIPE_APPLE_SCORE=fftw.  The two differ by rounding
 * (~1e-15 of the largest response).  A stop requested while it runs
 * (src/base/cancel.h, polled every APPLE_QBLOCK = 32 queries) leaves the
 * rest unwritten; so do apple_score_refs_fft() (every 64 references) and
 * apple_classify_rows() (every row): the caller drops the output (the item
 * is cancelled). */
void apple_score_responses(apple_score_fft_t *f, const double *im, int nx, int q, int gx,
			   const double *spec, int nref, int qbegin, int qend, double *resp);

/* 1 where the environment has STARPIPE_APPLE_SCORE=fftw: the score runs
 * through the FFT libraries' routes (FFTW's on the CPU, cuFFT's on the
 * GPU) for every q, for A/B runs; else 0. */
int apple_score_library_route(void);

/* The odd factor m of q whose table the lanes route uses: q = 2m (m <=
 * 23, 29 and 31), 4m (m <= 13), 8m (m <= 7) or 16m (m = 3), m odd >= 3;
 * 0 where q has no lanes route (q = 4, 8, 16, 32, 50, 54, 60 and from 64
 * on: FFTW's, as fast or faster there, or not worth the code). */
int apple_score_lane_m(int q);

/* The lanes route's largest m, and its table of cosines and sines for
 * m (odd, 3 <= m <= APPLE_LANE_MAXM): cos, sin, 2 cos, 2 sin of
 * 2 pi j k / m for j, k = 1..(m - 1)/2, each [APPLE_LANE_H + 1]^2 doubles
 * at [j][k] (lane_pairs()' tab). */
#define APPLE_LANE_MAXM 31
#define APPLE_LANE_H ((APPLE_LANE_MAXM - 1) / 2)
#define APPLE_LANE_TAB (4 * (APPLE_LANE_H + 1) * (APPLE_LANE_H + 1))
void apple_score_lane_tab(int m, double tab[APPLE_LANE_TAB]);

/* Which route apple_score_responses() takes with f: 1 lanes, 0 fftw.
 * apple_score_fft_set_lanes(f, 0) forces FFTW's (tests, A/B runs); 1
 * restores the lanes where q and the CPU variant allow them. */
int apple_score_fft_lanes(const apple_score_fft_t *f);
void apple_score_fft_set_lanes(apple_score_fft_t *f, int on);

/* The per-pair loops of apple_score_responses() in one SIMD variant
 * (src/base/cpuisa.h), for tests: product(R1, R2, W, P1, P2, ns) sets
 * P1 = R1 conj(W) and, unless R2 is NULL, P2 = R2 conj(W), over ns
 * interleaved complex values; max_of(a, n) is the maximum of
 * a[0..n), n >= 1, and max2_of(a, n, m) sets m[0], m[1] to the maxima of
 * the real and the imaginary parts of n >= 1 interleaved complex values,
 * and pack_row(y1, y2, z, q) writes two half rows of q/2 + 1 complex values
 * as one full row of q, z = y1 + i y2 (Hermitian extension);
 * lowpass_row() is apple_preprocess()'s low-pass correlation on row i,
 * columns [j0, j1) (taps (ku[t], kv[t]) of weight kval[t], t < nk, all
 * inside res [.][n_x]) into im and, unless NULL, out32; window_sums(row,
 * nw, q, a, b) are apple_moments()'s row sums of q values and of their
 * squares for windows c < nw, and window_cols(a, b, nw, r, q, inv, mean,
 * std) its column pass for output row r; lane_pairs(q, tab, Rl, wr, wi, Y,
 * inv, out) are the responses of width references (lanes) to one query
 * (apple_score_responses()'s lanes route, tab for apple_score_lane_m(q);
 * -1 for a q it does not cover); decisions(m, mean, std, n, d) are
 * apple_svm_decision()'s values of n windows' moments (standardised), with
 * libmvec's exp where the build has it (within a few ulp of exp()'s).
 * NULL where the variant cannot run here.  Every variant computes the same
 * bits. */
struct apple_svm;
typedef struct apple_score_simd {
	void (*product)(const double *R1, const double *R2, const double *W, double *P1,
			double *P2, size_t ns);
	double (*max_of)(const double *a, size_t n);
	void (*max2_of)(const double *a, size_t n, double m[2]);
	void (*pack_row)(const double *y1, const double *y2, double *z, int q);
	void (*lowpass_row)(const double *res, int n_x, int i, int j0, int j1, int nk,
			    const int *ku, const int *kv, const double *kval, double *im,
			    float *out32);
	void (*window_sums)(const double *row, int nw, int q, double *a, double *b);
	void (*window_cols)(const double *a, const double *b, int nw, int r, int q, double inv,
			    double *mean, double *std);
	void (*decisions)(const struct apple_svm *m, const double *mean, const double *std, int n,
			  double *d);
	int (*lane_pairs)(int q, const double *tab, const double *Rl, const double *wr,
			  const double *wi, double *Y, double inv, double *out);
	int width; /* doubles per vector: references per lane_pairs() call */
} apple_score_simd_t;
const apple_score_simd_t *apple_score_simd(int isa);

/* score[k] = #{r : resp[k][r] >= t}, t = min + (max - min) / 20 over the
 * whole resp [nquery][nref]. */
void apple_score_finish(const double *resp, int nquery, int nref, int32_t *score);

/* ---- Steps 4-5: training set, SVM, classification ---------------------- */

/* A trained classifier: the scaler and the support vectors copied out of
 * libsvm's model (plain data, no pointer into libsvm's problem). */
typedef struct apple_svm {
	double mu[2], scale[2]; /* standardisation: (x - mu) / scale */
	double gamma, rho;
	int nsv;
	double *sv;             /* [nsv][2] (standardised features) */
	double *coef;           /* [nsv] */
	int label_pos;          /* label given when decision value > 0 */
	int npos, nneg;         /* training examples */
} apple_svm_t;

/* Training set (step 4): sorts the queries by score descending (stable:
 * ties by column-major grid index gy-fastest, as ASPIRE flattens), marks
 * the windows of the first tau1 (particle mask) and first tau2 (not-noise
 * mask), and takes the non-overlapping q x q blocks of im (column-major
 * block order) fully inside the particle mask (positives) and fully
 * outside the not-noise mask (negatives).  feat[*npos + *nneg][2] (mean,
 * population std), positives first; feat needs (ny / q) (nx / q) 2 doubles;
 * work: 2 ny nx bytes.  Returns 0 or SP_ENOMEM (the sort's index array). */
int apple_training_set(const apple_sizes_t *s, const double *im, const int32_t *score, int tau1,
		       int tau2, double *feat, int *npos, int *nneg, unsigned char *work);

/* Standardises feat and trains libsvm's C-SVC (RBF, gamma 0.5, C 1, eps
 * 1e-3, shrinking, class weights n / (2 n_c); negatives fed first, as
 * scikit-learn's label order).  Returns a new classifier, or NULL when a
 * class is empty or memory runs out. */
apple_svm_t *apple_svm_new(const double *feat, int npos, int nneg);

/* Frees *m and sets *m to NULL. */
void apple_svm_free(apple_svm_t **m);

/* Decision value of libsvm for one standardised feature pair (the same
 * arithmetic as svm_predict_values()). */
double apple_svm_decision(const apple_svm_t *m, double f0, double f1);

/* Classifies window positions of rows [r0, r1): seg[(r - r0) * nw + c] =
 * 1 (particle) or 0, from mean/std [.][nw] (nw: s->nwx). */
void apple_classify_rows(const apple_svm_t *m, const double *mean, const double *std, int nw,
			 int r0, int r1, uint8_t *seg);

/* ASPIRE retrains when the classification is uniform: all windows particle
 * -> tau2 += 500, none -> tau1 += 500, then steps 4-5 again (the caller's
 * loop; bound it, ASPIRE's is not).  Returns 1 when every seg[0..n) is
 * nonzero, -1 when all are zero, 0 otherwise. */
int apple_seg_uniform(const uint8_t *seg, size_t n);

/* ---- Step 6: morphology ------------------------------------------------ */

/* Squared Euclidean distance of every pixel of a [h][w] to the nearest 0
 * pixel, the image being zero-padded by one (Meijster's exact algorithm,
 * integers).  d2 int32 [h][w]; work: (h + 2) (w + 2) + 3 max(h, w) + 6
 * int32. */
void apple_edt2(const uint8_t *a, int h, int w, int32_t *d2, int32_t *work);

/* Labels the 8-connected components of a [h][w] (nonzero pixels) 1..N in
 * raster order of their first pixel (SciPy's order); returns N.  lab int32
 * [h][w]; work: h w int32 (union-find parents). */
int apple_label8(const uint8_t *a, int h, int w, int32_t *lab, int32_t *work);

/* Bytes/ints of scratch apple_morphology() needs: work32 int32 count. */
size_t apple_morphology_work_size(int nwy, int nwx);

/* seg [nwy][nwx] in, out [nwy][nwx]: fill holes (4-connected background); if
 * that fills everything, clear seg's top-left 100 x 100 first; erode by
 * disks of radius min_size (seg_e) and max_size (seg_o) via apple_edt2();
 * drop the 8-components of seg_e that meet seg_o.  work8: nwy nwx bytes;
 * work32: apple_morphology_work_size(nwy, nwx) int32. */
void apple_morphology(const apple_sizes_t *s, const uint8_t *seg, uint8_t *out, uint8_t *work8,
		      int32_t *work32);

/* ---- Step 7: pick ------------------------------------------------------ */

/* Picks from the morphology output seg [nwy][nwx]: trims q/2 - 1 rows and
 * columns at the top-left and q/2 at the bottom-right, drops 8-components
 * larger than max_size^2, takes rounded centres of mass (rint, half to
 * even), keeps centres isolated at distance moa (disk dilation), maps to
 * original pixels (x, y): 2 (c + q - 1) + margin_left, 2 (r + q - 1) +
 * margin_top.
 *
 * Quirks of the reference, kept when p->fix_quirks is 0 (the default: same
 * picks as ASPIRE):
 *   - the last component (label N) never gets a centre (labels 1..N-1);
 *   - the isolation test labels the dilated centre image and keeps centre
 *     index L - 1 for every dilated component L of exactly the disk's area:
 *     it maps labels to centres by index although the two label orders
 *     differ, so the kept centres are not always the isolated ones.
 * With fix_quirks = 1 every component gets a centre, and a centre is kept
 * when the dilated component containing it has exactly the disk's area and
 * holds no other centre.  In both modes a disk clipped by the image border
 * has less than the disk's area (as in the reference).
 *
 * Writes at most maxpick picks to xy[.][2] and returns their number (the
 * total when larger than maxpick), or SP_ENOMEM (the per-component
 * arrays).  work: apple_pick_work_size(s) bytes, int32-aligned (malloc's
 * alignment). */
int apple_pick(const apple_params_t *p, const apple_sizes_t *s, const uint8_t *seg, int *xy,
	       int maxpick, void *work);

/* Bytes of scratch apple_pick() needs: ~10 per window position. */
size_t apple_pick_work_size(const apple_sizes_t *s);

/* The picks' scores: for each pick xy[k] (original pixels, as apple_pick()
 * writes them) the SVM's decision value at its window (the inverse of
 * apple_pick()'s mapping), signed so that a positive value is a particle
 * and larger is surer; mean/std [nwy][nwx] are the window moments the
 * classification read.  Written to score[0..n). */
void apple_pick_scores(const apple_params_t *p, const apple_sizes_t *s, const apple_svm_t *m,
		       const double *mean, const double *std, const int *xy, int n, double *score);

/* ---- CUDA twins (apple_cuda*.cu) ----------------------------------------- */

/*
 * Device pointers throughout; every function only enqueues work on
 * `stream` (no allocation, no synchronisation) and returns 0, SP_EINVAL
 * (bad sizes, or a plan set made for another q/nref) or SP_ECUDA (a CUDA or
 * cuFFT call or launch failed).  Results match the CPU twins above: the
 * responses to ~1e-15 of the correlations' magnitude (the queries'
 * spectra by cuFFT against FFTW; the fused route's inverses are the CPU
 * lanes route's to the bit), the segmentation exactly but where a decision value
 * lies within a few ulp of 0 (CUDA's exp against glibc's).
 */
struct CUstream_st;

/* cuFFT plans for q x q transforms of nquery_chunk queries (D2Z, batch
 * nquery_chunk) and their products with nref references (Z2D, batch
 * nquery_chunk nref), used on one worker; planning allocates cuFFT's work
 * area on the current device: make the set once per worker, out of the hot
 * path.  Returns NULL on failure. */
typedef struct apple_score_cuda apple_score_cuda_t;
apple_score_cuda_t *apple_score_cuda_new(int q, int nref, int nquery_chunk);

/* Frees *p (cuFFT plans) and sets *p to NULL. */
void apple_score_cuda_free(apple_score_cuda_t **p);

/* The route apple_score_responses_cuda() takes for q: m (> 0) where q =
 * 2m, m odd <= 23, the fused kernel (each (query, reference) pair's
 * product, inverse and maximum in one block's shared memory; the same
 * operations as the CPU's lanes route, so the same bits for the same
 * spectra); 0 for cuFFT's batched Z2D (other q, or the environment has
 * STARPIPE_APPLE_SCORE=fftw).  A plan set keeps the route it was made
 * with; make it and size its scratch under the same environment. */
int apple_score_cuda_fused(int q);

/* Bytes of device scratch the score functions need with a plan set made
 * for (q, nref, nquery_chunk); 256-byte aligned sub-buffers. */
size_t apple_score_cuda_scratch(int q, int nref, int nquery_chunk);

/* The largest chunk in [1, nquery] whose scratch fits in max_bytes (1 when
 * none does). */
int apple_score_cuda_chunk(int q, int nref, int nquery, size_t max_bytes);

/* Twin of apple_score_refs_fft(): ref int32 [nref][2] (device), spec
 * [nref][apple_score_spec_size(q)] complex (device, interleaved doubles).
 * Any nref (chunks of the plan set's nquery_chunk). */
int apple_score_refs_fft_cuda(apple_score_cuda_t *plans, const double *im, int nx, int q,
			      const int32_t *ref, int nref, double *spec, void *scratch,
			      struct CUstream_st *stream);

/* Twin of apple_score_responses(): im [.][nx], spec as apple_score_refs_fft()
 * lays it out, resp [(qend - qbegin)][nref]; queries go through in chunks
 * of the plan set's nquery_chunk (a partial last chunk costs a full one).
 * nref must be the plan set's. */
int apple_score_responses_cuda(apple_score_cuda_t *plans, const double *im, int nx, int q, int gx,
			       const double *spec, int nref, int qbegin, int qend, double *resp,
			       void *scratch, struct CUstream_st *stream);

/* Bytes of device scratch apple_preprocess_cuda() needs. */
size_t apple_preprocess_cuda_scratch(const apple_sizes_t *s);

/* Twin of apple_preprocess() (no float32 copy): micrograph [ny][nx] and
 * im [s->ny][s->nx] device arrays; bit-identical to the CPU (the taps come from
 * apple_lowpass_kernel() on the host). */
int apple_preprocess_cuda(const apple_params_t *p, const apple_sizes_t *s, const float *micrograph,
			  int ny, int nx, double *im, void *scratch, struct CUstream_st *stream);

/* Bytes of device scratch apple_moments_cuda() needs. */
size_t apple_moments_cuda_scratch(int ny, int nx, int q);

/* Twin of apple_moments(), bit-identical (the same sums in the same order). */
int apple_moments_cuda(const double *im, int ny, int nx, int q, double *mean, double *std, void *scratch,
		       struct CUstream_st *stream);

/* Twin of apple_refs_select(): one block per container; ref [nref][2]
 * device.  Identical references for finite moments (a NaN poisons the
 * CPU's scan and is excluded upstream: apple.read rejects non-finite
 * pixels). */
int apple_refs_select_cuda(const apple_sizes_t *s, const double *mean, const double *std,
			   int32_t *ref, struct CUstream_st *stream);

/* Bytes of device scratch apple_morphology_cuda() needs (~25 nwy nwx). */
size_t apple_morphology_cuda_scratch(int nwy, int nwx);

/* Twin of apple_morphology(): seg and out [nwy][nwx] device arrays, the same
 * output byte for byte (union-find labelling instead of the CPU's
 * sequential scan; a component's identity does not depend on the order). */
int apple_morphology_cuda(const apple_sizes_t *s, const uint8_t *seg, uint8_t *out, void *scratch,
			  struct CUstream_st *stream);

/* Doubles of the packed support vectors (3 nsv), and the packing on the
 * host: svc[i] = (sv[i][0], sv[i][1], coef[i]); the caller copies it to
 * the device.  (apple_svm.c: in every build.) */
size_t apple_svm_cuda_size(const apple_svm_t *m);
void apple_svm_cuda_pack(const apple_svm_t *m, double *svc);

/* Twin of apple_classify_rows(): m is the host model (only its scalars are
 * read), svc the packed support vectors (device), mean/std [.][nw] and
 * seg [(r1 - r0)][nw] device arrays. */
int apple_classify_rows_cuda(const apple_svm_t *m, const double *svc, const double *mean,
			     const double *std, int nw, int r0, int r1, uint8_t *seg,
			     struct CUstream_st *stream);

#endif /* SP_APPLE_H */
