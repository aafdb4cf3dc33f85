/*
 * table.c: output for people: aligned tables, counts as 2.1k, ages as
 * 3m12s, sizes through humanize_number(3).  Colour only on a terminal and
 * never when NO_COLOR is set (no-color.org).  Machine formats (JSON,
 * Prometheus) never go through here.
 */
#include <libutil.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

struct mq_table {
	int		 ncols, nrows;
	const char	*align;		/* per column: 'l' or 'r' */
	char		***cells;
	int		**hot;
	size_t		*width;
};

struct mq_table *
mq_table_new(int ncols, const char *const *head, const char *align)
{
	struct mq_table *t = mq_alloc(sizeof *t);
	char **row = mq_array(NULL, ncols, sizeof *row);
	int i;

	t->ncols = ncols;
	t->align = align;
	t->width = mq_alloc(ncols * sizeof *t->width);
	for (i = 0; i < ncols; i++)
		row[i] = (char *)head[i];
	mq_table_add(t, row, NULL);
	free(row);
	return t;
}

void
mq_table_add(struct mq_table *t, char **cells, const int *hot)
{
	int i;

	t->cells = mq_array(t->cells, t->nrows + 1, sizeof *t->cells);
	t->hot = mq_array(t->hot, t->nrows + 1, sizeof *t->hot);
	t->cells[t->nrows] = mq_array(NULL, t->ncols, sizeof **t->cells);
	t->hot[t->nrows] = mq_alloc(t->ncols * sizeof **t->hot);
	for (i = 0; i < t->ncols; i++) {
		t->cells[t->nrows][i] = mq_strdup(cells[i]);
		t->hot[t->nrows][i] = hot ? hot[i] : 0;
		if (strlen(cells[i]) > t->width[i])
			t->width[i] = strlen(cells[i]);
	}
	t->nrows++;
}

void
mq_table_print(FILE *f, struct mq_table *t, int colour)
{
	int r, i, w;

	for (r = 0; r < t->nrows; r++) {
		for (i = 0; i < t->ncols; i++) {
			const char *c = t->cells[r][i];
			int last = i == t->ncols - 1;

			w = (int)t->width[i];
			if (colour && r == 0)
				fputs("\033[1m", f);
			else if (colour && t->hot[r][i])
				fputs("\033[31m", f);
			if (t->align[i] == 'r')
				fprintf(f, "%*s", w, c);
			else if (last)
				fputs(c, f);
			else
				fprintf(f, "%-*s", w, c);
			if (colour && (r == 0 || t->hot[r][i]))
				fputs("\033[0m", f);
			fputs(last ? "\n" : "  ", f);
		}
	}
}

void
mq_table_free(struct mq_table *t)
{
	int r, i;

	if (!t)
		return;
	for (r = 0; r < t->nrows; r++) {
		for (i = 0; i < t->ncols; i++)
			free(t->cells[r][i]);
		free(t->cells[r]);
		free(t->hot[r]);
	}
	free(t->cells);
	free(t->hot);
	free(t->width);
	free(t);
}

void
mq_human_count(int64_t n, char *buf, size_t len)
{
	if (n < 10000)
		snprintf(buf, len, "%lld", (long long)n);
	else if (n < 1000000)
		snprintf(buf, len, "%.1fk", n / 1e3);
	else if (n < 1000000000)
		snprintf(buf, len, "%.1fM", n / 1e6);
	else
		snprintf(buf, len, "%.1fG", n / 1e9);
}

void
mq_human_age(int64_t ms, char *buf, size_t len)
{
	int64_t s = ms / 1000;

	if (ms < 0)
		snprintf(buf, len, "-");
	else if (ms < 10000)
		snprintf(buf, len, "%.1fs", ms / 1e3);
	else if (s < 60)
		snprintf(buf, len, "%llds", (long long)s);
	else if (s < 3600)
		snprintf(buf, len, "%lldm%02llds", (long long)(s / 60),
		    (long long)(s % 60));
	else if (s < 86400)
		snprintf(buf, len, "%lldh%02lldm", (long long)(s / 3600),
		    (long long)(s % 3600 / 60));
	else
		snprintf(buf, len, "%lldd%02lldh", (long long)(s / 86400),
		    (long long)(s % 86400 / 3600));
}

void
mq_human_size(int64_t bytes, char *buf, size_t len)
{
	humanize_number(buf, len < 6 ? len : 6, bytes, "B", HN_AUTOSCALE,
	    HN_DECIMAL | HN_NOSPACE);
}

/* "1 message", "2 messages": the word for n. */
const char *
mq_plural(int64_t n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

int
mq_want_colour(FILE *f)
{
	const char *nc = getenv("NO_COLOR"), *term = getenv("TERM");

	return isatty(fileno(f)) && !(nc && *nc) &&
	    !(term && !strcmp(term, "dumb"));
}
