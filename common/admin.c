/*
 * admin.c: the mq-topic commands that take options of their own: show,
 * group (a group's settings), cancel and delay (one message, by offset,
 * key or dedup id).  Options are checked before the database is opened
 * for writing.
 */
#include <getopt.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mq.h"

/* "" when not paused, else "for ever" or "until TIME". */
static const char *
paused(int64_t until)
{
	static char buf[64];

	if (until <= mq_now())
		return "";
	if (until == INT64_MAX)
		return "for ever";
	memcpy(buf, "until ", 6);
	mq_rfc3339(until, buf + 6, sizeof buf - 6);
	return buf;
}

static void
print_group(const struct mq_lag_row *r)
{
	const struct mq_group *g = &r->g;
	char lease[32], tmo[40] = "", win[32], idem[80] = "", rate[64] = "";

	mq_format_duration(g->lease, lease, sizeof lease);
	if (g->timeout) {
		memcpy(tmo, "; timeout ", 11);
		mq_format_duration(g->timeout, tmo + 10, sizeof tmo - 10);
	}
	if (*g->idem) {
		mq_format_duration(g->idem_window, win, sizeof win);
		snprintf(idem, sizeof idem, "; idempotent-by %s for %s",
		    g->idem, win);
	}
	if (g->rate_n) {
		mq_format_duration(g->rate_ms, win, sizeof win);
		snprintf(rate, sizeof rate, "; rate %lld/%s",
		    (long long)g->rate_n, win);
	}
	if (g->per_key)
		snprintf(rate + strlen(rate), sizeof rate - strlen(rate),
		    "; per-key %d", g->per_key);
	printf("group %s: position %lld, lag %lld, in-flight %lld, "
	    "retrying %lld, dead %lld, cancelled %lld, lapsed %lld, "
	    "duplicates %lld, consumers %lld; "
	    "lease %s, max-attempts %d, %s, backoff %s%s%s%s%s%s\n", g->name,
	    (long long)g->pos, (long long)r->s.lag,
	    (long long)(r->s.inflight + r->s.expired), (long long)r->s.retrying,
	    (long long)r->s.dead, (long long)g->cancelled, (long long)g->lapsed,
	    (long long)g->duplicates, (long long)r->s.consumers, lease,
	    g->max_attempts, g->ordered ? "ordered" : "unordered", g->backoff,
	    *paused(g->paused_until) ? "; paused " : "",
	    paused(g->paused_until), tmo, idem, rate);
}

/* One snapshot of a topic (and one group of it, or all). */
static void
snapshot(struct mq *q, const char *topic, const char *group, struct mq_lag *L)
{
	memset(L, 0, sizeof *L);
	L->topic = topic;
	L->group = group;
	mq_check(mq_snapshot(q, L), topic, group);
}

void
mq_topic_show(struct mq *q, const char *name)
{
	struct mq_lag L;
	const struct mq_topic *t;
	char when[40], buf[32];
	int i;

	snapshot(q, name, NULL, &L);
	t = &L.rows[0].t;
	mq_rfc3339(t->created, when, sizeof when);
	printf("topic %s\ncreated %s\nmessages %lld\nbytes %lld\n"
	    "next-offset %lld\n", t->name, when, (long long)t->msgs,
	    (long long)t->bytes, (long long)t->next_off);
	if (t->retention < 0)
		printf("retention none\n");
	else {
		mq_format_duration(t->retention, buf, sizeof buf);
		printf("retention %s\n", buf);
	}
	mq_format_duration(t->dedup_window, buf, sizeof buf);
	printf("dedup-window %s\nmax-size %lld\n", buf, (long long)t->max_size);
	if (t->ttl) {
		mq_format_duration(t->ttl, buf, sizeof buf);
		printf("ttl %s\n", buf);
	}
	if (*paused(t->paused_until))
		printf("paused %s\n", paused(t->paused_until));
	for (i = 0; i < L.n; i++)
		if (L.rows[i].has_group)
			print_group(&L.rows[i]);
	free(L.rows);
}

struct mq *
mq_topic_group(const char *db, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "lease", required_argument, NULL, 'l' },
		{ "max-attempts", required_argument, NULL, 'm' },
		{ "backoff", required_argument, NULL, 'b' },
		{ "ordered", no_argument, NULL, 'o' },
		{ "unordered", no_argument, NULL, 'u' },
		{ "from", required_argument, NULL, 'f' },
		{ "pause", required_argument, NULL, 'p' },
		{ "resume", no_argument, NULL, 'r' },
		{ "timeout", required_argument, NULL, 't' },
		{ "idempotent-by", required_argument, NULL, 'i' },
		{ "idempotent-window", required_argument, NULL, 'w' },
		{ "rate", required_argument, NULL, 'R' },
		{ "per-key", required_argument, NULL, 'K' },
		{ NULL, 0, NULL, 0 },
	};
	struct mq_group_conf gc = { MQ_KEEP, 0, -1, NULL, 0, MQ_KEEP, MQ_KEEP,
	    NULL, MQ_KEEP, MQ_KEEP, MQ_KEEP, -1 };
	struct mq_group g;
	struct mq_lag L;
	struct mq *q;
	int c;

	optind = 0;	/* GNU getopt: start over on the subcommand */
	argv[0] = (char *)mq_prog;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			gc.lease = mq_duration_arg(optarg, "lease");
			if (gc.lease < 1)
				mq_usage_err("invalid lease: must be "
				    "above zero");
			break;
		case 'm': gc.max_attempts = (int)mq_num_arg(optarg, 1, 1000000,
			      "max attempts");
			  break;
		case 'b':
			if (mq_parse_backoff(optarg, NULL, NULL) < 0 ||
			    strlen(optarg) >= sizeof g.backoff)
				mq_usage_err("invalid backoff '%s': want "
				    "durations such as '10s 1m 5m'", optarg);
			gc.backoff = optarg;
			break;
		case 'p': gc.paused_until = mq_pause_arg(optarg); break;
		case 'r': gc.paused_until = 0; break;
		case 't': gc.timeout = strcmp(optarg, "none") ?	/* 0: none */
			      mq_duration_arg(optarg, "timeout") : 0;
			  break;
		case 'i': gc.idem = mq_idem_arg(optarg); break;
		case 'w':
			gc.idem_window = mq_duration_arg(optarg,
			    "idempotent window");
			if (gc.idem_window < 1)
				mq_usage_err("invalid idempotent window: must "
				    "be above zero");
			break;
		case 'R': mq_rate_arg(optarg, &gc.rate_n, &gc.rate_ms); break;
		case 'K': gc.per_key = strcmp(optarg, "none") ? (int)mq_num_arg(
			      optarg, 0, 1000000, "per-key limit") : 0;
			  break;
		case 'o': gc.ordered = 1; break;
		case 'u': gc.ordered = 0; break;
		case 'f':
			if (!strcmp(optarg, "latest"))
				gc.latest = 1;
			else if (strcmp(optarg, "earliest"))
				mq_usage_err("invalid --from '%s': want "
				    "earliest or latest", optarg);
			break;
		default: mq_usage();
		}
	}
	if (argc - optind != 2)
		mq_usage_err("group takes TOPIC GROUP");
	mq_name_arg(argv[optind], "topic");
	mq_name_arg(argv[optind + 1], "group");
	q = mq_open(db, MQ_WRITE);	/* once the options are good */
	mq_group_conf(q, argv[optind], argv[optind + 1], &gc, &g);
	snapshot(q, argv[optind], argv[optind + 1], &L);
	print_group(&L.rows[0]);
	free(L.rows);
	return q;
}

/* Who did it, for the history: "by USER". */
static const char *
by_whom(void)
{
	static char buf[64];
	struct passwd *pw = getpwuid(geteuid());

	if (pw)
		snprintf(buf, sizeof buf, "by %s", pw->pw_name);
	else
		snprintf(buf, sizeof buf, "by uid %ld", (long)geteuid());
	return buf;
}

/* The result lines; returns how many acted, or -1 for a refusal. */
static int
report(const struct mq_mark *m, const struct mq_marked *r, int n)
{
	static const char *const verb[2][2] = {
		{ "cancelled", "would cancel" },
		{ "rescheduled", "would reschedule" },
	};
	char when[40] = "";
	int i, acted = 0, refused = 0, first = -1;

	if (m->op == MQ_DELAY)
		mq_rfc3339(m->due, when, sizeof when);
	for (i = 0; i < n; i++)
		if (r[i].act == MQ_M_REFUSE && !refused++)
			first = i;
	if (refused) {
		r += first;
		mq_warn("%s/%s: %lld is %s%s: nothing %s%s",
		    m->topic, r->group, (long long)r->off,
		    r->state == MQ_DEAD ? "a dead letter" : "in flight",
		    refused > 1 ? " (and more)" : "",
		    m->op == MQ_CANCEL ? "cancelled" : "rescheduled",
		    r->state == MQ_DEAD ? " (redrive it with mq-replay --dead)" :
		    " (use --force)");
		return -1;
	}
	for (i = 0; i < n; i++) {
		if (r[i].act == MQ_M_NONE)
			continue;
		acted++;
		printf("%s/%s: %s %lld%s%s\n", m->topic, r[i].group,
		    verb[m->op == MQ_DELAY][!!m->dry], (long long)r[i].off,
		    *when ? " to " : "", when);
	}
	return acted;
}

struct mq *
mq_topic_mark(const char *db, int op, int force, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "group", required_argument, NULL, 'g' },
		{ "key", required_argument, NULL, 'k' },
		{ "dedup", required_argument, NULL, 'i' },
		{ "at", required_argument, NULL, 'a' },
		{ "delay", required_argument, NULL, 'D' },
		{ "force", no_argument, NULL, 'f' },
		{ "dry-run", no_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 },
	};
	struct mq_mark m = { 0 };
	struct mq_marked *r;
	struct mq *q;
	int64_t *offs;
	int c, i, n, when = 0;

	m.op = op;
	m.force = force;
	m.reason = by_whom();
	optind = 0;
	argv[0] = (char *)mq_prog;
	while ((c = getopt_long(argc, argv, "fg:k:", opts, NULL)) != -1) {
		switch (c) {
		case 'g': m.group = mq_name_arg(optarg, "group"); break;
		case 'k': m.key = mq_key_arg(optarg, "key"); break;
		case 'i': m.dedup = mq_key_arg(optarg, "dedup id"); break;
		case 'f': m.force = 1; break;
		case 'n': m.dry = 1; break;
		case 'a':
		case 'D':
			if (op != MQ_DELAY)
				mq_usage_err("cancel takes no --%s", c == 'a' ?
				    "at" : "delay");
			m.due = c == 'a' ? mq_time_arg(optarg, "time") :
			    mq_now() + mq_duration_arg(optarg, "delay");
			when++;
			break;
		default: mq_usage();
		}
	}
	if (op == MQ_DELAY && when != 1)
		mq_usage_err("delay takes one of --at TIME or --delay DUR");
	if (argc - optind < 1)
		mq_usage_err("%s needs TOPIC", argv[0]);
	m.topic = mq_name_arg(argv[optind++], "topic");
	if ((m.key != NULL) + (m.dedup != NULL) + (optind < argc) != 1)
		mq_usage_err("%s takes OFFSET..., -k KEY or --dedup ID",
		    op == MQ_CANCEL ? "cancel" : "delay");
	offs = mq_array(NULL, argc - optind + 1, sizeof *offs);
	for (i = optind; i < argc; i++)
		offs[m.noffs++] = mq_num_arg(argv[i], 1, INT64_MAX, "offset");
	m.offs = offs;
	q = mq_open(db, m.dry ? MQ_READ : MQ_UPDATE);
	n = mq_mark(q, &m, &r);
	if (n == MQ_E_NOMSG && (m.key || m.dedup))
		mq_die(MQ_EX_NOINPUT, "no message with %s '%s' in %s",
		    m.key ? "key" : "dedup id", m.key ? m.key : m.dedup,
		    m.topic);
	if (n == MQ_E_NOMSG)
		mq_die(MQ_EX_NOINPUT, "no message at offset %lld of %s",
		    (long long)r[0].off, m.topic);
	mq_check(n, m.topic, m.group);
	if (n == 0)
		mq_die(MQ_EX_NONE, "%s has no groups: nothing to %s", m.topic,
		    op == MQ_CANCEL ? "cancel" : "reschedule");
	if ((c = report(&m, r, n)) == 0)
		mq_warn("nothing to %s: settled already in %s%s",
		    op == MQ_CANCEL ? "cancel" : "reschedule",
		    m.group ? "group " : "every group", m.group ? m.group : "");
	free(r);
	free(offs);
	if (c <= 0) {
		mq_close(q);
		exit(MQ_EX_NONE);
	}
	return q;
}
