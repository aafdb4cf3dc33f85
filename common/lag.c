/*
 * lag.c: what mq-lag reports: one snapshot of every topic and group, and
 * its machine forms (JSON lines, Prometheus text) and listings.
 *
 * Cost follows the number of topics, groups and unsettled deliveries, not
 * the size of the log: every figure comes from counters and the delivery
 * rows (sq_stats in sqlite/topic.c).  The snapshot is one read
 * transaction; nothing here writes.
 */
#include <stdlib.h>
#include <string.h>

#include "mq.h"

/*
 * One consistent snapshot of the rows of L->topic and L->group (every
 * one when NULL); a named topic or group that does not exist exits 66.
 */
void
mq_lag_collect(struct mq *q, struct mq_lag *L)
{
	free(L->rows);
	L->rows = NULL;
	mq_check(mq_snapshot(q, L), L->topic, L->group);
}

int64_t
mq_lag_age(const struct mq_lag *L, const struct mq_lag_row *r)
{
	return r->s.oldest_ts ? L->now - r->s.oldest_ts : 0;
}

/* A time in ms since the epoch, or null for never (0). */
static void
json_ms(FILE *f, const char *name, int64_t ms)
{
	if (ms)
		fprintf(f, ",\"%s\":%lld", name, (long long)ms);
	else
		fprintf(f, ",\"%s\":null", name);
}

void
mq_lag_json(FILE *f, const struct mq_lag *L)
{
	char ts[40], old[40];
	int64_t p;
	int i;

	mq_rfc3339(L->now, ts, sizeof ts);
	for (i = 0; i < L->n; i++) {
		const struct mq_lag_row *r = &L->rows[i];

		fprintf(f, "{\"time\":\"%s\",\"epoch\":%.3f,\"topic\":\"%s\","
		    "\"end_offset\":%lld,\"messages\":%lld,\"bytes\":%lld", ts,
		    L->now / 1e3, r->t.name, (long long)(r->t.next_off - 1),
		    (long long)r->t.msgs, (long long)r->t.bytes);
		json_ms(f, "last_send_ms", r->t.last_ts);
		if (r->has_group) {
			fprintf(f, ",\"group\":\"%s\",\"position\":%lld,\"lag\":%lld,"
			    "\"in_flight\":%lld,\"expired\":%lld,"
			    "\"retrying\":%lld,\"delayed\":%lld,\"dead\":%lld,"
			    "\"consumers\":%lld,\"settled_total\":%lld,"
			    "\"delivered_total\":%lld,\"failed_total\":%lld,"
			    "\"dead_lettered_total\":%lld,\"cancelled_total\":%lld,"
			    "\"lapsed_total\":%lld,\"duplicates_total\":%lld",
			    r->g.name, (long long)r->g.pos, (long long)r->s.lag,
			    (long long)r->s.inflight, (long long)r->s.expired,
			    (long long)r->s.retrying, (long long)r->s.delayed,
			    (long long)r->s.dead, (long long)r->s.consumers,
			    (long long)r->g.settled, (long long)r->g.delivered,
			    (long long)r->g.failed, (long long)r->g.deadlettered,
			    (long long)r->g.cancelled, (long long)r->g.lapsed,
			    (long long)r->g.duplicates);
			if (r->s.oldest_ts) {
				mq_rfc3339(r->s.oldest_ts, old, sizeof old);
				fprintf(f, ",\"oldest_age_s\":%.3f,\"oldest_time\":"
				    "\"%s\",\"oldest_epoch\":%.3f", mq_lag_age(L, r) / 1e3,
				    old, r->s.oldest_ts / 1e3);
			} else
				fprintf(f, ",\"oldest_age_s\":0,\"oldest_time\":null,"
				    "\"oldest_epoch\":null");
			json_ms(f, "last_settle_ms", r->g.settled_ts);
			/* the group's or its topic's, while it lasts */
			if ((p = mq_paused(&r->t, &r->g, L->now)) == INT64_MAX)
				fprintf(f, ",\"paused\":true,"
				    "\"paused_until_ms\":null");
			else if (p)
				fprintf(f, ",\"paused\":true,"
				    "\"paused_until_ms\":%lld", (long long)p);
			else
				fprintf(f, ",\"paused\":false");
		} else
			fprintf(f, ",\"group\":null");
		fprintf(f, "}\n");
	}
}

void
mq_lag_prometheus(FILE *f, const struct mq_lag *L)
{
	static const struct { const char *name, *type, *help; int group; } m[] = {
		{ "mq_topic_appended_total", "counter",
		  "Messages ever appended to the topic (its end offset).", 0 },
		{ "mq_topic_messages", "gauge", "Messages stored.", 0 },
		{ "mq_topic_bytes", "gauge", "Body bytes stored.", 0 },
		{ "mq_group_position", "gauge",
		  "Next offset the group hands out.", 1 },
		{ "mq_group_lag", "gauge", "Messages due and not settled by the "
		  "group: not delivered, in flight, waiting for retry.", 1 },
		{ "mq_group_in_flight", "gauge", "Leases running.", 1 },
		{ "mq_group_expired", "gauge", "Leases run out, not yet "
		  "redelivered (consumption timeouts).", 1 },
		{ "mq_group_retrying", "gauge", "Failed deliveries waiting for "
		  "their retry.", 1 },
		{ "mq_group_delayed", "gauge", "Messages not due yet.", 1 },
		{ "mq_group_dead", "gauge", "Dead letters.", 1 },
		{ "mq_group_oldest_age_seconds", "gauge", "Age of the oldest "
		  "unsettled message.", 1 },
		{ "mq_group_consumers", "gauge", "Live consumers.", 1 },
		{ "mq_group_settled_total", "counter", "Messages the group "
		  "ever settled.", 1 },
		{ "mq_group_delivered_total", "counter", "Deliveries the group "
		  "ever made, redeliveries included.", 1 },
		{ "mq_group_failed_total", "counter", "Deliveries that failed "
		  "(mq-ack --fail, handler exit status).", 1 },
		{ "mq_group_dead_lettered_total", "counter", "Dead letters the "
		  "group ever made.", 1 },
		{ "mq_group_cancelled_total", "counter", "Messages the group "
		  "settled because mq-topic cancel said so.", 1 },
		{ "mq_group_lapsed_total", "counter", "Messages whose time to "
		  "live ran out before the group handed them out.", 1 },
		{ "mq_group_duplicates_total", "counter", "Messages settled "
		  "as duplicates of a business id the group had acked.", 1 },
		{ "mq_topic_last_send_timestamp_seconds", "gauge", "When the "
		  "last message was sent to the topic (none: never).", 0 },
		{ "mq_group_last_settle_timestamp_seconds", "gauge", "When the "
		  "group last settled a message (none: never).", 1 },
	};
	size_t k;
	int i;

	for (k = 0; k < sizeof m / sizeof *m; k++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m[k].name, m[k].help,
		    m[k].name, m[k].type);
		for (i = 0; i < L->n; i++) {
			const struct mq_lag_row *r = &L->rows[i];
			double v;

			if (m[k].group && !r->has_group)
				continue;
			if (!m[k].group && i > 0 && !strcmp(L->rows[i - 1].t.name,
			    r->t.name))
				continue;	/* one sample per topic */
			switch (k) {
			case 0: v = r->t.next_off - 1; break;
			case 1: v = r->t.msgs; break;
			case 2: v = r->t.bytes; break;
			case 3: v = r->g.pos; break;
			case 4: v = r->s.lag; break;
			case 5: v = r->s.inflight; break;
			case 6: v = r->s.expired; break;
			case 7: v = r->s.retrying; break;
			case 8: v = r->s.delayed; break;
			case 9: v = r->s.dead; break;
			case 10: v = mq_lag_age(L, r) / 1e3; break;
			case 11: v = r->s.consumers; break;
			case 12: v = r->g.settled; break;
			case 13: v = r->g.delivered; break;
			case 14: v = r->g.failed; break;
			case 15: v = r->g.deadlettered; break;
			case 16: v = r->g.cancelled; break;
			case 17: v = r->g.lapsed; break;
			case 18: v = r->g.duplicates; break;
			case 19: v = r->t.last_ts / 1e3; break;
			default: v = r->g.settled_ts / 1e3; break;
			}
			if (k >= 19 && v == 0)
				continue;	/* never: no sample */
			if (m[k].group)
				fprintf(f, "%s{topic=\"%s\",group=\"%s\"} %.15g\n",
				    m[k].name, r->t.name, r->g.name, v);
			else
				fprintf(f, "%s{topic=\"%s\"} %.15g\n", m[k].name,
				    r->t.name, v);
		}
	}
}

/*
 * The rate of --watch in at most 5 columns: 0.4, 12, 9999, 12.3k.
 */
static void
rate(double v, char *buf, size_t len)
{
	if (v < 10)
		snprintf(buf, len, "%.1f", v);
	else if (v < 10000)
		snprintf(buf, len, "%.0f", v);
	else
		mq_human_count((int64_t)v, buf, len);
}

/*
 * The table for people, in 80 columns for ordinary names: the columns
 * after LAG are left out when every row shows 0 or - in them, and with
 * MQ_LAG_WATCH, DELAY and CONS make room for IN/s and OUT/s;
 * MQ_LAG_WIDE shows every column.
 */
void
mq_lag_table(FILE *f, const struct mq_lag *L, int how)
{
	enum { NCOL = 14, OPT = 5, DELAY = 8, CONS = 11, RATES = 12 };
	static const char *head[NCOL] = { "TOPIC", "GROUP", "END", "POS", "LAG",
	    "INFL", "EXP", "RETRY", "DELAY", "DEAD", "AGE", "CONS", "IN/s",
	    "OUT/s" };
	const char *h[NCOL];
	char c[NCOL][MQ_NAME_MAX + 20], al[NCOL + 1], *cells[NCOL];
	int show[NCOL], hot[NCOL], i, k, n;
	struct mq_table *tb;
	struct { char c[NCOL][32]; int hot[NCOL]; } *rows;

	rows = mq_array(NULL, L->n + 1, sizeof *rows);
	for (k = 0; k < NCOL; k++)
		show[k] = k < OPT || (k < RATES && (how & MQ_LAG_WIDE)) ||
		    (k >= RATES && (how & MQ_LAG_WATCH));
	for (i = 0; i < L->n; i++) {
		const struct mq_lag_row *r = &L->rows[i];
		char (*v)[32] = rows[i].c;

		memset(rows[i].hot, 0, sizeof rows[i].hot);
		mq_human_count(r->t.next_off - 1, v[2], 32);
		/* a topic's, with or without groups */
		rows[i].hot[2] = mq_lag_breached(L, r, MQ_LIM_SILENCE);
		if (!r->has_group) {
			for (k = 3; k < NCOL; k++)
				strcpy(v[k], "-");
			continue;
		}
		mq_human_count(r->g.pos, v[3], 32);
		mq_human_count(r->s.lag, v[4], 32);
		mq_human_count(r->s.inflight, v[5], 32);
		mq_human_count(r->s.expired, v[6], 32);
		mq_human_count(r->s.retrying, v[7], 32);
		mq_human_count(r->s.delayed, v[8], 32);
		mq_human_count(r->s.dead, v[9], 32);
		if (r->s.oldest_ts)
			mq_human_age(mq_lag_age(L, r), v[10], 32);
		else
			strcpy(v[10], "-");
		mq_human_count(r->s.consumers, v[11], 32);
		rate(r->in, v[12], 32);
		rate(r->out, v[13], 32);
		for (k = OPT; k < RATES; k++)
			if (strcmp(v[k], "0") && strcmp(v[k], "-") &&
			    (!(how & MQ_LAG_WATCH) || (k != DELAY && k != CONS)))
				show[k] = 1;
		rows[i].hot[4] = mq_lag_breached(L, r, MQ_LIM_LAG);
		rows[i].hot[6] = mq_lag_breached(L, r, MQ_LIM_EXPIRED);
		rows[i].hot[9] = r->s.dead > 0;
		rows[i].hot[10] = mq_lag_breached(L, r, MQ_LIM_AGE);
		rows[i].hot[4] |= mq_lag_breached(L, r, MQ_LIM_IDLE);
	}
	for (k = n = 0; k < NCOL; k++)
		if (show[k]) {
			h[n] = head[k];
			al[n] = k < 2 ? 'l' : 'r';
			cells[n++] = c[k];
		}
	al[n] = '\0';
	tb = mq_table_new(n, h, al);
	for (i = 0; i < L->n; i++) {
		snprintf(c[0], sizeof c[0], "%s", L->rows[i].t.name);
		snprintf(c[1], sizeof c[1], "%s%s",
		    L->rows[i].has_group ? L->rows[i].g.name : "-",
		    L->rows[i].has_group && mq_paused(&L->rows[i].t,
		    &L->rows[i].g, L->now) ? " (paused)" : "");
		for (k = 2; k < NCOL; k++)
			strcpy(c[k], rows[i].c[k]);
		for (k = n = 0; k < NCOL; k++)
			if (show[k])
				hot[n++] = rows[i].hot[k];
		mq_table_add(tb, cells, hot);
	}
	mq_table_print(f, tb, mq_want_colour(f));
	mq_table_free(tb);
	free(rows);
}

static int
cmp_topics(const void *a, const void *b)
{
	const struct mq_lag_row *x = a, *y = b;

	if (x->t.msgs != y->t.msgs)
		return x->t.msgs < y->t.msgs ? 1 : -1;
	if (x->t.bytes != y->t.bytes)
		return x->t.bytes < y->t.bytes ? 1 : -1;
	return strcmp(x->t.name, y->t.name);
}

/* One row per topic, ranked by messages then bytes; rows are rewritten. */
void
mq_lag_topics(FILE *f, struct mq_lag *L, int as_json)
{
	static const char *head[] = { "TOPIC", "MESSAGES", "BYTES", "END",
	    "GROUPS" };
	struct mq_table *tb = mq_table_new(5, head, "lrrrr");
	char c[5][MQ_NAME_MAX + 8], *cells[5] = { c[0], c[1], c[2], c[3], c[4] };
	int i, j, groups;

	/* one row per topic: the first of its L->rows, with its groups counted */
	for (i = j = 0; i < L->n; i = j) {
		for (groups = 0, j = i; j < L->n &&
		    !strcmp(L->rows[j].t.name, L->rows[i].t.name); j++)
			groups += L->rows[j].has_group;
		L->rows[i].s.consumers = groups;	/* reuse as the group count */
		if (j > i + 1)
			memmove(&L->rows[i + 1], &L->rows[j], (L->n - j) * sizeof *L->rows);
		L->n -= j - i - 1;
		j = i + 1;
	}
	qsort(L->rows, L->n, sizeof *L->rows, cmp_topics);
	for (i = 0; i < L->n; i++) {
		const struct mq_lag_row *r = &L->rows[i];

		if (as_json) {
			fprintf(f, "{\"topic\":\"%s\",\"messages\":%lld,\"bytes\":%lld,"
			    "\"end_offset\":%lld,\"groups\":%lld}\n", r->t.name,
			    (long long)r->t.msgs, (long long)r->t.bytes,
			    (long long)(r->t.next_off - 1),
			    (long long)r->s.consumers);
			continue;
		}
		snprintf(c[0], sizeof c[0], "%s", r->t.name);
		mq_human_count(r->t.msgs, c[1], 32);
		mq_human_size(r->t.bytes, c[2], 32);
		mq_human_count(r->t.next_off - 1, c[3], 32);
		snprintf(c[4], 32, "%lld", (long long)r->s.consumers);
		mq_table_add(tb, cells, NULL);
	}
	if (!as_json)
		mq_table_print(f, tb, mq_want_colour(f));
	mq_table_free(tb);
}

void
mq_lag_consumers(FILE *f, struct mq *q, const struct mq_lag *L, int as_json)
{
	static const char *head[] = { "TOPIC", "GROUP", "HOST", "PID", "SINCE",
	    "SEEN", "INFLIGHT" };
	struct mq_table *tb = mq_table_new(7, head, "lllrrrr");
	char c[7][300], *cells[7], since[40], seen[40];
	struct mq_consumer *cs;
	int i, k, n;

	for (i = 0; i < 7; i++)
		cells[i] = c[i];
	for (i = 0; i < L->n; i++) {
		if (!L->rows[i].has_group)
			continue;
		n = mq_consumers(q, L->rows[i].t.name, L->rows[i].g.name, &cs);
		for (k = 0; k < n; k++) {
			mq_rfc3339(cs[k].since, since, sizeof since);
			mq_rfc3339(cs[k].seen, seen, sizeof seen);
			if (as_json) {
				fprintf(f, "{\"topic\":\"%s\",\"group\":\"%s\","
				    "\"host\":", L->rows[i].t.name, L->rows[i].g.name);
				mq_json_str(f, (unsigned char *)cs[k].host,
				    strlen(cs[k].host));
				fprintf(f, ",\"pid\":%lld,\"since\":\"%s\","
				    "\"since_epoch\":%.3f,\"seen\":\"%s\","
				    "\"seen_epoch\":%.3f,\"in_flight\":%lld}\n",
				    (long long)cs[k].pid, since, cs[k].since / 1e3,
				    seen, cs[k].seen / 1e3, (long long)cs[k].held);
				continue;
			}
			snprintf(c[0], 300, "%s", L->rows[i].t.name);
			snprintf(c[1], 300, "%s", L->rows[i].g.name);
			snprintf(c[2], 300, "%s", cs[k].host);
			snprintf(c[3], 300, "%lld", (long long)cs[k].pid);
			mq_human_age(L->now - cs[k].since, c[4], 300);
			mq_human_age(L->now - cs[k].seen, c[5], 300);
			snprintf(c[6], 300, "%lld", (long long)cs[k].held);
			mq_table_add(tb, cells, NULL);
		}
		free(cs);
	}
	if (!as_json)
		mq_table_print(f, tb, mq_want_colour(f));
	mq_table_free(tb);
}
/* thresholds (mq-lag --max-*): exit 1 and a line per breach */

struct limit {
	int		 what;		/* MQ_LIM_* */
	char		*topic, *group;	/* NULL: any */
	int64_t		 value;
};
static const char *limit_names[] = { "lag", "age", "dead", "expired",
    "silence", "idle" };
static const char *breach_names[] = { "lag", "age", "dead", "expired",
    "silent", "idle" };

static struct limit *limits;
static int nlimits;

int
mq_lag_limits(void)
{
	return nlimits;
}

/*
 * A threshold: [[TOPIC/]GROUP=]VALUE, or [TOPIC=]VALUE for the topics'
 * MQ_LIM_SILENCE; a duration for MQ_LIM_AGE, _SILENCE and _IDLE.
 */
void
mq_lag_limit(int what, char *arg)
{
	struct limit *l;
	char *eq = strrchr(arg, '='), *slash, *v = arg;

	limits = mq_array(limits, nlimits + 1, sizeof *limits);
	l = &limits[nlimits++];
	memset(l, 0, sizeof *l);
	l->what = what;
	if (eq) {
		*eq = '\0';
		v = eq + 1;
		if (what == MQ_LIM_SILENCE)
			l->topic = (char *)mq_name_arg(arg, "topic");
		else if ((slash = strchr(arg, '/'))) {
			*slash = '\0';
			l->topic = (char *)mq_name_arg(arg, "topic");
			arg = slash + 1;
		}
		if (what != MQ_LIM_SILENCE)
			l->group = (char *)mq_name_arg(arg, "group");
	}
	if (what == MQ_LIM_AGE || what == MQ_LIM_SILENCE || what == MQ_LIM_IDLE)
		l->value = mq_duration_arg(v, limit_names[what]);
	else
		l->value = mq_num_arg(v, 0, INT64_MAX, "threshold");
}

/*
 * A threshold that names a topic or group that is not there is a typo
 * (a cron alert that could never fire): 64.  Named ones are looked for
 * among the rows shown (all of them without TOPIC and GROUP operands).
 */
void
mq_lag_limits_known(const struct mq_lag *L)
{
	const struct limit *l;
	const struct mq_lag_row *r;
	int i, k, topic, group;

	for (i = 0; i < nlimits; i++) {
		l = &limits[i];
		topic = !l->topic;
		group = !l->group;
		for (k = 0; k < L->n; k++) {
			r = &L->rows[k];
			if (l->topic && strcmp(l->topic, r->t.name))
				continue;
			topic = 1;
			if (l->group && r->has_group &&
			    !strcmp(l->group, r->g.name))
				group = 1;
		}
		if (!topic)
			mq_die(MQ_EX_USAGE, "--max-%s: %s %s", limit_names[
			    l->what], L->topic ? "not shown:" :
			    "no such topic:", l->topic);
		if (!group)
			mq_die(MQ_EX_USAGE, "--max-%s: %s %s%s%s", limit_names[
			    l->what], L->topic ? "not shown:" :
			    "no such group:", l->topic ? l->topic : "",
			    l->topic ? "/" : "", l->group);
	}
}

/*
 * Silence: since the topic's last message (or its creation).  Idle, for
 * a group with a backlog: since it last settled, since the oldest
 * message of its backlog was sent, or since it was made, the latest of
 * these, so a backlog that just began is not idle for the hours the
 * group had nothing to do.
 */
static int64_t
measure(const struct mq_lag *L, const struct mq_lag_row *r, int what)
{
	int64_t t;

	switch (what) {
	case MQ_LIM_LAG: return r->s.lag;
	case MQ_LIM_AGE: return mq_lag_age(L, r);
	case MQ_LIM_DEAD: return r->s.dead;
	case MQ_LIM_EXPIRED: return r->s.expired;
	case MQ_LIM_SILENCE:
		return L->now - (r->t.last_ts ? r->t.last_ts : r->t.created);
	default:
		if (r->s.lag <= 0)
			return 0;
		t = r->g.created;
		if (r->g.settled_ts > t)
			t = r->g.settled_ts;
		if (r->s.oldest_ts > t)
			t = r->s.oldest_ts;
		return L->now - t;
	}
}

/* Silence is the topic's: one look per topic (rows come by topic). */
static int
counts(const struct mq_lag *L, int i, int what)
{
	if (what == MQ_LIM_SILENCE)
		return i == 0 || strcmp(L->rows[i - 1].t.name, L->rows[i].t.name);
	return L->rows[i].has_group;
}

/* The most specific limit of a kind for a row, or NULL. */
static const struct limit *
limit_for(const struct mq_lag_row *r, int what)
{
	const struct limit *best = NULL;
	int i, score, top = -1;

	for (i = 0; i < nlimits; i++) {
		const struct limit *l = &limits[i];

		if (l->what != what || (l->group && strcmp(l->group, r->g.name)) ||
		    (l->topic && strcmp(l->topic, r->t.name)))
			continue;
		score = (l->group != NULL) + (l->topic != NULL);
		if (score >= top) {
			top = score;
			best = l;
		}
	}
	return best;
}

int
mq_lag_breached(const struct mq_lag *L, const struct mq_lag_row *r, int what)
{
	const struct limit *l = r->has_group || what == MQ_LIM_SILENCE ?
	    limit_for(r, what) : NULL;

	return l && measure(L, r, what) > l->value;
}

/* One line per breach, on f; returns how many. */
int
mq_lag_check(FILE *f, const struct mq_lag *L)
{
	char v[32], l[32];
	int i, w, n = 0;

	for (i = 0; i < L->n; i++) {
		for (w = MQ_LIM_LAG; w <= MQ_LIM_IDLE; w++) {
			const struct limit *lim;
			int64_t m = measure(L, &L->rows[i], w);
			int dur = w == MQ_LIM_AGE || w == MQ_LIM_SILENCE ||
			    w == MQ_LIM_IDLE;

			if (!counts(L, i, w) || !mq_lag_breached(L, &L->rows[i], w))
				continue;
			lim = limit_for(&L->rows[i], w);
			if (dur && m < 60000) {
				/* to the ms: 1.0s > 1.0s would read as no breach */
				snprintf(v, sizeof v, "%.3fs", m / 1e3);
				mq_format_duration(lim->value, l, sizeof l);
			} else if (dur) {
				mq_human_age(m, v, sizeof v);
				mq_format_duration(lim->value, l, sizeof l);
			} else {
				snprintf(v, sizeof v, "%lld",
				    (long long)measure(L, &L->rows[i], w));
				snprintf(l, sizeof l, "%lld",
				    (long long)lim->value);
			}
			if (w == MQ_LIM_SILENCE)
				fprintf(f, "%s: %s %s > %s\n", L->rows[i].t.name,
				    breach_names[w], v, l);
			else
				fprintf(f, "%s/%s: %s %s > %s\n", L->rows[i].t.name,
				    L->rows[i].g.name, breach_names[w], v, l);
			n++;
		}
	}
	return n;
}

