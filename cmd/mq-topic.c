/*
 * mq-topic: administer topics and consumer groups.
 *
 *   create TOPIC [key=value ...]   list   show TOPIC
 *   set TOPIC key=value ...        delete [--force] TOPIC
 *   group TOPIC GROUP [options]    group-delete [--force] TOPIC GROUP
 *
 * Every change is one transaction; settings are checked before the
 * database is opened for writing.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <libutil.h>

#include "mq.h"

static const char *dbpath;
static int force;

static void
usage(FILE *f, int status)
{
	fprintf(f, "usage: mq-topic [-d FILE] create TOPIC [key=value ...]\n"
	    "       mq-topic [-d FILE] list\n"
	    "       mq-topic [-d FILE] show TOPIC\n"
	    "       mq-topic [-d FILE] set TOPIC key=value ...\n"
	    "       mq-topic [-d FILE] delete [--force] TOPIC\n"
	    "       mq-topic [-d FILE] group TOPIC GROUP [--lease DUR] "
	    "[--max-attempts N]\n"
	    "                [--backoff LIST] [--ordered | --unordered] "
	    "[--from earliest|latest]\n"
	    "       mq-topic [-d FILE] group-delete [--force] TOPIC GROUP\n"
	    "keys: retention=DUR|none dedup-window=DUR max-size=BYTES\n");
	exit(status);
}

/* Applies key=value settings to t; dies 64 on a bad one. */
static void
settings(struct mq_topic *t, int argc, char **argv)
{
	uint64_t n;
	char key[32], *v;
	int i;

	for (i = 0; i < argc; i++) {
		if (!(v = strchr(argv[i], '=')))
			mq_die(MQ_EX_USAGE, "invalid setting '%s': want "
			    "key=value", argv[i]);
		snprintf(key, sizeof key, "%.*s", (int)(v - argv[i]), argv[i]);
		v++;
		if (!strcmp(key, "retention")) {
			t->retention = !strcmp(v, "none") ? -1 :
			    mq_duration_arg(v, "retention");
		} else if (!strcmp(key, "dedup-window")) {
			t->dedup_window = mq_duration_arg(v, "dedup window");
		} else if (!strcmp(key, "max-size")) {
			if (expand_number(v, &n) < 0 || n < 1 ||
			    n > MQ_SIZE_LIMIT)
				mq_die(MQ_EX_USAGE, "invalid max-size '%s': want "
				    "1 to %d bytes (k, m suffixes work)", v,
				    MQ_SIZE_LIMIT);
			t->max_size = (int64_t)n;
		} else {
			mq_die(MQ_EX_USAGE, "unknown setting '%s': want "
			    "retention, dedup-window or max-size", key);
		}
	}
}

static void
need_topic(struct mq *q, const char *name, struct mq_topic *t)
{
	if (!mq_topic_get(q, name, t))
		mq_die(MQ_EX_NOINPUT, "no such topic: %s", name);
}

static void
print_group(const struct mq_group *g, void *arg)
{
	struct mq *q = ((void **)arg)[0];
	const struct mq_topic *t = ((void **)arg)[1];
	struct mq_gstats st;
	char lease[32];

	mq_group_stats(q, t, g, mq_now(), &st);
	mq_format_duration(g->lease, lease, sizeof lease);
	printf("group %s: position %lld, lag %lld, in-flight %lld, "
	    "retrying %lld, dead %lld, consumers %lld; lease %s, "
	    "max-attempts %d, %s, backoff %s\n", g->name,
	    (long long)g->pos, (long long)st.lag,
	    (long long)(st.inflight + st.expired), (long long)st.retrying,
	    (long long)st.dead, (long long)st.consumers, lease,
	    g->max_attempts, g->ordered ? "ordered" : "unordered", g->backoff);
}

static void
show(struct mq *q, const char *name)
{
	struct mq_topic t;
	char when[40], buf[32];
	void *arg[2];

	mq_begin_read(q);
	need_topic(q, name, &t);
	mq_rfc3339(t.created, when, sizeof when);
	printf("topic %s\ncreated %s\nmessages %lld\nbytes %lld\n"
	    "next-offset %lld\n", t.name, when, (long long)t.msgs,
	    (long long)t.bytes, (long long)t.next_off);
	if (t.retention < 0)
		printf("retention none\n");
	else {
		mq_format_duration(t.retention, buf, sizeof buf);
		printf("retention %s\n", buf);
	}
	mq_format_duration(t.dedup_window, buf, sizeof buf);
	printf("dedup-window %s\nmax-size %lld\n", buf, (long long)t.max_size);
	arg[0] = q;
	arg[1] = &t;
	mq_group_each(q, &t, print_group, arg);
	mq_rollback(q);
}

static void
print_name(const struct mq_topic *t, void *arg)
{
	(void)arg;
	printf("%s\n", t->name);
}

static void
lost(struct mq *q, const struct mq_topic *t, const struct mq_group *only,
    const char *what)
{
	struct mq_gstats st;
	struct mq_group g;

	if (!only || force)
		return;
	g = *only;
	mq_group_stats(q, t, &g, mq_now(), &st);
	if (st.lag + st.delayed + st.dead > 0) {
		mq_rollback(q);
		mq_die(MQ_EX_NONE, "not deleting %s: group %s has %lld "
		    "unsettled messages (use --force)", what, g.name,
		    (long long)(st.lag + st.delayed + st.dead));
	}
}

static void
check_group(const struct mq_group *g, void *arg)
{
	struct mq *q = ((void **)arg)[0];
	const struct mq_topic *t = ((void **)arg)[1];

	lost(q, t, g, t->name);
}

static int
group(struct mq *q, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "lease", required_argument, NULL, 'l' },
		{ "max-attempts", required_argument, NULL, 'm' },
		{ "backoff", required_argument, NULL, 'b' },
		{ "ordered", no_argument, NULL, 'o' },
		{ "unordered", no_argument, NULL, 'u' },
		{ "from", required_argument, NULL, 'f' },
		{ NULL, 0, NULL, 0 },
	};
	struct mq_topic t;
	struct mq_group g;
	int64_t lease = -1;
	const char *backoff = NULL;
	int c, maxatt = -1, ordered = -1, latest = 0;
	void *arg[2];

	optind = 0;	/* GNU getopt: start over on the subcommand */
	argv[0] = (char *)"mq-topic group";
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			lease = mq_duration_arg(optarg, "lease");
			if (lease < 1)
				mq_die(MQ_EX_USAGE, "invalid lease: must be "
				    "above zero");
			break;
		case 'm': maxatt = (int)mq_num_arg(optarg, 1, 1000000,
			      "max attempts");
			  break;
		case 'b':
			if (mq_parse_backoff(optarg, NULL, NULL) < 0 ||
			    strlen(optarg) >= sizeof g.backoff)
				mq_die(MQ_EX_USAGE, "invalid backoff '%s': want "
				    "durations such as '10s 1m 5m'", optarg);
			backoff = optarg;
			break;
		case 'o': ordered = 1; break;
		case 'u': ordered = 0; break;
		case 'f':
			if (!strcmp(optarg, "latest"))
				latest = 1;
			else if (strcmp(optarg, "earliest"))
				mq_die(MQ_EX_USAGE, "invalid --from '%s': want "
				    "earliest or latest", optarg);
			break;
		default: usage(stderr, MQ_EX_USAGE);
		}
	}
	if (argc - optind != 2)
		usage(stderr, MQ_EX_USAGE);
	mq_name_arg(argv[optind], "topic");
	mq_name_arg(argv[optind + 1], "group");
	mq_begin(q);
	mq_topic_ensure(q, argv[optind], &t);
	if (!mq_group_get(q, &t, argv[optind + 1], &g))
		mq_group_create(q, &t, argv[optind + 1], latest, &g);
	if (lease >= 0)
		g.lease = lease;
	if (maxatt >= 0)
		g.max_attempts = maxatt;
	if (backoff)
		snprintf(g.backoff, sizeof g.backoff, "%s", backoff);
	if (ordered >= 0)
		g.ordered = ordered;
	mq_group_save(q, &g);
	mq_commit(q);
	arg[0] = q;
	arg[1] = &t;
	print_group(&g, arg);
	return 0;
}

int
main(int argc, char *argv[])
{
	static const struct option opts[] = {
		{ "db", required_argument, NULL, 'd' },
		{ "force", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct mq_topic t;
	struct mq_group g;
	struct mq *q;
	const char *cmd;
	void *arg[2];
	int c, status = 0;

	mq_setprog(argv[0]);
	while ((c = getopt_long(argc, argv, "+d:fhV", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dbpath = optarg; break;
		case 'f': force = 1; break;
		case 'h': usage(stdout, 0); break;
		case 'V': mq_version(); break;
		default: usage(stderr, MQ_EX_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		usage(stderr, MQ_EX_USAGE);
	cmd = argv[0];
	/* "delete --force TOPIC" reads as well as "--force delete TOPIC" */
	if (!strcmp(cmd, "delete") || !strcmp(cmd, "group-delete")) {
		int i, j;

		for (i = j = 1; i < argc; i++) {
			if (!strcmp(argv[i], "--force") || !strcmp(argv[i], "-f"))
				force = 1;
			else
				argv[j++] = argv[i];
		}
		argc = j;
	}

	if (!strcmp(cmd, "list")) {
		if (argc != 1)
			usage(stderr, MQ_EX_USAGE);
		q = mq_open(dbpath, MQ_READ);
		mq_topic_each(q, print_name, NULL);
	} else if (!strcmp(cmd, "show")) {
		if (argc != 2)
			usage(stderr, MQ_EX_USAGE);
		q = mq_open(dbpath, MQ_READ);
		show(q, mq_name_arg(argv[1], "topic"));
	} else if (!strcmp(cmd, "create") || !strcmp(cmd, "set")) {
		if (argc < 2 || (!strcmp(cmd, "set") && argc < 3))
			usage(stderr, MQ_EX_USAGE);
		mq_name_arg(argv[1], "topic");
		memset(&t, 0, sizeof t);
		t.retention = -2;	/* unset */
		t.dedup_window = t.max_size = -2;
		settings(&t, argc - 2, argv + 2);	/* check before opening */
		q = mq_open(dbpath, !strcmp(cmd, "set") ? MQ_UPDATE : MQ_WRITE);
		mq_begin(q);
		if (!strcmp(cmd, "create")) {
			if (mq_topic_get(q, argv[1], &t)) {
				mq_rollback(q);
				mq_die(MQ_EX_NONE, "topic %s exists", argv[1]);
			}
			mq_topic_ensure(q, argv[1], &t);
		} else
			need_topic(q, argv[1], &t);
		settings(&t, argc - 2, argv + 2);
		mq_topic_set(q, &t);
		mq_commit(q);
	} else if (!strcmp(cmd, "delete")) {
		if (argc != 2)
			usage(stderr, MQ_EX_USAGE);
		mq_name_arg(argv[1], "topic");
		q = mq_open(dbpath, MQ_UPDATE);
		mq_begin(q);
		need_topic(q, argv[1], &t);
		arg[0] = q;
		arg[1] = &t;
		mq_group_each(q, &t, check_group, arg);
		mq_topic_delete(q, &t);
		mq_commit(q);
	} else if (!strcmp(cmd, "group")) {
		q = mq_open(dbpath, MQ_WRITE);
		status = group(q, argc, argv);
	} else if (!strcmp(cmd, "group-delete")) {
		if (argc != 3)
			usage(stderr, MQ_EX_USAGE);
		mq_name_arg(argv[1], "topic");
		mq_name_arg(argv[2], "group");
		q = mq_open(dbpath, MQ_UPDATE);
		mq_begin(q);
		need_topic(q, argv[1], &t);
		if (!mq_group_get(q, &t, argv[2], &g))
			mq_die(MQ_EX_NOINPUT, "no such group: %s/%s", argv[1],
			    argv[2]);
		lost(q, &t, &g, "group");
		mq_group_delete(q, &g);
		mq_commit(q);
	} else {
		mq_die(MQ_EX_USAGE, "unknown command '%s': want create, list, "
		    "show, set, delete, group or group-delete", cmd);
	}
	mq_close(q);
	c = mq_finish();
	return c ? c : status;
}
