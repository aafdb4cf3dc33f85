/*
 * list.c: a group's messages as it sees them, for mq-lag --messages: a
 * table for people (narrow: a reason, a body, a host cut short), or
 * JSON lines with everything.  It only reads.
 */
#include <stdlib.h>
#include <string.h>

#include "mq.h"

#define CHUNK		256
#define TABLE_MAX	1000	/* rows of a table without -n */
#define REASON_MAX	20	/* bytes of a reason in the table */
#define BODY_MAX	64	/* of a body, and at least BODY_MIN of it */
#define BODY_MIN	12
#define HOST_MAX	15	/* of a host name */

static const char *const names[MQ_I_NSTATES] = { "pending", "inflight",
    "expired", "retry", "dead" };

/* "pending,dead": their bits; a name that is none of them is 64. */
int
mq_item_states(const char *list)
{
	char *s = mq_strdup(list), *p = s, *w;
	int bits = 0, i;

	while ((w = strsep(&p, ",")) != NULL) {
		for (i = 0; i < MQ_I_NSTATES && strcmp(w, names[i]); i++)
			;
		if (i == MQ_I_NSTATES)
			mq_usage_err("invalid state '%s': want pending, "
			    "inflight, expired, retry or dead", w);
		bits |= 1 << i;
	}
	free(s);
	return bits;
}

/* "in 25s", "5.0s ago", or "-". */
static void
when(int64_t due, int64_t now, char *buf, size_t len)
{
	char age[32];

	if (!due) {
		snprintf(buf, len, "-");
		return;
	}
	mq_human_age(due >= now ? due - now : now - due, age, sizeof age);
	snprintf(buf, len, due >= now ? "in %s" : "%s ago", age);
}

static void
json_item(FILE *f, const struct mq_list *l, const struct mq_item *it)
{
	char ts[40];

	fputs("{\"topic\":", f);
	mq_json_str(f, (const unsigned char *)l->topic, strlen(l->topic));
	fputs(",\"group\":", f);
	mq_json_str(f, (const unsigned char *)l->group, strlen(l->group));
	fprintf(f, ",\"offset\":%lld,\"state\":\"%s\",\"attempt\":%d,"
	    "\"expired\":%d", (long long)it->off, names[it->state],
	    it->m.attempt, it->expired);
	if (it->m.off) {
		mq_rfc3339(it->m.ts, ts, sizeof ts);
		fprintf(f, ",\"time\":\"%s\",\"epoch_ms\":%lld", ts,
		    (long long)it->m.ts);
	}
	if (it->state != MQ_I_DEAD && it->due > it->m.ts)
		fprintf(f, ",\"due_ms\":%lld", (long long)it->due);
	if (it->host) {
		fputs(",\"host\":", f);
		mq_json_str(f, (const unsigned char *)it->host,
		    strlen(it->host));
		fprintf(f, ",\"pid\":%lld", (long long)it->pid);
	}
	if (it->reason) {
		fputs(",\"reason\":", f);
		mq_json_str(f, (const unsigned char *)it->reason,
		    strlen(it->reason));
	}
	fputs(",\"key\":", f);
	if (it->m.key)
		mq_json_str(f, (const unsigned char *)it->m.key,
		    strlen(it->m.key));
	else
		fputs("null", f);
	if (it->m.headers)
		mq_json_headers(f, it->m.headers);
	if (!it->m.off)
		fputs(",\"purged\":true", f);
	else if (mq_utf8_valid(it->m.body, it->m.len)) {
		fprintf(f, ",\"size\":%zu,\"body\":", it->m.len);
		mq_json_str(f, it->m.body, it->m.len);
	} else {
		fprintf(f, ",\"size\":%zu,\"body\":\"", it->m.len);
		mq_base64(f, it->m.body, it->m.len);
		fputs("\",\"base64\":true", f);
	}
	fputs("}\n", f);
}

/* The table's rows, kept until the body's width is known. */
struct rows {
	char	*(*cell)[8];
	int	(*hot)[8];
	int	 n;
};

static void
row(struct rows *t, const struct mq_list *l, const struct mq_item *it)
{
	char c[8][BODY_MAX + 64];
	int i;

	t->cell = mq_array(t->cell, t->n + 1, sizeof *t->cell);
	t->hot = mq_array(t->hot, t->n + 1, sizeof *t->hot);
	snprintf(c[0], sizeof c[0], "%lld", (long long)it->off);
	snprintf(c[1], sizeof c[1], "%s", names[it->state]);
	snprintf(c[2], sizeof c[2], "%d", it->m.attempt);
	if (it->m.off)
		mq_human_age(l->now - it->m.ts, c[3], sizeof c[3]);
	else
		snprintf(c[3], sizeof c[3], "-");
	if (it->state == MQ_I_DEAD ||
	    (it->state == MQ_I_PENDING && it->due <= l->now))
		snprintf(c[4], sizeof c[4], "-");
	else
		when(it->due, l->now, c[4], sizeof c[4]);
	if (it->host)
		snprintf(c[5], sizeof c[5], "%.*s:%lld", HOST_MAX, it->host,
		    (long long)it->pid);
	else
		snprintf(c[5], sizeof c[5], "-");
	if (it->reason)
		mq_preview((const unsigned char *)it->reason, strlen(it->reason),
		    REASON_MAX, c[6], sizeof c[6]);
	else
		snprintf(c[6], sizeof c[6], "-");
	if (it->m.off)	/* cut to the width left over: see print_rows */
		mq_preview(it->m.body, it->m.len, BODY_MAX, c[7], sizeof c[7]);
	else
		snprintf(c[7], sizeof c[7], "(purged)");
	for (i = 0; i < 8; i++)
		t->cell[t->n][i] = mq_strdup(c[i]);
	memset(t->hot[t->n], 0, sizeof t->hot[t->n]);
	t->hot[t->n][1] = it->state == MQ_I_DEAD ||
	    it->state == MQ_I_EXPIRED;
	t->n++;
}

/* The table, its bodies cut to what 80 columns leave (BODY_MIN at least). */
static void
print_rows(FILE *f, struct rows *t)
{
	static const char *head[] = { "OFFSET", "STATE", "TRY", "AGE", "DUE",
	    "HOLDER", "REASON", "BODY" };
	struct mq_table *tb = mq_table_new(8, head, "rlrrllll");
	size_t w[7], used = 7 * 2, room;
	char *body;
	int i, k;

	for (k = 0; k < 7; k++)
		w[k] = strlen(head[k]);
	for (i = 0; i < t->n; i++)
		for (k = 0; k < 7; k++)
			if (strlen(t->cell[i][k]) > w[k])
				w[k] = strlen(t->cell[i][k]);
	for (k = 0; k < 7; k++)
		used += w[k];
	room = used + BODY_MIN < 80 ? 80 - used : BODY_MIN;
	for (i = 0; i < t->n; i++) {
		body = t->cell[i][7];
		if (t->cell[i][7][0] && strlen(body) > room) {
			t->cell[i][7] = mq_alloc(room + 1);
			mq_preview((const unsigned char *)body, strlen(body),
			    room, t->cell[i][7], room + 1);
			free(body);
		}
		mq_table_add(tb, t->cell[i], t->hot[i]);
		for (k = 0; k < 8; k++)
			free(t->cell[i][k]);
	}
	mq_table_print(f, tb, mq_want_colour(f));
	mq_table_free(tb);
	free(t->cell);
	free(t->hot);
}

/*
 * Prints the group's messages from l->from on, at most limit (0: all;
 * the table, which is drawn once all are read, TABLE_MAX and a line on
 * stderr when there are more), a chunk at a time.
 */
void
mq_list_print(FILE *f, struct mq *q, struct mq_list *l, long limit, int json)
{
	struct mq_item *it = mq_array(NULL, CHUNK, sizeof *it);
	struct rows rows = { NULL, NULL, 0 };
	long got = 0, cap = 0;
	int i, n, want;

	if (!l->states)
		l->states = (1 << MQ_I_NSTATES) - 1;
	if (!json && !limit)	/* one more, to know there are more */
		limit = cap = TABLE_MAX + 1;
	l->now = mq_now();
	do {
		want = CHUNK;
		if (limit && limit - got < want)
			want = (int)(limit - got);
		if ((n = mq_list(q, l, it, want)) < 0)
			mq_check(n, l->topic, l->group);
		for (i = 0; i < n; i++) {
			if (json)
				json_item(f, l, &it[i]);
			else if (got + i < TABLE_MAX || !cap)
				row(&rows, l, &it[i]);
			l->from = it[i].off + 1;
			mq_item_free(&it[i]);
		}
		got += n;
	} while (n == want && !mq_stop && (!limit || got < limit));
	if (!json)
		print_rows(f, &rows);
	if (cap && got == cap)
		mq_warn("more than %d messages: the first %d shown (-n N shows "
		    "N, --json all)", TABLE_MAX, TABLE_MAX);
	free(it);
}
