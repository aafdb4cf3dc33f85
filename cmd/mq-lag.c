/*
 * mq-lag: how far behind each consumer group is.  A table for people,
 * JSON lines, or Prometheus text; thresholds with exit status 1 for cron;
 * --watch redraws like top with rates in and out.
 *
 * Read-only: it opens the database read-only, reads one snapshot per
 * frame, and takes no write lock.  Its cost follows the number of topics,
 * groups and unsettled deliveries, not the number of messages: see
 * mq_group_stats in common/store.c.
 */
#include <getopt.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "mq.h"

struct row {
	struct mq_topic	 t;
	struct mq_group	 g;
	struct mq_gstats s;
	int		 has_group;
	double		 in, out;	/* --watch: messages per second */
};

struct limit {
	int		 what;		/* LAG AGE DEAD EXPIRED */
	char		*topic, *group;	/* NULL: any */
	int64_t		 value;
};
enum { LAG, AGE, DEAD, EXPIRED };
static const char *limit_names[] = { "lag", "age", "dead", "expired" };

static struct row *rows;
static int nrows;
static struct limit *limits;
static int nlimits;
static const char *only_topic, *only_group;
static int64_t now;

static void
usage(FILE *f, int status)
{
	fprintf(f, "usage: mq-lag [-q] [-d FILE] [--json | --prometheus] "
	    "[--topics | --consumers]\n"
	    "              [--max-lag [[TOPIC/]GROUP=]N] [--max-age "
	    "[[TOPIC/]GROUP=]DUR]\n"
	    "              [--max-dead [[TOPIC/]GROUP=]N] [--max-expired "
	    "[[TOPIC/]GROUP=]N]\n"
	    "              [--watch [DUR]] [TOPIC [GROUP]]\n");
	exit(status);
}

static void
add_limit(int what, char *arg)
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
		if ((slash = strchr(arg, '/'))) {
			*slash = '\0';
			l->topic = (char *)mq_name_arg(arg, "topic");
			arg = slash + 1;
		}
		l->group = (char *)mq_name_arg(arg, "group");
	}
	if (what == AGE)
		l->value = mq_duration_arg(v, "age");
	else
		l->value = mq_num_arg(v, 0, INT64_MAX, "threshold");
}

static void
add_group(const struct mq_group *g, void *arg)
{
	struct row *r;

	if (only_group && strcmp(g->name, only_group))
		return;
	rows = mq_array(rows, nrows + 1, sizeof *rows);
	r = &rows[nrows++];
	memset(r, 0, sizeof *r);
	r->t = *(const struct mq_topic *)arg;
	r->g = *g;
	r->has_group = 1;
}

static void
add_topic(const struct mq_topic *t, void *arg)
{
	int before = nrows;

	if (only_topic && strcmp(t->name, only_topic))
		return;
	mq_group_each(arg, t, add_group, (void *)t);
	if (nrows == before && !only_group) {	/* a topic with no group */
		rows = mq_array(rows, nrows + 1, sizeof *rows);
		memset(&rows[nrows], 0, sizeof *rows);
		rows[nrows++].t = *t;
	}
}

/* One consistent snapshot of every row. */
static void
collect(struct mq *q)
{
	struct mq_topic t;
	int i;

	nrows = 0;
	mq_begin_read(q);
	now = mq_now();
	if (only_topic && !mq_topic_get(q, only_topic, &t))
		mq_die(MQ_EX_NOINPUT, "no such topic: %s", only_topic);
	mq_topic_each(q, add_topic, q);
	if (only_group && nrows == 0)
		mq_die(MQ_EX_NOINPUT, "no such group: %s/%s", only_topic,
		    only_group);
	for (i = 0; i < nrows; i++)
		if (rows[i].has_group)
			mq_group_stats(q, &rows[i].t, &rows[i].g, now, &rows[i].s);
	mq_rollback(q);
}

static int64_t
age(const struct row *r)
{
	return r->s.oldest_ts ? now - r->s.oldest_ts : 0;
}

static int64_t
measure(const struct row *r, int what)
{
	switch (what) {
	case LAG: return r->s.lag;
	case AGE: return age(r);
	case DEAD: return r->s.dead;
	default: return r->s.expired;
	}
}

/* The most specific limit of a kind for a row, or NULL. */
static const struct limit *
limit_for(const struct row *r, int what)
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

static int
breached(const struct row *r, int what)
{
	const struct limit *l = r->has_group ? limit_for(r, what) : NULL;

	return l && measure(r, what) > l->value;
}

static void
table(int watch)
{
	static const char *head[] = { "TOPIC", "GROUP", "END", "POS", "LAG",
	    "INFLIGHT", "EXPIRED", "RETRY", "DELAYED", "DEAD", "OLDEST",
	    "CONSUMERS", "IN/s", "OUT/s" };
	struct mq_table *tb = mq_table_new(watch ? 14 : 12, head,
	    "llrrrrrrrrrrrr");
	char c[14][MQ_NAME_MAX + 8], *cells[14];
	int hot[14], i, k;

	for (i = 0; i < 14; i++)
		cells[i] = c[i];
	for (i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];

		memset(hot, 0, sizeof hot);
		snprintf(c[0], sizeof c[0], "%s", r->t.name);
		snprintf(c[1], sizeof c[1], "%s", r->has_group ? r->g.name : "-");
		mq_human_count(r->t.next_off - 1, c[2], 32);
		if (!r->has_group) {
			for (k = 3; k < 14; k++)
				strcpy(c[k], "-");
		} else {
			mq_human_count(r->g.pos, c[3], 32);
			mq_human_count(r->s.lag, c[4], 32);
			mq_human_count(r->s.inflight, c[5], 32);
			mq_human_count(r->s.expired, c[6], 32);
			mq_human_count(r->s.retrying, c[7], 32);
			mq_human_count(r->s.delayed, c[8], 32);
			mq_human_count(r->s.dead, c[9], 32);
			if (r->s.oldest_ts)
				mq_human_age(age(r), c[10], 32);
			else
				strcpy(c[10], "-");
			mq_human_count(r->s.consumers, c[11], 32);
			snprintf(c[12], 32, "%.1f", r->in);
			snprintf(c[13], 32, "%.1f", r->out);
			hot[4] = breached(r, LAG);
			hot[6] = breached(r, EXPIRED);
			hot[9] = r->s.dead > 0;
			hot[10] = breached(r, AGE);
		}
		mq_table_add(tb, cells, hot);
	}
	mq_table_print(stdout, tb, mq_want_colour(stdout));
	mq_table_free(tb);
}

static void
json(void)
{
	char ts[40], old[40];
	int i;

	mq_rfc3339(now, ts, sizeof ts);
	for (i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];

		printf("{\"time\":\"%s\",\"epoch\":%.3f,\"topic\":\"%s\","
		    "\"end_offset\":%lld,\"messages\":%lld,\"bytes\":%lld", ts,
		    now / 1e3, r->t.name, (long long)(r->t.next_off - 1),
		    (long long)r->t.msgs, (long long)r->t.bytes);
		if (r->has_group) {
			printf(",\"group\":\"%s\",\"position\":%lld,\"lag\":%lld,"
			    "\"in_flight\":%lld,\"expired\":%lld,"
			    "\"retrying\":%lld,\"delayed\":%lld,\"dead\":%lld,"
			    "\"consumers\":%lld,\"settled_total\":%lld,"
			    "\"delivered_total\":%lld,\"failed_total\":%lld,"
			    "\"dead_lettered_total\":%lld",
			    r->g.name, (long long)r->g.pos, (long long)r->s.lag,
			    (long long)r->s.inflight, (long long)r->s.expired,
			    (long long)r->s.retrying, (long long)r->s.delayed,
			    (long long)r->s.dead, (long long)r->s.consumers,
			    (long long)r->g.settled, (long long)r->g.delivered,
			    (long long)r->g.failed, (long long)r->g.deadlettered);
			if (r->s.oldest_ts) {
				mq_rfc3339(r->s.oldest_ts, old, sizeof old);
				printf(",\"oldest_age_s\":%.3f,\"oldest_time\":"
				    "\"%s\",\"oldest_epoch\":%.3f", age(r) / 1e3,
				    old, r->s.oldest_ts / 1e3);
			} else
				printf(",\"oldest_age_s\":0,\"oldest_time\":null,"
				    "\"oldest_epoch\":null");
		} else
			printf(",\"group\":null");
		printf("}\n");
	}
}

static void
prometheus(void)
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
	};
	size_t k;
	int i;

	for (k = 0; k < sizeof m / sizeof *m; k++) {
		printf("# HELP %s %s\n# TYPE %s %s\n", m[k].name, m[k].help,
		    m[k].name, m[k].type);
		for (i = 0; i < nrows; i++) {
			const struct row *r = &rows[i];
			double v;

			if (m[k].group && !r->has_group)
				continue;
			if (!m[k].group && i > 0 && !strcmp(rows[i - 1].t.name,
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
			case 10: v = age(r) / 1e3; break;
			case 11: v = r->s.consumers; break;
			case 12: v = r->g.settled; break;
			case 13: v = r->g.delivered; break;
			case 14: v = r->g.failed; break;
			default: v = r->g.deadlettered; break;
			}
			if (m[k].group)
				printf("%s{topic=\"%s\",group=\"%s\"} %.15g\n",
				    m[k].name, r->t.name, r->g.name, v);
			else
				printf("%s{topic=\"%s\"} %.15g\n", m[k].name,
				    r->t.name, v);
		}
	}
}

static int
cmp_topics(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	if (x->t.msgs != y->t.msgs)
		return x->t.msgs < y->t.msgs ? 1 : -1;
	if (x->t.bytes != y->t.bytes)
		return x->t.bytes < y->t.bytes ? 1 : -1;
	return strcmp(x->t.name, y->t.name);
}

static void
topics(int as_json)
{
	static const char *head[] = { "TOPIC", "MESSAGES", "BYTES", "END",
	    "GROUPS" };
	struct mq_table *tb = mq_table_new(5, head, "lrrrr");
	char c[5][MQ_NAME_MAX + 8], *cells[5] = { c[0], c[1], c[2], c[3], c[4] };
	int i, j, groups;

	/* one row per topic: the first of its rows, with its groups counted */
	for (i = j = 0; i < nrows; i = j) {
		for (groups = 0, j = i; j < nrows &&
		    !strcmp(rows[j].t.name, rows[i].t.name); j++)
			groups += rows[j].has_group;
		rows[i].s.consumers = groups;	/* reuse as the group count */
		if (j > i + 1)
			memmove(&rows[i + 1], &rows[j], (nrows - j) * sizeof *rows);
		nrows -= j - i - 1;
		j = i + 1;
	}
	qsort(rows, nrows, sizeof *rows, cmp_topics);
	for (i = 0; i < nrows; i++) {
		const struct row *r = &rows[i];

		if (as_json) {
			printf("{\"topic\":\"%s\",\"messages\":%lld,\"bytes\":%lld,"
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
		mq_table_print(stdout, tb, mq_want_colour(stdout));
	mq_table_free(tb);
}

static void
consumers(struct mq *q, int as_json)
{
	static const char *head[] = { "TOPIC", "GROUP", "HOST", "PID", "SINCE",
	    "SEEN", "INFLIGHT" };
	struct mq_table *tb = mq_table_new(7, head, "lllrrrr");
	char c[7][300], *cells[7], since[40], seen[40];
	struct mq_consumer *cs;
	int64_t *held;
	int i, k, n;

	for (i = 0; i < 7; i++)
		cells[i] = c[i];
	mq_begin_read(q);
	for (i = 0; i < nrows; i++) {
		if (!rows[i].has_group)
			continue;
		n = mq_store_consumers_of(q, rows[i].g.id, &cs, &held);
		for (k = 0; k < n; k++) {
			mq_rfc3339(cs[k].since, since, sizeof since);
			mq_rfc3339(cs[k].seen, seen, sizeof seen);
			if (as_json) {
				printf("{\"topic\":\"%s\",\"group\":\"%s\","
				    "\"host\":", rows[i].t.name, rows[i].g.name);
				mq_json_str(stdout, (unsigned char *)cs[k].host,
				    strlen(cs[k].host));
				printf(",\"pid\":%lld,\"since\":\"%s\","
				    "\"since_epoch\":%.3f,\"seen\":\"%s\","
				    "\"seen_epoch\":%.3f,\"in_flight\":%lld}\n",
				    (long long)cs[k].pid, since, cs[k].since / 1e3,
				    seen, cs[k].seen / 1e3, (long long)held[k]);
				continue;
			}
			snprintf(c[0], 300, "%s", rows[i].t.name);
			snprintf(c[1], 300, "%s", rows[i].g.name);
			snprintf(c[2], 300, "%s", cs[k].host);
			snprintf(c[3], 300, "%lld", (long long)cs[k].pid);
			mq_human_age(now - cs[k].since, c[4], 300);
			mq_human_age(now - cs[k].seen, c[5], 300);
			snprintf(c[6], 300, "%lld", (long long)held[k]);
			mq_table_add(tb, cells, NULL);
		}
		free(cs);
		free(held);
	}
	mq_rollback(q);
	if (!as_json)
		mq_table_print(stdout, tb, mq_want_colour(stdout));
	mq_table_free(tb);
}

/* One line per breach, on f; returns how many. */
static int
check(FILE *f)
{
	char v[32], l[32];
	int i, w, n = 0;

	for (i = 0; i < nrows; i++) {
		for (w = LAG; w <= EXPIRED; w++) {
			const struct limit *lim;

			if (!rows[i].has_group || !breached(&rows[i], w))
				continue;
			lim = limit_for(&rows[i], w);
			if (w == AGE && age(&rows[i]) < 60000) {
				/* to the ms: 1.0s > 1.0s would read as no breach */
				snprintf(v, sizeof v, "%.3fs", age(&rows[i]) / 1e3);
				mq_format_duration(lim->value, l, sizeof l);
			} else if (w == AGE) {
				mq_human_age(age(&rows[i]), v, sizeof v);
				mq_format_duration(lim->value, l, sizeof l);
			} else {
				snprintf(v, sizeof v, "%lld",
				    (long long)measure(&rows[i], w));
				snprintf(l, sizeof l, "%lld",
				    (long long)lim->value);
			}
			fprintf(f, "%s/%s: %s %s > %s\n", rows[i].t.name,
			    rows[i].g.name, limit_names[w], v, l);
			n++;
		}
	}
	return n;
}

static struct termios saved_tty;
static int tty_raw;

static void
restore_tty(void)
{
	if (tty_raw) {
		tcsetattr(0, TCSANOW, &saved_tty);
		fputs("\033[?25h\033[?1049l", stdout);	/* cursor, main screen */
		fflush(stdout);
		tty_raw = 0;
	}
}

/* Redraws every `every` ms with rates since the last frame; q quits. */
static void
watch(struct mq *q, int64_t every)
{
	struct termios raw;
	struct pollfd pfd[2];
	struct row *prev = NULL;
	int nprev = 0, i, k;
	int64_t then = 0;
	char c, ts[40];

	if (isatty(0) && tcgetattr(0, &saved_tty) == 0) {
		raw = saved_tty;
		raw.c_lflag &= ~(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		tcsetattr(0, TCSANOW, &raw);
		tty_raw = 1;
		atexit(restore_tty);
		fputs("\033[?1049h\033[?25l", stdout);
	}
	while (!mq_stop) {
		collect(q);
		for (i = 0; i < nrows && then; i++)
			for (k = 0; k < nprev; k++) {
				double dt = (now - then) / 1e3;

				if (strcmp(rows[i].t.name, prev[k].t.name) ||
				    strcmp(rows[i].g.name, prev[k].g.name) || dt <= 0)
					continue;
				rows[i].in = (rows[i].t.next_off -
				    prev[k].t.next_off) / dt;
				rows[i].out = (rows[i].g.settled -
				    prev[k].g.settled) / dt;
			}
		mq_rfc3339(now, ts, sizeof ts);
		printf("\033[H\033[2J%s  %s  (every %llds; q quits)\n\n",
		    mq_path(q), ts, (long long)(every / 1000));
		table(1);
		fflush(stdout);
		free(prev);
		prev = mq_array(NULL, nrows, sizeof *prev);
		memcpy(prev, rows, nrows * sizeof *rows);
		nprev = nrows;
		then = now;
		pfd[0].fd = tty_raw ? 0 : -1;
		pfd[0].events = POLLIN;
		pfd[1].fd = mq_stop_fd();
		pfd[1].events = POLLIN;
		if (poll(pfd, 2, (int)every) > 0 && (pfd[0].revents & POLLIN) &&
		    read(0, &c, 1) == 1 && (c == 'q' || c == 'Q'))
			break;
	}
	free(prev);
	restore_tty();
}

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'J' },
		{ "prometheus", no_argument, NULL, 'P' },
		{ "topics", no_argument, NULL, 'T' },
		{ "consumers", no_argument, NULL, 'C' },
		{ "max-lag", required_argument, NULL, 'l' },
		{ "max-age", required_argument, NULL, 'a' },
		{ "max-dead", required_argument, NULL, 'x' },
		{ "max-expired", required_argument, NULL, 'e' },
		{ "watch", optional_argument, NULL, 'w' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dbpath = NULL;
	struct mq *q;
	int64_t every = -1, d;
	int c, mode = 0, view = 0, quiet = 0, breaches = 0;

	mq_setprog(argv[0]);
	while ((c = getopt_long(argc, argv, "d:hqV", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dbpath = optarg; break;
		case 'J': mode = 'J'; break;
		case 'P': mode = 'P'; break;
		case 'T': view = 'T'; break;
		case 'C': view = 'C'; break;
		case 'l': add_limit(LAG, optarg); break;
		case 'a': add_limit(AGE, optarg); break;
		case 'x': add_limit(DEAD, optarg); break;
		case 'e': add_limit(EXPIRED, optarg); break;
		case 'w':
			every = 2000;
			if (optarg)
				every = mq_duration_arg(optarg, "interval");
			else if (optind < argc &&
			    mq_parse_duration(argv[optind], &d) == 0)
				every = d, optind++;	/* --watch 5s */
			if (every < 100)
				mq_die(MQ_EX_USAGE, "invalid interval: at least "
				    "100ms");
			break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout, 0); break;
		case 'V': mq_version(); break;
		default: usage(stderr, MQ_EX_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 2)
		usage(stderr, MQ_EX_USAGE);
	if (argc > 0)
		only_topic = mq_name_arg(argv[0], "topic");
	if (argc > 1)
		only_group = mq_name_arg(argv[1], "group");
	if (every >= 0 && (mode || view))
		mq_die(MQ_EX_USAGE, "--watch draws a table: no --json, "
		    "--prometheus, --topics or --consumers");
	if (nlimits && view)
		mq_die(MQ_EX_USAGE, "thresholds apply to groups: not with "
		    "--topics or --consumers");
	if (mode == 'P' && view)
		mq_die(MQ_EX_USAGE, "--prometheus goes without --topics and "
		    "--consumers");

	q = mq_open(dbpath, MQ_READ);
	mq_catch_stop();
	if (every >= 0) {
		watch(q, every);
		mq_close(q);
		return mq_finish();
	}
	collect(q);
	if (nlimits)
		breaches = 0;
	if (!quiet) {
		if (view == 'T')
			topics(mode == 'J');
		else if (view == 'C')
			consumers(q, mode == 'J');
		else if (mode == 'J')
			json();
		else if (mode == 'P')
			prometheus();
		else
			table(0);
	}
	/* machine formats stay parseable: breaches go to stderr then */
	if (nlimits)
		breaches = check(mode && !quiet ? stderr : stdout);
	mq_close(q);
	c = mq_finish();
	return c ? c : breaches ? MQ_EX_NONE : 0;
}
