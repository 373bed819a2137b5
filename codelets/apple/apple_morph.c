/* APPLE-Picker CPU kernels, steps 6-7: morphology (distance transform,
 * labelling, hole filling) and picking. */
#include "apple.h"
#include "apple_kern.h"
#include "cancel.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- step 6: morphology ------------------------------------------------ */

void apple_edt2(const uint8_t *a, int h, int w, int32_t *d2, int32_t *work)
{
	const int W = w + 2;
	int32_t *g = work, *st = work + (size_t)(h + 2) * W;

	/* the CUDA kernels' bodies, one column, then one row, at a time; the
	 * definition is checked independently (test_apple_cpu: erosion by
	 * definition) */
	for (int x = 0; x < W; x++)
		apk_edt_col(a, h, w, x, g);
	for (int y = 1; y <= h; y++)
		apk_edt_row(g, h, w, y, st, st + W, d2);
}

static inline int32_t uf_find(int32_t *par, int32_t p)
{
	while (par[p] != p) {
		par[p] = par[par[p]];
		p = par[p];
	}
	return p;
}

static inline void uf_union(int32_t *par, int32_t a, int32_t b)
{
	a = uf_find(par, a);
	b = uf_find(par, b);
	if (a < b)
		par[b] = a;
	else if (b < a)
		par[a] = b;
}

int apple_label8(const uint8_t *a, int h, int w, int32_t *lab, int32_t *par)
{
	int nlab = 0;

	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			int32_t p = y * w + x;
			if (!a[p])
				continue;
			par[p] = p;
			if (x > 0 && a[p - 1])
				uf_union(par, p, p - 1);
			if (y > 0) {
				if (x > 0 && a[p - w - 1])
					uf_union(par, p, p - w - 1);
				if (a[p - w])
					uf_union(par, p, p - w);
				if (x + 1 < w && a[p - w + 1])
					uf_union(par, p, p - w + 1);
			}
		}
	/* roots are the smallest pixel index of their component: raster order */
	for (int32_t p = 0; p < h * w; p++) {
		if (!a[p]) {
			lab[p] = 0;
			continue;
		}
		int32_t r = uf_find(par, p);
		lab[p] = r == p ? ++nlab : lab[r];
	}
	return nlab;
}

size_t apple_morphology_work_size(int nwy, int nwx)
{
	size_t n2 = (size_t)nwy * nwx, m = (size_t)(nwy > nwx ? nwy : nwx);
	return 3 * n2 + n2 + 1 + (size_t)(nwy + 2) * (nwx + 2) + 2 * (m + 2) + 16;
}

/* filled = a with the 4-connected background components that do not reach
 * the border set to 1 (scipy.ndimage.binary_fill_holes). */
static void fill_holes(const uint8_t *a, int h, int w, uint8_t *filled, int32_t *stack)
{
	size_t n = (size_t)h * w, sp = 0;

	for (size_t p = 0; p < n; p++)
		filled[p] = 1; /* 1 = object or hole until the border flood reaches it */
	for (int y = 0; y < h; y++)
		for (int x = 0; x < w; x++) {
			int32_t p = y * w + x;
			if ((y == 0 || x == 0 || y == h - 1 || x == w - 1) && !a[p] && filled[p]) {
				filled[p] = 0;
				stack[sp++] = p;
			}
		}
	while (sp > 0) {
		int32_t p = stack[--sp];
		int y = p / w, x = p % w;
		int32_t nb[4] = {x > 0 ? p - 1 : -1, x + 1 < w ? p + 1 : -1, y > 0 ? p - w : -1,
				 y + 1 < h ? p + w : -1};
		for (int k = 0; k < 4; k++)
			if (nb[k] >= 0 && !a[nb[k]] && filled[nb[k]]) {
				filled[nb[k]] = 0;
				stack[sp++] = nb[k];
			}
	}
}

void apple_morphology(const apple_sizes_t *s, const uint8_t *seg, uint8_t *out, uint8_t *work8,
		      int32_t *work32)
{
	const int nwy = s->nwy, nwx = s->nwx;
	const size_t n2 = (size_t)nwy * nwx;
	int32_t *d2 = work32, *lab = work32 + n2, *par = lab + n2, *edtw = par + n2;
	uint8_t *filled = work8;
	size_t p;

	fill_holes(seg, nwy, nwx, filled, par);
	for (p = 0; p < n2 && filled[p]; p++)
		;
	if (p == n2) {
		memcpy(out, seg, n2);
		for (int y = 0; y < 100 && y < nwy; y++)
			memset(out + (size_t)y * nwx, 0, (size_t)(nwx < 100 ? nwx : 100));
		fill_holes(out, nwy, nwx, filled, par);
	}
	apple_edt2(filled, nwy, nwx, d2, edtw);
	const long long rmin = (long long)s->min_size * s->min_size,
			rmax = (long long)s->max_size * s->max_size;
	for (p = 0; p < n2; p++)
		out[p] = d2[p] > rmin;
	int nl = apple_label8(out, nwy, nwx, lab, par);
	uint8_t *hit = (uint8_t *)par; /* parents are no longer needed */
	memset(hit, 0, (size_t)nl + 1);
	for (p = 0; p < n2; p++)
		if (d2[p] > rmax)
			hit[lab[p]] = 1;
	for (p = 0; p < n2; p++)
		if (out[p] && hit[lab[p]])
			out[p] = 0;
}

/* ---- step 7: pick ------------------------------------------------------ */

/* The trimmed grid apple_pick() works on: my x mx. */
static size_t pick_grid(const apple_sizes_t *s, int *my, int *mx)
{
	const int q = s->query, lo = q / 2 - 1, hi = q / 2;
	*my = s->nwy - lo - hi;
	*mx = s->nwx - lo - hi;
	return *my > 0 && *mx > 0 ? (size_t)*my * (size_t)*mx : 0;
}

size_t apple_pick_work_size(const apple_sizes_t *s)
{
	int my, mx;
	const size_t mm = pick_grid(s, &my, &mx);
	return 2 * sizeof(int32_t) * (mm + 1) + 2 * mm;
}

int apple_pick(const apple_params_t *p, const apple_sizes_t *s, const uint8_t *seg, int *xy,
	       int maxpick, void *work)
{
	const int q = s->query, lo = q / 2 - 1;
	int my, mx;
	const size_t mm = pick_grid(s, &my, &mx);
	const int moa = s->moa;
	/* the int32 arrays first: work is malloc-aligned */
	int32_t *lab = work, *par = lab + mm + 1;
	uint8_t *t = (uint8_t *)(par + mm + 1), *img = t + mm;
	long long *cnt = NULL, *sr = NULL, *sc = NULL;
	int32_t *cy = NULL, *cx = NULL, *ccount = NULL;
	int npick = 0, ret = SP_ENOMEM;

	if (mm == 0)
		return 0;
	for (int y = 0; y < my; y++)
		memcpy(t + (size_t)y * mx, seg + (size_t)(y + lo) * s->nwx + lo, (size_t)mx);

	/* Drop components larger than max_size^2.  The reference labels the
	 * image again without them; here their labels are dropped and the
	 * others renumbered in order, which is the same labelling: the
	 * components left are unchanged, and so are their first pixels in
	 * raster order, which number them (apple_label8). */
	int nl = apple_label8(t, my, mx, lab, par);
	cnt = calloc((size_t)nl + 1, sizeof *cnt);
	if (cnt == NULL)
		goto out;
	for (size_t i = 0; i < mm; i++)
		cnt[lab[i]]++;
	int32_t *keep = par; /* the parents are no longer needed; nl <= mm */
	int nk = 0;
	keep[0] = 0;
	for (int l = 1; l <= nl; l++)
		keep[l] = cnt[l] > (long long)s->max_size * s->max_size ? 0 : ++nk;
	for (size_t i = 0; i < mm; i++)
		lab[i] = keep[lab[i]];
	nl = nk;

	/* centres of mass, rounded half to even (np.rint) */
	int ncent = p->fix_quirks ? nl : (nl > 1 ? nl - 1 : 0);
	sr = calloc((size_t)nl + 1, sizeof *sr);
	sc = calloc((size_t)nl + 1, sizeof *sc);
	free(cnt);
	cnt = calloc((size_t)nl + 1, sizeof *cnt);
	cy = malloc(sizeof *cy * (size_t)(ncent + 1));
	cx = malloc(sizeof *cx * (size_t)(ncent + 1));
	if (sr == NULL || sc == NULL || cnt == NULL || cy == NULL || cx == NULL)
		goto out;
	for (int y = 0; y < my; y++)
		for (int x = 0; x < mx; x++) {
			int32_t l = lab[(size_t)y * mx + x];
			sr[l] += y;
			sc[l] += x;
			cnt[l]++;
		}
	for (int i = 0; i < ncent; i++) {
		cy[i] = (int32_t)rint((double)sr[i + 1] / (double)cnt[i + 1]);
		cx[i] = (int32_t)rint((double)sc[i + 1] / (double)cnt[i + 1]);
	}

	/* isolation: dilate the centres by a disk of radius moa */
	int area = 0;
	for (int dy = -moa; dy <= moa; dy++)
		for (int dx = -moa; dx <= moa; dx++)
			area += dx * dx + dy * dy <= moa * moa;
	memset(img, 0, mm);
	for (int i = 0; i < ncent; i++)
		for (int dy = -moa; dy <= moa; dy++)
			for (int dx = -moa; dx <= moa; dx++) {
				int y = cy[i] + dy, x = cx[i] + dx;
				if (dx * dx + dy * dy <= moa * moa && y >= 0 && y < my && x >= 0 &&
				    x < mx)
					img[(size_t)y * mx + x] = 1;
			}
	int nd = apple_label8(img, my, mx, lab, par);
	free(cnt);
	cnt = calloc((size_t)nd + 1, sizeof *cnt);
	ccount = calloc((size_t)nd + 1, sizeof *ccount);
	if (cnt == NULL || ccount == NULL)
		goto out;
	for (size_t i = 0; i < mm; i++)
		cnt[lab[i]]++;

	for (int k = 0; k < ncent; k++)
		ccount[lab[(size_t)cy[k] * mx + cx[k]]]++;
	for (int v = 0; v <= (p->fix_quirks ? ncent - 1 : nd); v++) {
		int k = v;
		if (p->fix_quirks) {
			/* centre v: kept when alone in a component of the disk's area */
			int32_t l = lab[(size_t)cy[v] * mx + cx[v]];
			if (cnt[l] != area || ccount[l] != 1)
				continue;
		} else {
			/* the reference: component label v of the disk's area -> centre v - 1 */
			if (cnt[v] != area)
				continue;
			k = v - 1;
			if (k < 0)
				k += ncent; /* NumPy's index -1 */
			if (k < 0 || k >= ncent)
				continue; /* the reference raises IndexError here */
		}
		if (npick < maxpick) {
			xy[2 * npick] = 2 * (cx[k] + 2 * lo + 1) + p->margin_left;
			xy[2 * npick + 1] = 2 * (cy[k] + 2 * lo + 1) + p->margin_top;
		}
		npick++;
	}
	ret = npick;
out:
	free(cnt);
	free(sr);
	free(sc);
	free(cy);
	free(cx);
	free(ccount);
	return ret;
}
