/*
 * mq-topic: administer topics and consumer groups.
 *
 *   create TOPIC [key=value ...]   list   show TOPIC
 *   set TOPIC key=value ...        delete [--force] TOPIC
 *   group TOPIC GROUP [options]    group-delete [--force] TOPIC GROUP
 *
 * Every change is one operation of the storage interface; settings are
 * checked before the database is opened for writing.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "mq.h"

static const char *dbpath;
static int force;

static const char synopsis[] =
    "usage: mq-topic [-d FILE] create TOPIC [key=value ...]\n"
    "       mq-topic [-d FILE] list\n"
    "       mq-topic [-d FILE] show TOPIC\n"
    "       mq-topic [-d FILE] set TOPIC key=value ...\n"
    "       mq-topic [-d FILE] delete [--force] TOPIC\n"
    "       mq-topic [-d FILE] group TOPIC GROUP [--lease DUR] "
    "[--max-attempts N]\n"
    "                [--backoff LIST] [--ordered | --unordered]\n"
    "                [--from earliest|latest] [--pause WHEN | --resume]\n"
    "                [--timeout DUR|none]\n"
    "       mq-topic [-d FILE] group-delete [--force] TOPIC GROUP\n"
    "keys: retention=DUR|none dedup-window=DUR max-size=BYTES "
    "paused=WHEN|no\n";
static const char *const help[] = {
	"-f, --force",			"delete even what groups have not settled",
	"--lease DUR",			"group: lease deliveries for DUR (30s)",
	"--max-attempts N",		"group: dead letter after N deliveries",
	"--backoff LIST",		"group: waits before each retry",
	"--ordered",			"group: one at a time per key",
	"--unordered",			"group: in parallel whatever the key",
	"--from earliest|latest",	"group: where a new group starts",
	"--pause forever|DUR|TIME",	"group: hand nothing out until then",
	"--resume",			"group: hand out again, at once",
	"--timeout DUR|none",		"group: stop a handler that runs longer",
	NULL,
};

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
	char lease[32], tmo[40] = "";

	mq_format_duration(g->lease, lease, sizeof lease);
	if (g->timeout) {
		memcpy(tmo, "; timeout ", 11);
		mq_format_duration(g->timeout, tmo + 10, sizeof tmo - 10);
	}
	printf("group %s: position %lld, lag %lld, in-flight %lld, "
	    "retrying %lld, dead %lld, consumers %lld; lease %s, "
	    "max-attempts %d, %s, backoff %s%s%s%s\n", g->name,
	    (long long)g->pos, (long long)r->s.lag,
	    (long long)(r->s.inflight + r->s.expired), (long long)r->s.retrying,
	    (long long)r->s.dead, (long long)r->s.consumers, lease,
	    g->max_attempts, g->ordered ? "ordered" : "unordered", g->backoff,
	    *paused(g->paused_until) ? "; paused " : "",
	    paused(g->paused_until), tmo);
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

static void
show(struct mq *q, const char *name)
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
	if (*paused(t->paused_until))
		printf("paused %s\n", paused(t->paused_until));
	for (i = 0; i < L.n; i++)
		if (L.rows[i].has_group)
			print_group(&L.rows[i]);
	free(L.rows);
}

static void
deleted(int rc, const char *topic, const char *group, const struct mq_held *h)
{
	if (!force || (rc != MQ_E_NOTOPIC && rc != MQ_E_NOGROUP)) /* rm -f */
		mq_check(rc, topic, group);
	if (rc == MQ_E_HELD)
		mq_die(MQ_EX_NONE, "not deleting %s: group %s has %lld "
		    "unsettled messages (use --force)", group ? "group" : topic,
		    h->group, (long long)h->n);
}

static int
group(struct mq **q, int argc, char **argv)
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
		{ NULL, 0, NULL, 0 },
	};
	struct mq_group_conf gc = { MQ_KEEP, 0, -1, NULL, 0, MQ_KEEP, MQ_KEEP };
	struct mq_group g;
	struct mq_lag L;
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
	*q = mq_open(dbpath, MQ_WRITE);	/* once the options are good */
	mq_group_conf(*q, argv[optind], argv[optind + 1], &gc, &g);
	snapshot(*q, argv[optind], argv[optind + 1], &L);
	print_group(&L.rows[0]);
	free(L.rows);
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
	struct mq_topic_conf tc;
	struct mq_topic t, *all;
	struct mq_held h;
	struct mq *q;
	const char *cmd;
	int c, i, n, status = 0;

	mq_begin(argv, synopsis, help);
	while ((c = getopt_long(argc, argv, "+d:fhV", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dbpath = optarg; break;
		case 'f': force = 1; break;
		case 'h': mq_help();
		case 'V': mq_version();
		default: mq_usage();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc < 1)
		mq_usage_err("missing command");
	cmd = argv[0];
	/* "delete --force TOPIC" reads as well as "--force delete TOPIC" */
	if (!strcmp(cmd, "delete") || !strcmp(cmd, "group-delete")) {
		for (i = n = 1; i < argc; i++) {
			if (!strcmp(argv[i], "--force") || !strcmp(argv[i], "-f"))
				force = 1;
			else
				argv[n++] = argv[i];
		}
		argc = n;
	}

	if (!strcmp(cmd, "list")) {
		if (argc != 1)
			mq_usage_err("list takes no arguments");
		q = mq_open(dbpath, MQ_READ);
		n = mq_topic_list(q, &all);
		for (i = 0; i < n; i++)
			printf("%s\n", all[i].name);
		free(all);
	} else if (!strcmp(cmd, "show")) {
		if (argc != 2)
			mq_usage_err("show takes one TOPIC");
		q = mq_open(dbpath, MQ_READ);
		show(q, mq_name_arg(argv[1], "topic"));
	} else if (!strcmp(cmd, "create") || !strcmp(cmd, "set")) {
		if (argc < 2 || (!strcmp(cmd, "set") && argc < 3))
			mq_usage_err("%s needs TOPIC%s", cmd,
			    strcmp(cmd, "set") ? "" : " key=value ...");
		mq_name_arg(argv[1], "topic");
		mq_topic_settings(&tc, argc - 2, argv + 2);	/* check before opening */
		if (!strcmp(cmd, "set")) {
			q = mq_open(dbpath, MQ_UPDATE);
			mq_check(mq_topic_conf(q, argv[1], &tc, &t), argv[1],
			    NULL);
		} else {
			q = mq_open(dbpath, MQ_WRITE);
			if (!mq_topic_create(q, argv[1], &tc, &t))
				mq_die(MQ_EX_NONE, "topic %s exists", argv[1]);
		}
	} else if (!strcmp(cmd, "delete")) {
		if (argc != 2)
			mq_usage_err("delete takes one TOPIC");
		mq_name_arg(argv[1], "topic");
		q = mq_open(dbpath, MQ_UPDATE);
		c = mq_topic_delete(q, argv[1], force, &h);
		deleted(c, argv[1], NULL, &h);
	} else if (!strcmp(cmd, "group")) {
		status = group(&q, argc, argv);
	} else if (!strcmp(cmd, "group-delete")) {
		if (argc != 3)
			mq_usage_err("group-delete takes TOPIC GROUP");
		mq_name_arg(argv[1], "topic");
		mq_name_arg(argv[2], "group");
		q = mq_open(dbpath, MQ_UPDATE);
		deleted(mq_group_delete(q, argv[1], argv[2], force, &h), argv[1],
		    argv[2], &h);
	} else {
		mq_usage_err("unknown command '%s': want create, list, "
		    "show, set, delete, group or group-delete", cmd);
	}
	mq_close(q);
	c = mq_finish();
	return c ? c : status;
}
