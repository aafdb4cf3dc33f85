/*
 * mq-topic: administer topics and consumer groups.
 *
 *   create TOPIC [key=value ...]   list   show TOPIC
 *   set TOPIC key=value ...        delete [--force] TOPIC
 *   group TOPIC GROUP [options]    group-delete [--force] TOPIC GROUP
 *   cancel TOPIC OFFSET... [options]
 *   delay TOPIC OFFSET... --at TIME|--delay DUR [options]
 *   backup FILE                    outbox-init APPDB
 *
 * Every change is one operation of the storage interface; settings are
 * checked before the database is opened for writing (admin.c holds the
 * commands with options of their own).
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
    "                [--timeout DUR|none] [--idempotent-by dedup|key|field:N|none]\n"
    "                [--idempotent-window DUR] [--rate N/DUR|none]\n"
    "                [--per-key N|none]\n"
    "       mq-topic [-d FILE] group-delete [--force] TOPIC GROUP\n"
    "       mq-topic [-d FILE] cancel [-f] [--dry-run] [-g GROUP]\n"
    "                TOPIC OFFSET... | -k KEY TOPIC | --dedup ID TOPIC\n"
    "       mq-topic [-d FILE] delay (--at TIME | --delay DUR) [-f] "
    "[--dry-run]\n"
    "                [-g GROUP] TOPIC OFFSET... | -k KEY TOPIC | "
    "--dedup ID TOPIC\n"
    "       mq-topic [-d FILE] backup FILE\n"
    "       mq-topic outbox-init APPDB\n"
    "keys: retention=DUR|none dedup-window=DUR max-size=BYTES "
    "paused=WHEN|no\n      ttl=DUR|none\n";
static const char *const help[] = {
	"-f, --force",			"delete unsettled; cancel, delay in flight",
	"--lease DUR",			"group: lease deliveries for DUR (30s)",
	"--max-attempts N",		"group: dead letter after N deliveries",
	"--backoff LIST",		"group: waits before each retry",
	"--ordered",			"group: one at a time per key",
	"--unordered",			"group: in parallel whatever the key",
	"--from earliest|latest",	"group: where a new group starts",
	"--pause forever|DUR|TIME",	"group: hand nothing out until then",
	"--resume",			"group: hand out again, at once",
	"--timeout DUR|none",		"group: stop a handler that runs longer",
	"--idempotent-by ID",		"group: skip a business id acked before",
	"--idempotent-window DUR",	"group: how long an acked id counts (1d)",
	"--rate N/DUR|none",		"group: hand out at most N per DUR",
	"--per-key N|none",		"group: at most N of one key in flight",
	"-g, --group GROUP",		"cancel, delay: in this group only",
	"-k, --key KEY",		"cancel, delay: every message of KEY",
	"--dedup ID",			"cancel, delay: the message of dedup ID",
	"--at TIME",			"delay: due at TIME",
	"--delay DUR",			"delay: due DUR from now",
	"--dry-run",			"cancel, delay: say what would change",
	NULL,
};

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
	int c, i, n;

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
		mq_topic_show(q, mq_name_arg(argv[1], "topic"));
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
		q = mq_topic_group(dbpath, argc, argv);
	} else if (!strcmp(cmd, "backup")) {
		if (argc != 2)
			mq_usage_err("backup takes one FILE");
		q = mq_open(dbpath, MQ_READ);
		mq_backup(q, argv[1]);
	} else if (!strcmp(cmd, "cancel") || !strcmp(cmd, "delay")) {
		q = mq_topic_mark(dbpath, *cmd == 'c' ? MQ_CANCEL : MQ_DELAY,
		    force, argc, argv);
	} else if (!strcmp(cmd, "outbox-init")) {
		if (argc != 2)
			mq_usage_err("outbox-init takes one APPDB");
		mq_outbox_init(argv[1]);	/* the application's, not mq's */
		return mq_finish();
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
		    "show, set, delete, group, group-delete, cancel, delay, "
		    "backup or outbox-init", cmd);
	}
	mq_close(q);
	return mq_finish();
}
