/* starpipe tune's plots (gnuplot, PNG and SVG): makespan per configuration, workers' busy/idle, Gantt charts. */
#define _GNU_SOURCE
#ifdef HAVE_CONFIG_H
#include <config.h>
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "fsutil.h"
#include "tune.h"
#include "tune_int.h"

/* Writes a file under DIR/plots; returns 0 or -1 (with a message). */
static FILE *plot_file(const tune_t *t, const char *name, char *path, size_t len)
{
	snprintf(path, len, "%s/plots/%s", t->out, name);
	FILE *f = fopen(path, "w");
	if (f == NULL)
		fprintf(stderr, "starpipe tune: %s: %s\n", path, strerror(errno));
	return f;
}

/* Pixels per character and per line of the plots' font (sans 10 in
 * pngcairo, generous: a label a little short of its room is still whole). */
enum { CHAR_PX = 8, LINE_PX = 17 };

/* A canvas width (pixels) that holds a title line of the given characters:
 * gnuplot centres a title over the plot, not the canvas, so the margins
 * (a key outside on the right) count twice. */
static int canvas_w(size_t chars, int atleast)
{
	size_t w = chars * CHAR_PX + 2 * 260;
	return w > (size_t)atleast ? (int)(w < 20000 ? w : 20000) : atleast;
}

/* gnuplot's terminal lines for the script's two outputs, PNG then SVG. */
static void plot_outputs(FILE *g, const char *stem, const char *plot, int w, int h)
{
	fprintf(g, "set terminal pngcairo size %d,%d font 'sans,10'\nset output '%s.png'\n%s\n", w,
		h, stem, plot);
	fprintf(g, "set terminal svg size %d,%d font 'sans,10' background '#ffffff'\n"
		   "set output '%s.svg'\n%s\n",
		w, h, stem, plot);
}

/* Text inside a double-quoted gnuplot string. */
static void gp_str(FILE *g, const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', g);
		if (*s == '\n')
			fputs("\\n", g);
		else
			fputc(*s, g);
	}
}

/* `set title`: a line for what ran (SIMULATED and the platform when it was:
 * a plot is often seen without its summary; the graph file's name), then
 * text, whose '\n' break lines.  Returns the longest line's length. */
static size_t gp_title(FILE *g, const tune_t *t, const char *text)
{
	char *head = NULL;
	size_t len = 0, longest = 0, run = 0;
	FILE *m = open_memstream(&head, &len);
	if (m == NULL)
		return 0;
	if (t->simulate != NULL)
		fprintf(m, "SIMULATED (SimGrid, platform %s): ", t->simulate);
	fprintf(m, "%s\n%s", tune_graph_name(t), text);
	if (fclose(m) != 0 || head == NULL)
		return 0;
	fputs("set title \"", g);
	gp_str(g, head);
	fputs("\" noenhanced\n", g);
	for (const char *p = head;; p++) {
		if (*p == '\n' || *p == '\0') {
			longest = run > longest ? run : longest;
			run = 0;
			if (*p == '\0')
				break;
		} else {
			run++;
		}
	}
	free(head);
	return longest;
}

/* A plot script's head: its comment line and its title (printf-style).
 * Returns the canvas width the title needs (at least 1200), or -1. */
static int plot_head(FILE *g, const tune_t *t, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int plot_head(FILE *g, const tune_t *t, const char *fmt, ...)
{
	char *title = NULL;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&title, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	fprintf(g, "# gnuplot script written by starpipe tune; run it in this folder\n");
	int w = canvas_w(gp_title(g, t, title), 1200);
	free(title);
	return w;
}

/* Orders worker names as people count them: cpu2 before cpu10, CPUs before
 * cuda0 (runs of digits compare as numbers). */
static int natcmp(const char *a, const char *b)
{
	while (*a != '\0' && *b != '\0') {
		if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
			char *ea, *eb;
			unsigned long long x = strtoull(a, &ea, 10), y = strtoull(b, &eb, 10);
			if (x != y)
				return x < y ? -1 : 1;
			a = ea;
			b = eb;
			continue;
		}
		if (*a != *b)
			break;
		a++;
		b++;
	}
	return (unsigned char)*a - (unsigned char)*b;
}

static int natcmp_p(const void *a, const void *b)
{
	return natcmp(*(const char *const *)a, *(const char *const *)b);
}

static int plot_makespan(const tune_t *t, const cstat_t *s, size_t nr)
{
	char path[4200];
	int has[3] = { 0, 0, 0 }; /* '=', '>', '?' */
	FILE *d = plot_file(t, "makespan.dat", path, sizeof path);
	if (d == NULL)
		return -1;
	fprintf(d, "# rank median min max bound vs#1 label\n");
	for (size_t i = 0; i < nr; i++) {
		fprintf(d, "%zu %.6f %.6f %.6f %.6f %c \"%s\"\n", i + 1, s[i].med, s[i].min, s[i].max,
			s[i].bound, s[i].vs, tune_cfg_label(t, s[i].cfg));
		has[s[i].vs == VS_TIED ? 0 : s[i].vs == VS_SLOWER ? 1 : 2] = 1;
	}
	fclose(d);
	FILE *g = plot_file(t, "makespan.gp", path, sizeof path);
	if (g == NULL)
		return -1;
	char title[160];
	snprintf(title, sizeof title,
		 "makespan per configuration, fastest first (%ld repeat(s); bar: median, whiskers: "
		 "min-max)", t->repeat);
	fprintf(g, "# gnuplot script written by starpipe tune; run it in this folder\n");
	size_t tw = gp_title(g, t, title);
	/* The labels stand vertical under their bars (slanted, a long first one
	 * would run off the left edge), with the bottom margin their length; no
	 * xlabel (gnuplot places it by its own, shorter, estimate of theirs). The
	 * key goes inside, over headroom, leaving the plot the canvas' width. */
	int margin = (int)(t->label_w * CHAR_PX / LINE_PX) + 2;
	int w = canvas_w(tw, 1200), h = 450 + margin * LINE_PX;
	if ((int)nr * 2 * LINE_PX + 200 > w)
		w = (int)nr * 2 * LINE_PX + 200; /* a label's line per bar, and a gap */
	fprintf(g, "set ylabel 'makespan (s)'\n"
		   "set yrange [0:*]\nset offsets 0, 0, graph 0.35, 0\nset xrange [0.3:%zu.7]\n"
		   "set grid ytics\nset xtics rotate by 90 right noenhanced\n"
		   "set key inside left top noenhanced\n"
		   "set style fill solid 0.35\nset boxwidth 0.6\nset bmargin %d\n",
		nr, margin);
	/* a colour per vs#1 mark, so the plot does not crown a winner either */
	static const char *const cls[3][3] = {
		{ "=", "#4477aa", "median, not distinguishable from the fastest (=)" },
		{ ">", "#99bbdd", "median, slower than the fastest (>)" },
		{ "?", "#4477aa", "median (not tested: ?)" },
	};
	char plot[2048];
	size_t o = (size_t)snprintf(plot, sizeof plot, "plot ");
	for (int c = 0; c < 3; c++)
		if (has[c])
			o += (size_t)snprintf(plot + o, sizeof plot - o,
					      "'makespan.dat' using 1:(strcol(6) eq '%s' ? $2 : NaN) with boxes "
					      "lc rgb '%s' title '%s', \\\n     ",
					      cls[c][0], cls[c][1], cls[c][2]);
	snprintf(plot + o, sizeof plot - o,
		 "'makespan.dat' using 1:2:3:4:xtic(7) with yerrorbars lc rgb '#222222' pt -1 "
		 "title 'min-max', \\\n"
		 "     '' using 1:5 with points pt 9 ps 1.5 lc rgb '#cc3311' title 'lower bound (models)'");
	plot_outputs(g, "makespan", plot, w, h);
	fclose(g);
	return 0;
}

/* Worker names of a run (cpu0, cpu1, ..., cuda0), in natural order. */
static size_t worker_names(const row_t *r, const char **w, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < r->nf && n < max; i++)
		if (strncmp(r->f[i].k, "busy:", 5) == 0)
			w[n++] = r->f[i].k + 5;
	qsort(w, n, sizeof *w, natcmp_p);
	return n;
}

static int plot_workers(const tune_t *t, const cstat_t *s, size_t nr)
{
	char path[4200], key[80];
	FILE *d = plot_file(t, "workers.dat", path, sizeof path);
	if (d == NULL)
		return -1;
	fprintf(d, "# label busy transfer idle (fractions of the makespan)\n");
	size_t pick[2] = { 0, nr - 1 }, nbars = 0, longest = 0;
	for (int b = 0; b < (nr > 1 ? 2 : 1); b++) {
		const row_t *r = &t->rows[s[pick[b]].best_row];
		const char *w[512];
		size_t nw = worker_names(r, w, 512);
		for (size_t i = 0; i < nw; i++) {
			double x[3];
			const char *what[3] = { "busy", "transfer", "idle" };
			for (int k = 0; k < 3; k++) {
				snprintf(key, sizeof key, "%s:%s", what[k], w[i]);
				x[k] = tune_fig_num(r, key);
			}
			fprintf(d, "\"%s: %s\" %.4f %.4f %.4f\n", b == 0 ? "best" : "worst", w[i], x[0],
				x[1], x[2]);
			if (strlen(w[i]) + 7 > longest)
				longest = strlen(w[i]) + 7;
		}
		nbars += nw;
		fprintf(d, "# %s: %s\n", b == 0 ? "best" : "worst", tune_cfg_label(t, s[pick[b]].cfg));
	}
	fclose(d);
	char worst[1200] = "";
	if (nr > 1)
		snprintf(worst, sizeof worst, "\nworst (rank %zu): %s", nr, tune_cfg_label(t, s[nr - 1].cfg));
	FILE *g = plot_file(t, "workers.gp", path, sizeof path);
	int w = g == NULL ? -1 : plot_head(g, t, "per-worker time of the median run of\nbest (rank 1, "
					  "the fastest median): %s%s", tune_cfg_label(t, s[0].cfg), worst);
	if (w < 0) {
		if (g != NULL)
			fclose(g);
		return -1;
	}
	if ((int)nbars * LINE_PX + 300 > w)
		w = (int)nbars * LINE_PX + 300;
	fprintf(g, "set ylabel 'fraction of the makespan'\nset yrange [0:1.05]\nset grid ytics\n"
		   "set style data histograms\nset style histogram rowstacked\n"
		   "set style fill solid 0.8 border -1\nset boxwidth 0.7\n"
		   "set key outside right top\nset xtics rotate by 90 right noenhanced\n"
		   "set bmargin %d\n",
		(int)(longest * CHAR_PX / LINE_PX) + 3);
	plot_outputs(g, "workers",
		     "plot 'workers.dat' using 2:xtic(1) lc rgb '#228833' title 'busy (tasks)', \\\n"
		     "     '' using 3 lc rgb '#ccbb44' title 'transfers (estimated)', \\\n"
		     "     '' using 4 lc rgb '#bbbbbb' title 'idle'",
		     w, 700);
	fclose(g);
	return 0;
}

/* A Gantt chart of one run from its task file: a row per worker, in natural
 * order from the top, a colour per stage. */
static int plot_gantt(const tune_t *t, const char *stem, const char *what, size_t row,
		      const char *label)
{
	char src[4200], path[4200], *line = NULL;
	size_t cap = 0;
	ssize_t n;
	snprintf(src, sizeof src, "%s/runs/%04zu.tasks", t->out, row + 1);
	FILE *in = fopen(src, "r");
	if (in == NULL)
		return -1;
	char *stages[64], *workers[512];
	size_t ns = 0, nw = 0;
	double t_end = 0;
	/* two passes over the file: the stage and worker names, then the boxes */
	char dat[256];
	snprintf(dat, sizeof dat, "%s.dat", stem);
	FILE *d = plot_file(t, dat, path, sizeof path);
	if (d == NULL) {
		fclose(in);
		return -1;
	}
	for (int pass = 0; pass < 2; pass++) {
		rewind(in);
		if (pass)
			qsort(workers, nw, sizeof *workers, natcmp_p);
		for (size_t st = 0; st < (pass ? ns : 1); st++) {
			if (pass)
				fprintf(d, "# stage %s\n", stages[st]);
			rewind(in);
			while ((n = getline(&line, &cap, in)) > 0) {
				char *f[5], *save = NULL;
				int k = 0;
				for (char *p = strtok_r(line, "\t\n", &save); p && k < 5;
				     p = strtok_r(NULL, "\t\n", &save))
					f[k++] = p;
				if (k < 5)
					continue;
				size_t si, wi;
				for (si = 0; si < ns && strcmp(stages[si], f[1]) != 0; si++)
					;
				for (wi = 0; wi < nw && strcmp(workers[wi], f[0]) != 0; wi++)
					;
				if (!pass) {
					if (si == ns && ns < 64)
						stages[ns++] = strdup(f[1]);
					if (wi == nw && nw < 512)
						workers[nw++] = strdup(f[0]);
					if (strtod(f[4], NULL) > t_end)
						t_end = strtod(f[4], NULL);
				} else if (si == st && wi < nw) {
					fprintf(d, "%s %s %zu\n", f[3], f[4], wi);
				}
			}
			if (pass)
				fprintf(d, "\n\n");
		}
	}
	free(line);
	fclose(in);
	fclose(d);
	char gpn[256];
	snprintf(gpn, sizeof gpn, "%s.gp", stem);
	FILE *g = plot_file(t, gpn, path, sizeof path);
	int w = g == NULL ? -1 : plot_head(g, t, "%s run: %s", what, label);
	if (w < 0) {
		if (g != NULL)
			fclose(g);
		return -1;
	}
	int h = (int)nw * LINE_PX + 250;
	h = h > 700 ? h : 700;
	/* reversed: the first worker on top, as the ytics read */
	fprintf(g, "set xlabel 'time since the first task started (s)'\n"
		   "set ylabel 'worker'\nset yrange [%zu.6:-0.6]\nset ytics (", nw ? nw - 1 : 0);
	for (size_t i = 0; i < nw; i++)
		fprintf(g, "%s'%s' %zu", i ? ", " : "", workers[i], i);
	/* Boxes without a border: a row of many short tasks would be the border's
	 * black alone.  Boxes wider than a few pixels get an outline (drawn
	 * after), so that long tasks of one stage still read as separate. */
	double wide = 4.0 * t_end / (w > 400 ? w - 300 : 100);
	fprintf(g, ")\nset grid xtics\nset key outside right top noenhanced\n"
		   "set style fill solid 0.85 noborder\nstages = \"");
	for (size_t i = 0; i < ns; i++)
		fprintf(g, "%s%s", i ? " " : "", stages[i]);
	fprintf(g, "\"\nwide = %.9g\n", wide);
	char plot[1024];
	snprintf(plot, sizeof plot,
		 "plot for [i=0:%zu] '%s' index i using 1:3:1:2:($3-0.38):($3+0.38) "
		 "with boxxyerror lc i+1 title word(stages, i+1), \\\n"
		 "     '%s' using (($2-$1) >= wide ? $1 : NaN):3:1:2:($3-0.38):($3+0.38) "
		 "with boxxyerror lc rgb '#333333' fs empty border lc rgb '#333333' notitle",
		 ns ? ns - 1 : 0, dat, dat);
	plot_outputs(g, stem, plot, w, h);
	fclose(g);
	for (size_t i = 0; i < ns; i++)
		free(stages[i]);
	for (size_t i = 0; i < nw; i++)
		free(workers[i]);
	return 0;
}

/* Runs gnuplot on one script in DIR/plots; 0 when it worked. */
static int gnuplot(const tune_t *t, const char *script)
{
	char dir[4200];
	snprintf(dir, sizeof dir, "%s/plots", t->out);
	pid_t pid = fork();
	if (pid == 0) {
		if (chdir(dir) != 0)
			_exit(127);
		execlp("gnuplot", "gnuplot", script, (char *)NULL);
		_exit(127);
	}
	int st = 0;
	if (pid < 0)
		return -1;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : WIFEXITED(st) && WEXITSTATUS(st) == 127 ? 127 : -1;
}

int tune_plots(const tune_t *t, const cstat_t *s, const ranking_t *k)
{
	size_t nr = tune_nranked(t, s);
	if (nr == 0)
		return 0;
	int bad = 0;
	bad |= plot_makespan(t, s, nr) != 0;
	bad |= plot_workers(t, s, nr) != 0;
	char *full = NULL;
	/* in a tie, "best" is only the fastest median: the title says so */
	if (asprintf(&full, "%s (makespan %.3f s)%s", tune_cfg_label(t, s[0].cfg),
		     tune_fig_num(&t->rows[s[0].best_row], "makespan_s"),
		     k->tested && k->ntied > 1 ? "\nrank 1 of a tie: see summary.txt" : "") < 0)
		return -1;
	bad |= plot_gantt(t, "gantt-best", "best", s[0].best_row, full) != 0;
	free(full);
	if (asprintf(&full, "%s (makespan %.3f s)", tune_cfg_label(t, s[nr - 1].cfg),
		     tune_fig_num(&t->rows[s[nr - 1].best_row], "makespan_s")) < 0)
		return -1;
	bad |= plot_gantt(t, "gantt-worst", "worst", s[nr - 1].best_row, full) != 0;
	free(full);
	if (bad)
		return -1;
	static const char *const scripts[] = { "makespan.gp", "workers.gp", "gantt-best.gp",
					       "gantt-worst.gp" };
	for (size_t i = 0; i < 4; i++) {
		int r = gnuplot(t, scripts[i]);
		if (r == 127) {
			fprintf(stderr, "starpipe tune: gnuplot not found: the plot data and scripts are in "
				"%s/plots/, no images (install gnuplot-nox)\n", t->out);
			return -1;
		}
		if (r != 0) {
			fprintf(stderr, "starpipe tune: gnuplot failed on %s/plots/%s\n", t->out, scripts[i]);
			return -1;
		}
	}
	return 0;
}
