/* starpipe-apple-sim: a simulated cryo-EM micrograph (MRC) with its true particle centres (STAR). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "fsutil.h"
#include "rng.h"
#include "../codelets/apple/mrc.h"
#include "../codelets/apple/star.h"
#include "toolutil.h"

/*
 * DESIGN.  The particle is one fixed, asymmetric 3-D density: six
 * isotropic Gaussian blobs (a core and five lobes, positions and widths in
 * units of the diameter D, table `blobs` below), about 0.85 D across.  A
 * particle is that density at a uniformly random orientation (random unit
 * quaternion, Shoemake's method) projected along z: the projection of an
 * isotropic 3-D Gaussian is the 2-D Gaussian of the same width at the
 * rotated centre, so projections are exact and cheap.
 *
 * Imaging.  The "CTF" is a radially oscillating kernel in its simplest
 * form, a difference of two normalised Gaussians, k = G(c1) - a G(c2) with
 * c1 = max(0.6 px, 0.012 D) (the envelope: a blur), c2 = 0.15 D and
 * a = 0.35 (the negative ring: low frequencies suppressed, a bright fringe
 * around each particle, as near focus).  Convolved with a Gaussian blob
 * this is again two Gaussians, so each particle is drawn exactly with
 * separable factors.  Contrast is negative: particles are DARKER than the
 * background (raw underfocused micrographs, protein denser than ice).
 *
 * Noise and SNR.  The noiseless particle image S (mean 0 far from
 * particles) is scaled so that its variance over the particle region (the
 * pixels within D/2 of a true centre) equals SNR, and white Gaussian noise
 * of variance 1 is added: SNR = var(signal) / var(noise) over the particle
 * region, the output's noise has standard deviation 1 and the background
 * mean 0.  Artefacts are added after this scaling (they do not enter the
 * SNR): --ice, a thickness gradient (a linear ramp of 3 noise sigmas
 * peak to peak in a random direction plus two slow bumps of 1 sigma; thicker
 * ice is darker); --carbon, a carbon film on one side of a gently curved
 * random edge, covering about a fifth of the image, 1.5 noise sigmas darker
 * with a 2-pixel soft edge and a 1-sigma bright line along the edge; no
 * particle centre is placed within D/2 of the carbon (the truth has
 * particles in ice only).
 *
 * Placement.  Centres are uniform in [D/2, W - D/2) x [D/2, H - D/2), at
 * least D apart (rejection sampling on a grid of cells D/sqrt(2) wide, so
 * each cell holds at most one centre); when --count centres cannot be
 * placed in 200 tries per particle the program stops (exit 2).  Default
 * count: 0.2 W H / D^2, about 137 on 2048 x 2048 with D = 78.  A
 * rectangle scales every size-dependent quantity by its axis (the ramp,
 * the bumps' centres) or by the mean side (W + H) / 2 (carbon edge's
 * waviness, bump widths): a square gets the same particles and noise as
 * before -n took WxH (the artefacts' parameters to the last bit or so).
 *
 * Coordinates: pixel (row y, column x) has its centre at (x, y); the truth
 * STAR has x = column, y = row, 2 decimals, original pixels.
 *
 * Determinism: xoshiro256** seeded by splitmix64; placement, orientations,
 * artefacts and each noise row have their own streams, so the same seed gives
 * the same files on every platform.  Both files are written to
 * NAME.tmp.PID and renamed when complete.
 */

static const char usage_text[] =
	"usage: starpipe-apple-sim -o MICROGRAPH.mrc --truth TRUTH.star [-n SIZE|WxH]\n"
	"                          [--particle-size D] [--count N] [--snr SNR]\n"
	"                          [-s SEED] [--pixel-size A] [--carbon] [--ice]\n"
	"Simulates a SIZE x SIZE (or W columns x H rows: -n 4096x3072) cryo-EM\n"
	"micrograph (MRC mode 2, float32) of N\n"
	"non-overlapping particles of diameter D pixels (centres at least D apart),\n"
	"each a random projection of one asymmetric 3-D object, blurred by a\n"
	"CTF-like kernel (a Gaussian minus a broader Gaussian), DARKER than the\n"
	"background, plus white Gaussian noise; writes their centres to TRUTH.star\n"
	"(x = column, y = row, original pixels).\n"
	"SNR = variance of the noiseless signal / variance of the noise, both over\n"
	"the particle region (pixels within D/2 of a centre); the noise has sigma 1.\n"
	"--ice adds an ice-thickness gradient, --carbon a carbon film with its edge\n"
	"(neither counts in the SNR; no particles on the carbon).\n"
	"Defaults: -n 4096 --particle-size 78 --count 0.2*W*H/D^2 --snr 0.05\n"
	"-s 1 --pixel-size 1.0 (Angstrom, recorded in the header).\n";

#define BAD_USAGE(fmt, arg) tool_bad_usage("starpipe-apple-sim", usage_text, fmt, arg)

/* The 3-D object, in units of the diameter: centre (x, y, z), width
 * sigma, mass. */
static const double blobs[][5] = {
	{ 0.00, 0.00, 0.00, 0.160, 1.00 },  { 0.22, 0.05, 0.00, 0.090, 0.35 },
	{ -0.12, 0.20, 0.08, 0.100, 0.40 }, { -0.15, -0.18, -0.05, 0.080, 0.30 },
	{ 0.05, -0.12, 0.20, 0.070, 0.25 }, { 0.10, 0.25, -0.15, 0.060, 0.20 },
};
#define NBLOB (int)(sizeof blobs / sizeof *blobs)
#define CTF_A 0.35
#define TWO_PI 6.283185307179586

typedef struct sim {
	const char *out, *truth;
	int nx, ny, count; /* columns (W), rows (H) */
	double d, snr, pixel_size;
	int carbon, ice, verbose;
	uint64_t seed;
	double *xy;       /* [count][2] centres, x = column */
	float *img;       /* [ny][nx] */
	/* carbon edge: s(x, y) = nx x + ny y - off - amp sin(2 pi (t . p) / len + ph) */
	double cnx, cny, coff, camp, clen, cph;
} sim_t;

static void progress(const sim_t *s, const char *what)
{
	if (s->verbose)
		fprintf(stderr, "starpipe-apple-sim: %s\n", what);
}

/* Signed distance-like value from the carbon edge: > 0 on the carbon. */
static double carbon_side(const sim_t *s, double x, double y)
{
	double t = -s->cny * x + s->cnx * y;
	return s->cnx * x + s->cny * y - s->coff - s->camp * sin(TWO_PI * t / s->clen + s->cph);
}

static void carbon_setup(sim_t *s)
{
	sp_rng_t g;
	sp_rng_seed(&g, s->seed, UINT64_C(0x636172626f6e)); /* "carbon" */
	double th = TWO_PI * sp_rng_uniform(&g), cx = 0.5 * s->nx, cy = 0.5 * s->ny;
	double side = 0.5 * (s->nx + s->ny);
	s->cnx = cos(th);
	s->cny = sin(th);
	/* the edge 0.3 half-widths from the far side: about a fifth covered */
	double reach = cx * fabs(s->cnx) + cy * fabs(s->cny);
	s->coff = s->cnx * cx + s->cny * cy + 0.45 * reach;
	s->camp = 0.03 * side;
	s->clen = (0.5 + sp_rng_uniform(&g)) * side;
	s->cph = TWO_PI * sp_rng_uniform(&g);
}

/* Places the centres; returns how many were placed. */
static int place(sim_t *s)
{
	double d = s->d, cell = d / sqrt(2.0), lo = d / 2, hix = s->nx - d / 2, hiy = s->ny - d / 2;
	int ncx = (int)ceil(s->nx / cell) + 1, ncy = (int)ceil(s->ny / cell) + 1;
	int *grid = malloc((size_t)ncx * ncy * sizeof *grid);
	sp_rng_t g;
	int k = 0;

	if (grid == NULL)
		return -1;
	for (size_t e = 0; e < (size_t)ncx * ncy; e++)
		grid[e] = -1;
	sp_rng_seed(&g, s->seed, 1);
	for (long tries = 0, max = 200L * s->count + 10000; k < s->count && tries < max; tries++) {
		double x = lo + (hix - lo) * sp_rng_uniform(&g);
		double y = lo + (hiy - lo) * sp_rng_uniform(&g);
		if (s->carbon && carbon_side(s, x, y) > -d / 2)
			continue;
		int gx = (int)(x / cell), gy = (int)(y / cell), ok = 1;
		for (int j = gy - 2; ok && j <= gy + 2; j++)
			for (int i = gx - 2; ok && i <= gx + 2; i++) {
				if (i < 0 || j < 0 || i >= ncx || j >= ncy || grid[j * ncx + i] < 0)
					continue;
				const double *q = s->xy + 2 * grid[j * ncx + i];
				ok = (q[0] - x) * (q[0] - x) + (q[1] - y) * (q[1] - y) >= d * d;
			}
		if (!ok)
			continue;
		grid[gy * ncx + gx] = k;
		s->xy[2 * k] = x;
		s->xy[2 * k + 1] = y;
		k++;
	}
	free(grid);
	return k;
}

/* Adds particle k (negative contrast, unscaled) into s->img. */
static void render(sim_t *s, int k, double *fx, double *fy)
{
	sp_rng_t g;
	double d = s->d, cx = s->xy[2 * k], cy = s->xy[2 * k + 1];
	double c1 = fmax(0.6, 0.012 * d), c2 = 0.15 * d;
	int r = (int)ceil(0.45 * d + 4 * c2), w = 2 * r + 1;
	int x0 = (int)floor(cx) - r, y0 = (int)floor(cy) - r;

	sp_rng_seed(&g, s->seed, UINT64_C(0x100000000) + (uint64_t)k);
	/* uniform random rotation from a random unit quaternion */
	double u1 = sp_rng_uniform(&g), u2 = TWO_PI * sp_rng_uniform(&g),
	       u3 = TWO_PI * sp_rng_uniform(&g);
	double a = sqrt(1 - u1) * sin(u2), b = sqrt(1 - u1) * cos(u2), c = sqrt(u1) * sin(u3),
	       q = sqrt(u1) * cos(u3);
	double R[2][3] = {
		{ 1 - 2 * (b * b + c * c), 2 * (a * b - c * q), 2 * (a * c + b * q) },
		{ 2 * (a * b + c * q), 1 - 2 * (a * a + c * c), 2 * (b * c - a * q) },
	};
	for (int bl = 0; bl < NBLOB; bl++) {
		const double *p = blobs[bl];
		double px = cx + d * (R[0][0] * p[0] + R[0][1] * p[1] + R[0][2] * p[2]);
		double py = cy + d * (R[1][0] * p[0] + R[1][1] * p[1] + R[1][2] * p[2]);
		double sg = p[3] * d, mass = p[4] * d * d;
		for (int term = 0; term < 2; term++) {
			double v = sg * sg + (term == 0 ? c1 * c1 : c2 * c2);
			double amp = -(term == 0 ? 1.0 : -CTF_A) * mass / (TWO_PI * v);
			for (int i = 0; i < w; i++) {
				double dx = x0 + i - px, dy = y0 + i - py;
				fx[i] = exp(-dx * dx / (2 * v));
				fy[i] = amp * exp(-dy * dy / (2 * v));
			}
			for (int j = 0; j < w; j++) {
				int y = y0 + j;
				if (y < 0 || y >= s->ny)
					continue;
				float *row = s->img + (size_t)y * s->nx;
				for (int i = 0; i < w; i++) {
					int x = x0 + i;
					if (x >= 0 && x < s->nx)
						row[x] += (float)(fy[j] * fx[i]);
				}
			}
		}
	}
}

/* Variance of the signal over the particle region. */
static double region_variance(const sim_t *s)
{
	size_t n = (size_t)s->nx, npx = (size_t)s->nx * s->ny;
	unsigned char *m = calloc(npx, 1);
	double r = s->d / 2, sum = 0, sum2 = 0;
	size_t cnt = 0;

	if (m == NULL)
		return -1;
	for (int k = 0; k < s->count; k++) {
		double cx = s->xy[2 * k], cy = s->xy[2 * k + 1];
		for (int y = (int)ceil(cy - r); y <= (int)floor(cy + r); y++)
			for (int x = (int)ceil(cx - r); x <= (int)floor(cx + r); x++)
				if (y >= 0 && x >= 0 && y < s->ny && x < s->nx &&
				    (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r)
					m[(size_t)y * n + x] = 1;
	}
	for (size_t e = 0; e < npx; e++)
		if (m[e]) {
			sum += s->img[e];
			sum2 += (double)s->img[e] * s->img[e];
			cnt++;
		}
	free(m);
	if (cnt == 0)
		return 0;
	double mean = sum / cnt;
	return sum2 / cnt - mean * mean;
}

/* Scales the signal, adds noise (a stream per row) and the artefacts. */
static void finish(sim_t *s, double scale)
{
	sp_rng_t g;
	double ramp_x = 0, ramp_y = 0, bump[2][4] = { { 0 } };
	const int nx = s->nx, ny = s->ny;
	const double side = 0.5 * (nx + ny);

	if (s->ice) {
		sp_rng_seed(&g, s->seed, UINT64_C(0x696365)); /* "ice" */
		double th = TWO_PI * sp_rng_uniform(&g);
		/* 3 sigmas peak to peak over the image */
		double span = nx * fabs(cos(th)) + ny * fabs(sin(th));
		ramp_x = 3.0 * cos(th) / span;
		ramp_y = 3.0 * sin(th) / span;
		for (int b = 0; b < 2; b++) {
			bump[b][0] = sp_rng_uniform(&g) * nx;   /* centre x */
			bump[b][1] = sp_rng_uniform(&g) * ny;   /* centre y */
			bump[b][2] = (0.15 + 0.2 * sp_rng_uniform(&g)) * side; /* width */
			bump[b][3] = sp_rng_uniform(&g) < 0.5 ? -1.0 : 1.0;
		}
	}
	for (int y = 0; y < ny; y++) {
		float *row = s->img + (size_t)y * nx;
		sp_rng_seed(&g, s->seed, UINT64_C(0x200000000) + (uint64_t)y);
		for (int x = 0; x < nx; x += 2) {
			/* Box-Muller, both of the pair */
			double u = 1.0 - sp_rng_uniform(&g), v = TWO_PI * sp_rng_uniform(&g);
			double rr = sqrt(-2.0 * log(u));
			row[x] = (float)(scale * row[x] + rr * cos(v));
			if (x + 1 < nx)
				row[x + 1] = (float)(scale * row[x + 1] + rr * sin(v));
		}
		if (s->ice || s->carbon)
			for (int x = 0; x < nx; x++) {
				double a = 0;
				if (s->ice) {
					a -= ramp_x * (x - 0.5 * nx) + ramp_y * (y - 0.5 * ny);
					for (int b = 0; b < 2; b++) {
						double dx = x - bump[b][0], dy = y - bump[b][1],
						       w = bump[b][2];
						a += bump[b][3] * exp(-(dx * dx + dy * dy) / (2 * w * w));
					}
				}
				if (s->carbon) {
					double t = carbon_side(s, x, y);
					a += -1.5 * 0.5 * (1 + tanh(t / 2.0)) +
					     exp(-t * t / 2.0); /* film, bright edge line */
				}
				row[x] += (float)a;
			}
		if (s->verbose && (y + 1) % (ny / 4) == 0) {
			fprintf(stderr, "starpipe-apple-sim: noise %d%%\n", (int)(100.0 * (y + 1) / ny));
		}
	}
}

int main(int argc, char **argv)
{
	sim_t s = { .nx = 4096, .ny = 4096, .count = -1, .d = 78, .snr = 0.05, .pixel_size = 1.0, .seed = 1 };
	double x;
	sp_err_t err = { 0, "" };

	for (int a = 1; a < argc; a++) {
		const char *o = argv[a];
		if (strcmp(o, "-h") == 0 || strcmp(o, "--help") == 0) {
			fputs(usage_text, stdout);
			return 0;
		}
		if (strcmp(o, "--carbon") == 0) {
			s.carbon = 1;
			continue;
		}
		if (strcmp(o, "--ice") == 0) {
			s.ice = 1;
			continue;
		}
		if (a + 1 >= argc)
			return BAD_USAGE("unknown option or missing value: '%s'", o);
		const char *v = argv[++a];
		if (strcmp(o, "-o") == 0) {
			s.out = v;
		} else if (strcmp(o, "--truth") == 0) {
			s.truth = v;
		} else if (strcmp(o, "-n") == 0) {
			/* SIZE, or WxH */
			char wbuf[32];
			const char *xp = strchr(v, 'x');
			size_t wl = xp != NULL ? (size_t)(xp - v) : 0;
			if (xp == NULL) {
				if (!tool_integer(v, 16, 32768, &s.nx))
					return BAD_USAGE("-n: '%s' is not an integer in 16 .. 32768", v);
				s.ny = s.nx;
			} else if (wl == 0 || wl >= sizeof wbuf ||
				   (memcpy(wbuf, v, wl), wbuf[wl] = 0, !tool_integer(wbuf, 16, 32768, &s.nx)) ||
				   !tool_integer(xp + 1, 16, 32768, &s.ny)) {
				return BAD_USAGE("-n: '%s' is not WIDTHxHEIGHT, each in 16 .. 32768", v);
			}
		} else if (strcmp(o, "--particle-size") == 0) {
			if (!tool_number(v, 5, 3000, &s.d))
				return BAD_USAGE("--particle-size: '%s' is not in 5 .. 3000 pixels", v);
		} else if (strcmp(o, "--count") == 0) {
			if (!tool_integer(v, 0, 1e7, &s.count))
				return BAD_USAGE("--count: '%s' is not a non-negative integer", v);
		} else if (strcmp(o, "--snr") == 0) {
			if (!tool_number(v, 1e-6, 1e6, &s.snr))
				return BAD_USAGE("--snr: '%s' is not in 1e-6 .. 1e6", v);
		} else if (strcmp(o, "-s") == 0 || strcmp(o, "--seed") == 0) {
			if (!tool_number(v, 0, 9007199254740992.0, &x) || x != floor(x))
				return BAD_USAGE("-s: '%s' is not a non-negative integer", v);
			s.seed = (uint64_t)x;
		} else if (strcmp(o, "--pixel-size") == 0) {
			if (!tool_number(v, 0, 1e4, &s.pixel_size))
				return BAD_USAGE("--pixel-size: '%s' is not in 0 .. 10000 Angstrom", v);
		} else {
			return BAD_USAGE("unknown option '%s'", o);
		}
	}
	if (s.out == NULL)
		return BAD_USAGE("%s", "-o MICROGRAPH.mrc is required");
	if (s.truth == NULL)
		return BAD_USAGE("%s", "--truth TRUTH.star is required");
	int nmin = s.nx < s.ny ? s.nx : s.ny;
	if (s.d > nmin / 2.0) {
		fprintf(stderr,
			"starpipe-apple-sim: --particle-size %g is more than half of the image's "
			"shorter side %d\n%s",
			s.d, nmin, usage_text);
		return 2;
	}
	if (s.count < 0)
		s.count = (int)(0.2 * (s.nx / s.d) * (s.ny / s.d));
	s.verbose = (double)s.nx * s.ny >= 2048.0 * 2048.0;

	size_t np = (size_t)s.nx * s.ny;
	int w = 2 * (int)ceil(0.45 * s.d + 4 * 0.15 * s.d) + 1, rc = 1;
	double *fx = malloc((size_t)w * sizeof *fx), *fy = malloc((size_t)w * sizeof *fy);
	s.xy = malloc(((size_t)s.count + 1) * 2 * sizeof *s.xy);
	s.img = calloc(np, sizeof *s.img);
	if (fx == NULL || fy == NULL || s.xy == NULL || s.img == NULL) {
		fprintf(stderr, "starpipe-apple-sim: out of memory for a %d x %d image\n", s.nx, s.ny);
		goto out;
	}
	if (s.carbon)
		carbon_setup(&s);
	int placed = place(&s);
	if (placed < s.count) {
		fprintf(stderr,
			"starpipe-apple-sim: could place only %d of %d particles %g pixels apart "
			"on %d x %d%s; use a smaller --count or a larger -n\n",
			placed < 0 ? 0 : placed, s.count, s.d, s.nx, s.ny,
			s.carbon ? " (ice part only)" : "");
		rc = 2;
		goto out;
	}
	char msg[128];
	snprintf(msg, sizeof msg, "placed %d particles", s.count);
	progress(&s, msg);
	for (int k = 0; k < s.count; k++)
		render(&s, k, fx, fy);
	progress(&s, "particles rendered");
	double var = region_variance(&s);
	if (var < 0) {
		fprintf(stderr, "starpipe-apple-sim: out of memory for the particle mask\n");
		goto out;
	}
	finish(&s, var > 0 ? sqrt(s.snr / var) : 0.0);
	if (sp_make_parent(s.out, &err) != 0 ||
	    apple_mrc_write_f32(s.out, s.img, s.ny, s.nx, s.pixel_size, &err) != 0 ||
	    sp_make_parent(s.truth, &err) != 0 ||
	    apple_star_write_f64(s.truth, s.xy, (size_t)s.count, 2, &err) != 0) {
		fprintf(stderr, "starpipe-apple-sim: %s\n", err.msg);
		goto out;
	}
	progress(&s, "written");
	rc = 0;
out:
	free(fx);
	free(fy);
	free(s.xy);
	free(s.img);
	return rc;
}
